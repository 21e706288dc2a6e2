#!/usr/bin/env python3
"""The evidence harness (docs/evidence.md): the failure scenarios that motivate gpuguard, each run
plain and under gpuguard, with device memory sampled from outside the job.

    python3 benchmarks/evidence/harness.py --scenario kill|abnormal|contention
        --job JOB [--gpuguard GPUGUARD] [--trials 20] [--rounds 5] [--out DIR]
        [--device nvml | --fake-device DIR] [--seed 1] [--main-mib 2048] [--worker-mib 1024]
        [--workers 2] [--post-s 10.3]

JOB is the training job (benchmarks/evidence/job.cpp, built as evidence_job; the CPU tests use a
stand-in with the same command line). Arms: "plain" runs JOB as it is; "guarded" runs
`GPUGUARD run --grace 2 -- JOB --guarded`. Scenarios:

  kill        the job is sent SIGKILL (half the trials) or SIGTERM (the other half) at a random
              iteration; --trials per arm
  abnormal    the job throws an uncaught exception (half) or fails to allocate (out of memory,
              the other half) at a random iteration; --trials per arm
  contention  8 jobs of 4 GiB start together, 3 chosen at random die abnormally (SIGKILL or an
              exception) at random times; --rounds per arm

Device memory comes from NVML (libnvidia-ml.so.1 through ctypes: used bytes of device 0), or,
with --fake-device DIR, from a stand-in that behaves like the driver: a process holds the MiB
written in DIR/<pid> until it has exited. Every trial is appended to DIR/trials.jsonl as it ends
(metrics.py reads it), and what survived a plain trial is ended after the measurement, so the
next trial starts clean. Progress goes to stderr, a line per trial.
"""
import argparse
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

SAMPLE_PERIOD_S = 0.02
MARKER = "GPUGUARD_EVIDENCE_TRIAL"


# ---- device memory --------------------------------------------------------------------------------

class NvmlMemory:
    """Used MiB of one device, through NVML (no Python package needed)."""

    class _Info(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self, index=0):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)) != 0:
            raise RuntimeError(f"no NVML device {index}")

    def used_mib(self):
        info = self._Info()
        if self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(info)) != 0:
            raise RuntimeError("nvmlDeviceGetMemoryInfo failed")
        return info.used / (1 << 20)


