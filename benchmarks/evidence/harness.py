#!/usr/bin/env python3
"""The evidence harness (docs/evidence.md): the failure scenarios that motivate gpuguard, each run
plain and under gpuguard, with device memory sampled from outside the job.

    python3 benchmarks/evidence/harness.py --scenario kill|abnormal|contention
        --job JOB [--gpuguard GPUGUARD] [--arms plain,guarded,doctor] [--trials 20]
        [--first-trial 0] [--rounds 5] [--out DIR] [--device nvml | --fake-device DIR] [--seed 1]
        [--main-mib 2048] [--worker-mib 1024] [--workers 2] [--post-s 10.3] [--doctor-after-s 2]

JOB is the training job (benchmarks/evidence/job.cpp, built as evidence_job; the CPU tests use a
stand-in with the same command line). Arms: "plain" runs JOB as it is; "guarded" runs
`GPUGUARD run --grace 2 -- JOB --guarded`; "doctor" runs JOB as plain does, then
`GPUGUARD doctor --reap` --doctor-after-s seconds after the fault, as an operator or a job epilog
would. Scenarios:

  kill        the job is sent SIGKILL (half the trials) or SIGTERM (the other half) at a random
              iteration; --trials per arm
  abnormal    the job throws an uncaught exception (half) or fails to allocate (out of memory,
              the other half) at a random iteration; --trials per arm
  contention  8 jobs of 4 GiB start together, 3 chosen at random die abnormally (SIGKILL or an
              exception) at random times; --rounds per arm

The fault is the moment the job is sent its signal, or the moment it says it is about to fail (a
"fault" line on its stdout, just before the exception or the failing allocation); residue and
time back are measured from it. A trial's sampling ends --post-s seconds after the fault, or
earlier once it has settled: the job's command has returned, no process of the trial is alive and
memory has been back at the baseline for SETTLE_S (nothing is left that could hold memory).

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics import TOLERANCE_MIB  # noqa: E402 (what counts as back, for the settle rule too)

SAMPLE_PERIOD_S = 0.02
SETTLE_S = 0.5
MARKER = "GPUGUARD_EVIDENCE_TRIAL"


# ---- device memory --------------------------------------------------------------------------------

class NvmlMemory:
    """Used MiB of one device, through NVML (no Python package needed)."""

    class _Info(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self, index=0):
        self.idle_mib = None  # the level before the first trial (trial_baseline)
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
        self.idle_mib = None  # the level before the first trial (trial_baseline)
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


def quiet_baseline(source, expect=None, window_s=0.5, limit_s=30.0):
    """The device's used MiB with no job: the median of a window of samples. With `expect` (the
    level before the first trial), it first waits until the level is back within the tolerance of
    it: after a trial's survivors were ended, the driver takes a while to give their memory back.
    After limit_s it measures anyway (something else holds memory; the report shows the level)."""
    deadline = time.monotonic() + limit_s
    while expect is not None and source.used_mib() > expect + TOLERANCE_MIB and time.monotonic() < deadline:
        time.sleep(SAMPLE_PERIOD_S)
    values = []
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        values.append(source.used_mib())
        time.sleep(SAMPLE_PERIOD_S)
    values.sort()
    return values[len(values) // 2]


def trial_baseline(source):
    """The level before a trial; the first one is what later ones wait to be back at."""
    level = quiet_baseline(source, expect=source.idle_mib)
    if source.idle_mib is None:
        source.idle_mib = level
    return level


# ---- processes ------------------------------------------------------------------------------------

def marked_processes(tag):
    """PIDs whose environment carries this trial's marker (the job and every descendant). `tag`
    may also be a predicate on the marker's value."""
    found = []
    prefix = f"{MARKER}=".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                values = [e[len(prefix):].decode(errors="replace") for e in f.read().split(b"\0") if e.startswith(prefix)]
        except OSError:
            continue
        if any(tag(v) if callable(tag) else v == tag for v in values):
            found.append(int(name))
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


def ours(value):
    """A marker of this harness run (tags end with the harness's PID)."""
    return value.rsplit("-", 1)[-1] == str(os.getpid())


