#!/usr/bin/env python3
"""`gpuguard doctor` on a real GPU, with real CUDA holders (ctest gpu.doctor, run by the GPU runner; CPU
machines have tests/cli/doctor/doctor_test.py with fake devices and a fake NVML):

  - a trainer started as its own job spawns a worker (multiprocessing, spawn) that holds 1 GiB;
    the trainer is kill -9ed: the worker must be classified orphaned, with NVML memory >= 1 GiB and
    /dev/nvidia* descriptors
  - a DataLoader-shaped job started from a script without job control (bash -c, as Slurm batch
    scripts, CI and Docker entrypoints start jobs): two forked workers hold 512 MiB each through
    torch; the main process is kill -9ed while the script lives on as their process group's leader:
    the workers must be classified orphaned and --reap must give their memory back per NVML, the
    script untouched
  - a live CUDA process (child of this script) is running, then stopped after SIGSTOP
  - --reap ends the orphan and leaves the live one; --watch shows the memory come back
  - --reap --pid ends the live one
  - a CUDA process that exited but is not collected (a zombie): what NVML and the doctor say

usage: doctor_gpu_check.py GPUGUARD_BINARY
Exit status 0 when every check passed, 1 otherwise; 77 when there is no CUDA device (1 then
with GPUGUARD_REQUIRE_GPU=1, as the GPU runner sets).
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "support"))
from harness import (SPAWNED_HOLDER_JOB, check, echo_checks, finish, scratch,  # noqa: E402  (tests/support)
                     torch_cuda_or_skip, write_text)
from procfs import seconds_until, stat  # noqa: E402

GiB = 1 << 30

HOLD = textwrap.dedent("""
    import sys, time, torch
    x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exit":
        sys.exit(0)
    time.sleep(600)
""")

# A job's main process with two DataLoader-like workers (fork, as DataLoader's default on Linux:
# their command line is the main process's, no multiprocessing hint): each allocates 512 MiB
# through torch; the main process prints its PID and the workers' and waits. CUDA is initialised in
# the workers only (a forked child cannot use its parent's CUDA context).
JOB = textwrap.dedent("""
    import multiprocessing as mp, os, time
    import torch
    def worker(q):
        x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        q.put(os.getpid())
        time.sleep(600)
    if __name__ == "__main__":
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        workers = [ctx.Process(target=worker, args=(q,)) for _ in range(2)]
        for w in workers:
            w.start()
        pids = sorted(q.get() for _ in workers)
        print(os.getpid(), *pids, flush=True)
        time.sleep(600)
""")


def start_time(pid):
    """`pid`'s start time while it runs (with the PID, its identity), None once it exited."""
    s = stat(pid)
    return s.start_time if s is not None and s.state not in ("Z", "X") else None


