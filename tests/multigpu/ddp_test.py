#!/usr/bin/env python3
"""A two-rank torchrun job, one rank killed with SIGKILL mid-loop, in three arms measured in
one run: plain torchrun; `gpuguard run -- torchrun ...`; torchrun starting `gpuguard run` in each
rank. For the guarded arms: both GPUs' memory back to the baseline within 2 s of the kill, the
surviving rank terminated (not hanging in its collective), the launcher's status a failure. The
plain arm is measured and printed for comparison, not judged.

usage: ddp_test.py GPUGUARD   (skips, status 77, with fewer than two GPUs; fails instead under
GPUGUARD_REQUIRE_GPUS=2)
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import check, finish, nvml_or_skip  # noqa: E402  (tests/support)
from procfs import alive, seconds_until  # noqa: E402

JOB = os.path.join(HERE, "ddp_job.py")
BACK_WITHIN_S = 2.0
TOLERANCE_MIB = 64
MIB = 1 << 20
# NVLink multicast stays off (the device machine's rule: it can take shared GPUs out of service).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def used_mib(nvml):
    """The two GPUs' used memory, in MiB."""
    return [nvml.used(index) / MIB for index in range(2)]


def run_arm(name, cmd, nvml):
    baseline = used_mib(nvml)
    env = dict(os.environ, **SAFE_ENV)
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
    pids, iters, lines = {}, {}, []

    def read():
        for line in launcher.stdout:
            lines.append(line)
            m = re.search(r"rank (\d) pid (\d+) iter (\d+)", line)
            if m:
                pids[int(m.group(1))] = int(m.group(2))
                iters[int(m.group(1))] = int(m.group(3))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    while min(iters.get(0, -1), iters.get(1, -1)) < 5 and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    result = {"arm": name, "baseline_mib": baseline}
    if min(iters.get(0, -1), iters.get(1, -1)) < 5:
        launcher.kill()
        result["error"] = "the ranks never reached iteration 5:\n" + "".join(lines[-30:])
        return result
    result["peak_mib"] = used_mib(nvml)
    killed_at = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    result["back_s"] = seconds_until(lambda: all(u - b <= TOLERANCE_MIB for u, b in zip(used_mib(nvml), baseline)),
                                     30, step=0.02, since=killed_at)
    try:
        launcher.wait(timeout=60)
        result["launcher_status"] = launcher.returncode
    except subprocess.TimeoutExpired:
        result["launcher_status"] = "still running after 60 s"
    result["survivor_alive"] = alive(pids[0])
    result["after_mib"] = used_mib(nvml)
    # Clean up whatever the arm left (the plain arm may leave a rank), then let the GPUs settle.
    try:
        os.killpg(launcher.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    launcher.wait()
    time.sleep(1)
    return result


def main():
    gpuguard = os.path.abspath(sys.argv[1])
    nvml = nvml_or_skip(devices=2)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    arms = [
        ("plain", torchrun + [JOB]),
        ("gpuguard run outside", [gpuguard, "run", "--grace", "1", "--"] + torchrun + [JOB]),
        ("gpuguard run in each rank", torchrun + ["--no-python", gpuguard, "run", "--grace", "1", "--",
                                                   sys.executable, JOB]),
    ]
    for name, cmd in arms:
        r = run_arm(name, cmd, nvml)
        print(f"--- {name}: {r}", flush=True)
        if not check("error" not in r, f"{name}: the ranks reached iteration 5", r.get("error")) or name == "plain":
            continue
        check(r["back_s"] is not None and r["back_s"] <= BACK_WITHIN_S,
              f"{name}: both GPUs back within {BACK_WITHIN_S} s of the kill", f"back_s={r['back_s']}")
        check(not r["survivor_alive"], f"{name}: the surviving rank is not left running")
        check(r["launcher_status"] not in (0, "still running after 60 s"),
              f"{name}: the launcher's status reports the failure", f"status {r['launcher_status']}")
    finish("ddp")


if __name__ == "__main__":
    main()