def orphaned_by_a_dead_harness(value):
    """A marker whose harness is gone: what an interrupted earlier run left."""
    pid = value.rsplit("-", 1)[-1]
    return pid.isdigit() and not process_alive(int(pid))


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
        self.fault_at = None  # monotonic time of the job's "fault" line, or of the signal sent
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            arrived = time.monotonic()
            self.lines.append(line)
            parts = line.split()
            if len(parts) == 2 and parts[0] == "pid":
                self.job_pid = int(parts[1])
            elif len(parts) == 2 and parts[0] == "iter":
                self.iteration = int(parts[1])
            elif len(parts) == 2 and parts[0] == "fault" and self.fault_at is None:
                self.fault_at = arrived

    def wait_for_iteration(self, k, timeout):
        deadline = time.monotonic() + timeout
        while self.iteration < k and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.iteration >= k

    def kill(self, sig):
        """Sends `sig` to the job's own process (not the supervisor: the job is what dies); the
        moment it is sent is the fault."""
        if self.job_pid is not None:
            try:
                os.kill(self.job_pid, sig)
                self.fault_at = time.monotonic()
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


def run_doctor(args, out_dir, name):
    """`gpuguard doctor --reap` as an operator would run it after a job died: what it found and
    what it did, by action (docs/doctor.md: terminated, killed, gone, refused, survived, ...)."""
    cmd = [args.gpuguard, "doctor", "--reap", "--grace", "1", "--json"]
    if args.fake_device:
        cmd += ["--device-prefix", os.path.join(args.fake_device, "nvidia"), "--no-nvml"]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    with open(os.path.join(out_dir, f"{name}.doctor.stderr"), "w") as f:
        f.write(done.stderr)
    actions = {}
    try:
        # With --json and no --watch, the doctor prints one document.
        for holder in json.loads(done.stdout).get("holders", []):
            action = (holder.get("reap") or {}).get("action")
            if action:
                actions[action] = actions.get(action, 0) + 1
    except (json.JSONDecodeError, AttributeError):
        actions["unreadable_output"] = 1
    return {"status": describe_status(done.returncode), "actions": dict(sorted(actions.items())),
            "took_s": round(time.monotonic() - started, 3)}


def settle(source, baseline, tag, stop_at):
    """Waits until `stop_at` (monotonic), or until the trial has settled: no process of it alive
    and memory back at the baseline for SETTLE_S. Returns True when it settled."""
    back_since = None
    while time.monotonic() < stop_at:
        if source.used_mib() - baseline <= TOLERANCE_MIB and not marked_processes(tag):
            back_since = back_since or time.monotonic()
            if time.monotonic() - back_since >= SETTLE_S:
                return True
        else:
            back_since = None
        time.sleep(0.1)
    return False


# ---- scenarios ------------------------------------------------------------------------------------

def arms_of(args):
    if args.arms:
        return args.arms
    return ["plain", "guarded"] if args.scenario == "contention" else ["plain", "guarded", "doctor"]


def trial_rng(args, index):
    """The random draws of one trial index (the failing iteration; in contention, who dies and
    when): the same for every arm of the index, and for a run that resumes or splits the work."""
    return random.Random(f"{args.seed}-{args.scenario}-{index}")


def plan(args):
    """(arm, trial index, variant) of every trial, arms interleaved."""
    count = args.rounds if args.scenario == "contention" else args.trials
    variants = {"kill": ["SIGKILL", "SIGTERM"], "abnormal": ["throw", "oom"], "contention": ["mixed"]}[args.scenario]
    trials = []
    for i in range(args.first_trial, args.first_trial + count):
        for arm in arms_of(args):
            trials.append((arm, i, variants[i % len(variants)]))
    return trials


def rel(t, t0):
    return None if t is None else round(t - t0, 4)