def process_alive(pid):
    """True while the process exists and has not exited (a zombie holds no device memory: its
    files, /dev/nvidia* among them, were closed when it exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


class FakeMemory:
    """The driver's rule without a GPU: DIR/<pid> holds MiB while process <pid> is alive."""

    def __init__(self, directory):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)

    def used_mib(self):
        total = 0.0
        for name in os.listdir(self.directory):
            if not name.isdigit():
                continue
            if not process_alive(int(name)):
                continue
            try:
                with open(os.path.join(self.directory, name)) as f:
                    total += float(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
        return total


class Sampler:
    """Samples used MiB every 20 ms on a thread, on the harness's clock (seconds since t0)."""

    def __init__(self, source, t0):
        self.source, self.t0, self.samples = source, t0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append([round(time.monotonic() - self.t0, 4), round(self.source.used_mib(), 1)])
            self._stop.wait(SAMPLE_PERIOD_S)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def quiet_baseline(source, seconds=0.5):
    """The device's used MiB with no job: the median of a short run of samples."""
    values = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        values.append(source.used_mib())
        time.sleep(SAMPLE_PERIOD_S)
    values.sort()
    return values[len(values) // 2]


# ---- processes ------------------------------------------------------------------------------------

def marked_processes(tag):
    """PIDs whose environment carries this trial's marker (the job and every descendant)."""
    found = []
    needle = f"{MARKER}={tag}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            pass
    return [p for p in found if process_alive(p)]


def end_survivors(tag):
    """Kills what a trial left running (after it was measured); returns how many there were."""
    survivors = marked_processes(tag)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while marked_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(survivors)


def describe_status(code):
    if code is None:
        return "running"
    if code < 0:
        return f"signal {-code}"
    if code > 128 and code - 128 < 65:
        return f"exit {code} (signal {code - 128})"
    return f"exit {code}"


ERROR_KINDS = [
    ("out_of_memory", ("out of memory", "OutOfMemoryError")),
    ("uncaught_exception", ("terminate called", "Traceback (most recent call last)")),
    ("cuda_error", ("CUDA error",)),
    ("gpuguard_leak_report", ("[gpuguard] LEAK",)),
    ("gpuguard_crash_record", ("[gpuguard] CRASH", "[gpuguard] fatal signal")),
    ("gpuguard_residue", ("[gpuguard run] residue", "still hold")),
]


def error_kinds(text):
    return [kind for kind, needles in ERROR_KINDS if any(n in text for n in needles)]


class Job:
    """One job of a trial: started, watched for its iterations, maybe killed, reaped."""

    def __init__(self, args, arm, tag, fail, fail_at, main_mib, out_dir, name):
        cmd = [args.job, "--iters", str(args.iters), "--main-mib", str(main_mib), "--workers", str(args.workers),
               "--worker-mib", str(args.worker_mib), "--fail", fail, "--fail-at", str(fail_at)]
        if arm == "guarded":
            cmd = [args.gpuguard, "run", "--grace", "2", "--"] + cmd + ["--guarded"]
        env = dict(os.environ, **{MARKER: tag})
        if args.fake_device:
            env["GPUGUARD_EVIDENCE_FAKE_DEVICE"] = args.fake_device
        self.stderr_path = os.path.join(out_dir, f"{name}.stderr")
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.job_pid = None
        self.iteration = -1
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            parts = line.split()
            if len(parts) == 2 and parts[0] == "pid":
                self.job_pid = int(parts[1])
            elif len(parts) == 2 and parts[0] == "iter":
                self.iteration = int(parts[1])

    def wait_for_iteration(self, k, timeout):
        deadline = time.monotonic() + timeout
        while self.iteration < k and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.iteration >= k

    def kill(self, sig):
        """Sends `sig` to the job's own process (not the supervisor: the job is what dies)."""
        if self.job_pid is not None:
            try:
                os.kill(self.job_pid, sig)
            except ProcessLookupError:
                pass

    def reap(self, timeout):
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.ended = time.monotonic()
        # Workers that outlive the job keep its stdout open: do not wait for the reader.
        self._reader.join(timeout=0.2)
        self.stderr.close()
        with open(self.stderr_path, errors="replace") as f:
            text = f.read()
        return code, text


# ---- scenarios ------------------------------------------------------------------------------------

def plan(args, rng):
    """(arm, trial index, variant) of every trial, arms interleaved."""
    count = args.rounds if args.scenario == "contention" else args.trials
    variants = {"kill": ["SIGKILL", "SIGTERM"], "abnormal": ["throw", "oom"], "contention": ["mixed"]}[args.scenario]
    trials = []
    for i in range(count):
        for arm in ("plain", "guarded"):
            trials.append((arm, i, variants[i % len(variants)]))
    return trials


def run_single(args, source, arm, index, variant, rng, out_dir):
    tag = f"{args.scenario}-{arm}-{index}-{os.getpid()}"
    baseline = quiet_baseline(source)
    t0 = time.monotonic()
    fail_at = rng.randint(args.min_iter, args.max_iter)
    with Sampler(source, t0) as sampler:
        fail = variant if variant in ("throw", "oom") else "none"
        job = Job(args, arm, tag, fail, fail_at, args.main_mib, out_dir, tag)
        if variant in ("SIGKILL", "SIGTERM"):
            if job.wait_for_iteration(fail_at, timeout=120):
                job.kill(getattr(signal, variant))
        code, text = job.reap(timeout=300)
        end_s = job.ended - t0
        time.sleep(args.post_s)
    survivors = end_survivors(tag)
    return {"scenario": args.scenario, "arm": arm, "trial": index, "variant": variant, "fail_at": fail_at,
            "baseline_mib": baseline, "end_s": round(end_s, 4), "samples": sampler.samples,
            "status": describe_status(code), "errors": error_kinds(text), "survivors": survivors,
            "abnormal": 1}


def run_contention(args, source, arm, index, rng, out_dir):
    tag = f"{args.scenario}-{arm}-{index}-{os.getpid()}"
    baseline = quiet_baseline(source)
    t0 = time.monotonic()
    doomed = set(rng.sample(range(args.processes), args.abnormal))
    with Sampler(source, t0) as sampler:
        jobs, fates = [], []
        for p in range(args.processes):
            fate = rng.choice(["SIGKILL", "throw"]) if p in doomed else "none"
            fail_at = rng.randint(args.min_iter, args.max_iter)
            fates.append((fate, fail_at))
            fail = "throw" if fate == "throw" else "none"
            jobs.append(Job(args, arm, tag, fail, fail_at, args.contention_mib, out_dir, f"{tag}-p{p}"))
        for job, (fate, fail_at) in zip(jobs, fates):
            if fate == "SIGKILL" and job.wait_for_iteration(fail_at, timeout=120):
                job.kill(signal.SIGKILL)
        results = [job.reap(timeout=300) for job in jobs]
        end_s = max(job.ended for job in jobs) - t0
        time.sleep(args.post_s)
    survivors = end_survivors(tag)
    statuses = [describe_status(code) for code, _ in results]
    errors = sorted({kind for _, text in results for kind in error_kinds(text)})
    return {"scenario": "contention", "arm": arm, "trial": index, "variant": "mixed",
            "baseline_mib": baseline, "end_s": round(end_s, 4), "samples": sampler.samples,
            "status": ", ".join(sorted(set(statuses))), "statuses": statuses, "errors": errors,
            "survivors": survivors, "abnormal": len(doomed)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", required=True, choices=["kill", "abnormal", "contention"])
    parser.add_argument("--job", required=True, help="the training job (evidence_job)")
    parser.add_argument("--gpuguard", default="gpuguard", help="the gpuguard command, for the guarded arm")
    parser.add_argument("--trials", type=int, default=20, help="trials per arm (kill, abnormal)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per arm (contention)")
    parser.add_argument("--out", default="evidence-out")
    source_group = parser.add_mutually_exclusive_group()
    source_group.add_argument("--device", default="nvml", choices=["nvml"])
    source_group.add_argument("--fake-device", metavar="DIR", help="the driver's rule on files, for tests")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--iters", type=int, default=1000, help="iterations the job would run undisturbed")
    parser.add_argument("--min-iter", type=int, default=5)
    parser.add_argument("--max-iter", type=int, default=30)
    parser.add_argument("--main-mib", type=int, default=2048)
    parser.add_argument("--worker-mib", type=int, default=1024)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--processes", type=int, default=8, help="jobs per contention round")
    parser.add_argument("--abnormal", type=int, default=3, help="of those, how many die abnormally")
    parser.add_argument("--contention-mib", type=int, default=4096)
    parser.add_argument("--post-s", type=float, default=10.3, help="sampling after the job ended (>= 10 s for the 10 s residual)")
    args = parser.parse_args()
    if args.trials < 1 or args.rounds < 1 or args.min_iter < 1 or args.max_iter < args.min_iter:
        parser.error("--trials and --rounds must be positive, and 1 <= --min-iter <= --max-iter")
    if not 0 <= args.abnormal <= args.processes:
        parser.error("--abnormal must be between 0 and --processes")
    if not os.access(args.job, os.X_OK):
        parser.error(f"--job {args.job}: not an executable file")

    source = FakeMemory(args.fake_device) if args.fake_device else NvmlMemory()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    trials_path = os.path.join(args.out, "trials.jsonl")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from run_benchmarks import describe_machine  # noqa: E402 (one machine description for every report)
    run_info = {"scenario": args.scenario, "argv": sys.argv, "machine": describe_machine(),
                "date": time.strftime("%Y-%m-%d", time.gmtime()), "fake_device": bool(args.fake_device)}
    with open(os.path.join(args.out, f"run-{args.scenario}.json"), "w") as f:
        json.dump(run_info, f, indent=2)
    todo = plan(args, rng)
    started = time.monotonic()
    with open(trials_path, "a") as out:
        for n, (arm, index, variant) in enumerate(todo, 1):
            if args.scenario == "contention":
                trial = run_contention(args, source, arm, index, rng, args.out)
            else:
                trial = run_single(args, source, arm, index, variant, rng, args.out)
            out.write(json.dumps(trial) + "\n")
            out.flush()
            peak = max((u for _, u in trial["samples"]), default=0.0) - trial["baseline_mib"]
            last = trial["samples"][-1][1] - trial["baseline_mib"] if trial["samples"] else 0.0
            print(f"[{n}/{len(todo)} {time.monotonic() - started:.0f} s] {args.scenario} {arm} #{index} {variant}: "
                  f"{trial['status']}, peak +{peak:.0f} MiB, {last:+.0f} MiB at the end, "
                  f"{trial['survivors']} survivor(s)", file=sys.stderr, flush=True)
    print(trials_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