def check_job_from_a_script(workdir):
    """Shape (a): the job started from bash -c without job control, main kill -9ed."""
    job_file = write_text(os.path.join(workdir, "job.py"), JOB)
    # The script leads its session and group (as a batch script does) and outlives the job.
    script = subprocess.Popen(["bash", "-c", f"{sys.executable} {job_file}; sleep 600"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True, cwd=workdir)
    main, *workers = (int(x) for x in script.stdout.readline().split())
    identities = {w: start_time(w) for w in workers}
    try:
        time.sleep(0.5)
        rc, docs, err = doctor()
        before = docs[0]
        for w in workers:
            h = holder(before, w)
            check(h is not None and h["class"] == "running" and not h["orphaned"],
                  f"script job: worker {w} of a live main process is running", h and h["why"])
        used_before = before["devices"][0]["used_bytes"]
        os.kill(main, signal.SIGKILL)
        # until the workers are reparented
        seconds_until(lambda: not any(getattr(stat(w), "ppid", None) == main for w in workers), 10, step=0.05)
        rc, docs, err = doctor()
        doc = docs[0]
        print("script job after kill -9 of the main process:", json.dumps([holder(doc, w) for w in workers], indent=1))
        for w in workers:
            h = holder(doc, w)
            check(h is not None and h["class"] == "orphaned", f"script job: worker {w} is orphaned", h and h["why"])
            check(h is not None and h["pgid"] == script.pid, "script job: the live script still leads its group",
                  h and h["pgid"])
            check(h is not None and (h["gpu_memory_bytes"] or 0) >= 512 << 20,
                  f"script job: NVML attributes >= 512 MiB to worker {w}", h and h["gpu_memory"])
        rc, docs, err = doctor("--reap", "--grace", "5", "--watch", "0.2", "--count", "10")
        for w in workers:
            h = holder(docs[0], w)
            check(h is not None and h["reap"] is not None and h["reap"]["action"] in ("terminated", "killed"),
                  f"script job: --reap ends worker {w}", h and h["reap"])
        check(all(holder(docs[-1], w) is None for w in workers), "script job: the workers leave NVML's list",
              [h["pid"] for h in docs[-1]["holders"]])
        used_after = docs[-1]["devices"][0]["used_bytes"]
        check(used_before - used_after >= (1 << 30) * 0.9, "script job: about 1 GiB came back per NVML",
              (used_before, used_after))
        check(script.poll() is None, "script job: the script (a live group leader, no holder) was not signalled")
        print(f"script job: used {used_before} -> {used_after}")
    finally:
        for w, t in identities.items():
            if t is not None and start_time(w) == t:
                os.kill(w, signal.SIGKILL)
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
        script.wait()


def doctor(*args):
    r = subprocess.run([GPUGUARD, "doctor", "--json", *args], capture_output=True, text=True, timeout=120)
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    return r.returncode, docs, r.stderr


def holder(doc, pid):
    return next((h for h in doc["holders"] if h["pid"] == pid), None)


def main():
    global GPUGUARD
    GPUGUARD = sys.argv[1]
    torch_cuda_or_skip()
    echo_checks()

    rc, docs, err = doctor()
    base = docs[0]
    print("baseline:", json.dumps({k: base[k] for k in ("nvml", "holder_count", "residue_bytes", "pid_namespace")}))
    check(base["nvml"]["available"], "NVML loads through dlopen", base["nvml"]["note"])
    check(len(base["devices"]) >= 1 and base["devices"][0]["total_bytes"], "NVML reports devices", base["devices"])
    print("devices:", json.dumps(base["devices"]))

    # The case docs/design.md measured: a spawned worker outlives its kill -9ed trainer.
    trainer = subprocess.Popen([sys.executable, SPAWNED_HOLDER_JOB, str(GiB), "wait"], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    worker = int(trainer.stdout.readline().split()[1])
    os.kill(trainer.pid, signal.SIGKILL)
    trainer.wait()
    live = subprocess.Popen([sys.executable, "-c", HOLD, str(512 << 20)], stdout=subprocess.PIPE, text=True)
    assert live.stdout.readline().strip() == "ready"
    time.sleep(0.5)

    rc, docs, err = doctor()
    doc = docs[0]
    print("with holders:", json.dumps(doc["holders"], indent=1))
    check(rc == 1, "exit status 1 with holders", rc)
    w = holder(doc, worker)
    check(w is not None, "the orphaned worker is listed", [h["pid"] for h in doc["holders"]])
    if w:
        check(w["class"] == "orphaned", "the worker is classified orphaned", w["why"])
        check((w["gpu_memory_bytes"] or 0) >= GiB, "NVML attributes >= 1 GiB to the worker (PIDs match here)",
              w["gpu_memory"])
        check(any(f["path"].startswith("/dev/nvidia") for f in w["files"]), "the worker holds /dev/nvidia*",
              w["files"])
    h = holder(doc, live.pid)
    check(h is not None and h["class"] == "running", "the live CUDA process is running", h and h["why"])
    check(h is not None and (h["gpu_memory_bytes"] or 0) >= 512 << 20, "NVML memory of the live one", h)

    os.kill(live.pid, signal.SIGSTOP)
    time.sleep(0.3)
    rc, docs, err = doctor("--pid", str(live.pid))
    h = holder(docs[0], live.pid)
    check(h is not None and h["class"] == "stopped", "SIGSTOP: stopped", h and h["class"])
    os.kill(live.pid, signal.SIGCONT)

    used_before = docs[0]["devices"][0]["used_bytes"]
    t0 = time.monotonic()
    rc, docs, err = doctor("--reap", "--grace", "5", "--watch", "0.2", "--count", "10")
    w = holder(docs[0], worker)
    check(w is not None and w["reap"] and w["reap"]["action"] in ("terminated", "killed"), "--reap ends the orphan",
          w and w["reap"])
    h = holder(docs[0], live.pid)
    check(h is not None and h["reap"] is None and live.poll() is None, "--reap leaves the live one", h and h["reap"])
    gone_at = next((d["watch"]["elapsed_s"] for d in docs if holder(d, worker) is None), None)
    check(gone_at is not None, "the orphan leaves NVML's list within the watch", gone_at)
    used_after = docs[-1]["devices"][0]["used_bytes"]
    check(used_before - used_after >= GiB * 0.9, "about 1 GiB came back", (used_before, used_after))
    print(f"orphan gone from NVML after {gone_at} s of watching; used {used_before} -> {used_after}; "
          f"trend {docs[-1]['watch']['residue_trend']}; took {time.monotonic() - t0:.1f} s")

    rc, docs, err = doctor("--reap", "--pid", f"{live.pid}:{holder(docs[-1], live.pid)['start_time'] + 1}")
    check(holder(docs[0], live.pid)["reap"]["action"] == "refused" and live.poll() is None,
          "--pid with another start time is not signalled")
    rc, docs, err = doctor("--reap", "--grace", "5", "--pid", str(live.pid))
    check(holder(docs[0], live.pid)["reap"]["action"] == "terminated", "--reap --pid ends a running holder",
          holder(docs[0], live.pid)["reap"])
    live.wait(timeout=30)

    # A CUDA process that exited and is not collected.
    z = subprocess.Popen([sys.executable, "-c", HOLD, str(256 << 20), "exit"], stdout=subprocess.PIPE, text=True)
    z.stdout.readline()
    time.sleep(2)
    rc, docs, err = doctor("--pid", str(z.pid))
    h = holder(docs[0], z.pid)
    print("zombie:", json.dumps(h))
    check(h is not None and h["class"] == "zombie", "an uncollected CUDA process is a zombie", h and h["class"])
    z.wait()

    check_job_from_a_script(scratch("gpuguard-doctor-gpu-"))

    rc, docs, err = doctor()
    print("after:", json.dumps({"holder_count": docs[0]["holder_count"], "residue_bytes": docs[0]["residue_bytes"],
                                "exit": rc}))
    finish("doctor_gpu_check")


if __name__ == "__main__":
    main()
