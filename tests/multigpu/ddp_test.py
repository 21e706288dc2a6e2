#!/usr/bin/env python3
"""Issue 9: a two-rank torchrun job, one rank killed with SIGKILL mid-loop, in three arms measured in
one run: plain torchrun; `gpuguard run -- torchrun ...`; torchrun starting `gpuguard run` in each
rank. For the guarded arms: both GPUs' memory back to the baseline within 2 s of the kill, the
surviving rank terminated (not hanging in its collective), the launcher's status a failure. The
plain arm is measured and printed for comparison, not judged.

usage: ddp_test.py GPUGUARD   (skips, status 77, with fewer than two GPUs; fails instead under
GPUGUARD_REQUIRE_GPUS=2)
"""
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "ddp_job.py")
BACK_WITHIN_S = 2.0
TOLERANCE_MIB = 64
# NVLink multicast stays off (the device machine's rule: it can take shared GPUs out of service).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class Nvml:
    class Info(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self.lib.nvmlInit_v2()
        count = ctypes.c_uint()
        self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        self.handles = []
        for i in range(count.value):
            h = ctypes.c_void_p()
            self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
            self.handles.append(h)

    def used_mib(self):
        out = []
        for h in self.handles[:2]:
            info = self.Info()
            self.lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(info))
            out.append(info.used / (1 << 20))
        return out


def gpu_count():
    try:
        return len(Nvml().handles)
    except OSError:
        return 0


def run_arm(name, cmd, nvml):
    baseline = nvml.used_mib()
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
    result["peak_mib"] = nvml.used_mib()
    killed_at = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    back_at = None
    while time.monotonic() - killed_at < 30:
        used = nvml.used_mib()
        if all(u - b <= TOLERANCE_MIB for u, b in zip(used, baseline)):
            back_at = time.monotonic() - killed_at
            break
        time.sleep(0.02)
    result["back_s"] = back_at
    try:
        launcher.wait(timeout=60)
        result["launcher_status"] = launcher.returncode
    except subprocess.TimeoutExpired:
        result["launcher_status"] = "still running after 60 s"
    try:
        with open(f"/proc/{pids[0]}/stat") as f:
            result["survivor_alive"] = f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        result["survivor_alive"] = False
    result["after_mib"] = nvml.used_mib()
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
    count = gpu_count()
    if count < 2:
        if os.environ.get("GPUGUARD_REQUIRE_GPUS") == "2":
            print(f"FAIL: GPUGUARD_REQUIRE_GPUS=2 but this machine has {count} GPU(s)")
            return 1
        print(f"SKIP: needs two GPUs, this machine has {count}; a two-GPU machine runs it")
        return 77
    nvml = Nvml()
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    arms = [
        ("plain", torchrun + [JOB]),
        ("gpuguard run outside", [gpuguard, "run", "--grace", "1", "--"] + torchrun + [JOB]),
        ("gpuguard run in each rank", torchrun + ["--no-python", gpuguard, "run", "--grace", "1", "--",
                                                   sys.executable, JOB]),
    ]
    failures = []
    for name, cmd in arms:
        r = run_arm(name, cmd, nvml)
        print(f"--- {name}: {r}", flush=True)
        if "error" in r:
            failures.append(f"{name}: {r['error']}")
            continue
        if name == "plain":
            continue
        if r["back_s"] is None or r["back_s"] > BACK_WITHIN_S:
            failures.append(f"{name}: both GPUs not back within {BACK_WITHIN_S} s of the kill (back_s={r['back_s']})")
        if r["survivor_alive"]:
            failures.append(f"{name}: the surviving rank was left running")
        if r["launcher_status"] in (0, "still running after 60 s"):
            failures.append(f"{name}: the launcher's status does not report the failure ({r['launcher_status']})")
    for f in failures:
        print("FAIL:", f)
    print("ddp:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