def run_single(args, source, arm, index, variant, out_dir):
    tag = f"{args.scenario}-{arm}-{index}-{os.getpid()}"
    baseline = trial_baseline(source)
    fail_at = trial_rng(args, index).randint(args.min_iter, args.max_iter)
    t0 = time.monotonic()
    doctor = None
    with Sampler(source, t0) as sampler:
        fail = variant if variant in ("throw", "oom") else "none"
        job = Job(args, arm, tag, fail, fail_at, args.main_mib, out_dir, tag)
        if variant in ("SIGKILL", "SIGTERM"):
            if job.wait_for_iteration(fail_at, timeout=120):
                job.kill(getattr(signal, variant))
        code, text = job.reap(timeout=300)
        fault = job.fault_at if job.fault_at is not None else job.ended
        if arm == "doctor":
            time.sleep(max(0.0, fault + args.doctor_after_s - time.monotonic()))
            doctor = dict(run_doctor(args, out_dir, tag), at_s=rel(time.monotonic(), t0))
        settled = settle(source, baseline, tag, fault + args.post_s)
    survivors = end_survivors(tag)
    trial = {"scenario": args.scenario, "arm": arm, "trial": index, "variant": variant, "fail_at": fail_at,
             "baseline_mib": baseline, "fault_s": rel(fault, t0), "end_s": rel(job.ended, t0),
             "settled": settled, "samples": sampler.samples, "status": describe_status(code),
             "errors": error_kinds(text), "survivors": survivors, "abnormal": 1}
    if doctor is not None:
        trial["doctor"] = doctor
    return trial


def run_contention(args, source, arm, index, out_dir):
    tag = f"{args.scenario}-{arm}-{index}-{os.getpid()}"
    baseline = trial_baseline(source)
    t0 = time.monotonic()
    rng = trial_rng(args, index)
    doomed = set(rng.sample(range(args.processes), args.abnormal))
    doctor = None
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
        ended = max(job.ended for job in jobs)
        faults = [job.fault_at for job in jobs if job.fault_at is not None]
        if arm == "doctor":
            time.sleep(max(0.0, ended + args.doctor_after_s - time.monotonic()))
            doctor = dict(run_doctor(args, out_dir, tag), at_s=rel(time.monotonic(), t0))
        # A round is over when its last job has ended: residue counts from there.
        settled = settle(source, baseline, tag, ended + args.post_s)
    survivors = end_survivors(tag)
    statuses = [describe_status(code) for code, _ in results]
    errors = sorted({kind for _, text in results for kind in error_kinds(text)})
    trial = {"scenario": "contention", "arm": arm, "trial": index, "variant": "mixed",
             "baseline_mib": baseline, "end_s": rel(ended, t0), "fault_s": rel(ended, t0),
             "faults_s": sorted(rel(f, t0) for f in faults), "settled": settled, "samples": sampler.samples,
             "status": ", ".join(sorted(set(statuses))), "statuses": statuses, "errors": errors,
             "survivors": survivors, "abnormal": len(doomed)}
    if doctor is not None:
        trial["doctor"] = doctor
    return trial


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", required=True, choices=["kill", "abnormal", "contention"])
    parser.add_argument("--job", required=True, help="the training job (evidence_job)")
    parser.add_argument("--gpuguard", default="gpuguard", help="the gpuguard command, for the guarded and doctor arms")
    parser.add_argument("--arms", type=lambda v: v.split(","),
                        help="arms to run, comma-separated, of plain, guarded, doctor "
                             "(default: all three; contention: plain,guarded)")
    parser.add_argument("--trials", type=int, default=20, help="trials per arm (kill, abnormal)")
    parser.add_argument("--first-trial", type=int, default=0,
                        help="index of the first trial or round (to split a scenario over several runs, "
                             "each with its own --seed and --first-trial; report.py merges them)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per arm (contention)")
    parser.add_argument("--out", default="evidence-out")
    parser.add_argument("--resume", action="store_true",
                        help="skip the trials already recorded in --out's trials.jsonl")
    parser.add_argument("--deadline-s", type=float,
                        help="start no trial index (all its arms) that the longest one so far says would end "
                             "after this many seconds; --resume continues")
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
    parser.add_argument("--post-s", type=float, default=10.3,
                        help="sampling after the fault, at most (>= 10 s for the 10 s residue; a trial that "
                             "has settled ends earlier)")
    parser.add_argument("--doctor-after-s", type=float, default=2.0,
                        help="doctor arm: seconds from the fault (contention: from the last job's end) to "
                             "`gpuguard doctor --reap`")
    args = parser.parse_args()
    if args.trials < 1 or args.rounds < 1 or args.min_iter < 1 or args.max_iter < args.min_iter:
        parser.error("--trials and --rounds must be positive, and 1 <= --min-iter <= --max-iter")
    if args.first_trial < 0:
        parser.error("--first-trial must not be negative")
    if args.arms is not None and (not args.arms or any(a not in ("plain", "guarded", "doctor") for a in args.arms)
                                  or len(set(args.arms)) != len(args.arms)):
        parser.error(f"--arms {','.join(args.arms)}: expected distinct arms of plain, guarded, doctor")
    if not 0 <= args.abnormal <= args.processes:
        parser.error("--abnormal must be between 0 and --processes")
    if args.deadline_s is not None and args.deadline_s <= 0:
        parser.error("--deadline-s must be positive")
    if args.post_s <= 0 or args.doctor_after_s < 0:
        parser.error("--post-s must be positive and --doctor-after-s not negative")
    if not os.access(args.job, os.X_OK):
        parser.error(f"--job {args.job}: not an executable file")

    source = FakeMemory(args.fake_device) if args.fake_device else NvmlMemory()
    os.makedirs(args.out, exist_ok=True)
    trials_path = os.path.join(args.out, "trials.jsonl")
    done = recorded(trials_path) if args.resume else set()
    todo = [t for t in plan(args) if (t[0], t[1]) not in done]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from run_benchmarks import describe_machine  # noqa: E402 (one machine description for every report)
    run_info = {"scenario": args.scenario, "argv": sys.argv, "machine": describe_machine(),
                "torch": torch_version(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "fake_device": bool(args.fake_device), "resumed_after": len(done)}
    run_path = os.path.join(args.out, f"run-{args.scenario}-{args.first_trial}-{len(done)}.json")
    with open(run_path, "w") as f:
        json.dump(run_info, f, indent=2)
    # A run stopped from outside (a timeout) ends the trial in progress and what it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    left = end_survivors(orphaned_by_a_dead_harness)
    if left:
        print(f"ended {left} process(es) left by an interrupted earlier run", file=sys.stderr, flush=True)
    started = time.monotonic()
    longest = {}  # the longest time one trial index took, all arms: what the deadline must leave room for
    try:
        with open(trials_path, "a") as out:
            for n, (arm, index, variant) in enumerate(todo, 1):
                if args.deadline_s is not None and index not in longest:
                    need = max(longest.values(), default=0.0)
                    if time.monotonic() - started + need > args.deadline_s:
                        print(f"deadline: {args.deadline_s:.0f} s would pass in the next trial; "
                              f"{len(todo) - n + 1} trial(s) left for a later run (--resume)", file=sys.stderr, flush=True)
                        break
                trial_start = time.monotonic()
                if args.scenario == "contention":
                    trial = run_contention(args, source, arm, index, args.out)
                else:
                    trial = run_single(args, source, arm, index, variant, args.out)
                longest[index] = longest.get(index, 0.0) + time.monotonic() - trial_start
                out.write(json.dumps(trial) + "\n")
                out.flush()
                peak = max((u for _, u in trial["samples"]), default=0.0) - trial["baseline_mib"]
                last = trial["samples"][-1][1] - trial["baseline_mib"] if trial["samples"] else 0.0
                doctor = f", doctor {trial['doctor']['actions']}" if "doctor" in trial else ""
                print(f"[{n}/{len(todo)} {time.monotonic() - started:.0f} s] {args.scenario} {arm} #{index} {variant}: "
                      f"{trial['status']}, peak +{peak:.0f} MiB, {last:+.0f} MiB at the end"
                      f"{' (settled)' if trial['settled'] else ''}, {trial['survivors']} survivor(s){doctor}",
                      file=sys.stderr, flush=True)
    finally:
        end_survivors(ours)
    print(trials_path)
    return 0


def recorded(trials_path):
    """(arm, index) of the trials already in trials.jsonl (--resume); a torn last line is ignored
    (that trial runs again)."""
    done = set()
    try:
        with open(trials_path) as f:
            for line in f:
                try:
                    t = json.loads(line)
                    done.add((t["arm"], t["trial"]))
                except (json.JSONDecodeError, KeyError):
                    pass
    except FileNotFoundError:
        pass
    return done


def torch_version():
    """The PyTorch the job was built against, as Python sees it (None where there is none)."""
    try:
        done = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return None
        return done.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


if __name__ == "__main__":
    sys.exit(main())
