#!/usr/bin/env python3
"""Processes for run_test.py to put under `gpuguard run`: trees of children and grandchildren (some
in new sessions, some ignoring SIGTERM, some orphaned on purpose), signal recorders, orphans that
exit, and holders of a fake device file. Each writes what the test needs to know (pids, signals
seen) to files, with small O_APPEND writes so that lines from several processes never mix.

usage: run_helper.py MODE ARGS...   (see the functions below)
"""
import json
import mmap
import os
import signal
import subprocess
import sys
import time

HELPER = os.path.abspath(__file__)
RECORDED = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH"]


def append(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def spawn(*args, **kwargs):
    return subprocess.Popen([sys.executable, HELPER, *args], stdin=subprocess.DEVNULL, **kwargs)


def wait_for_lines(path, count, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                if len(f.read().splitlines()) >= count:
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.005)
    sys.exit(f"run_helper: {path} never reached {count} lines")


def sleep_forever():
    while True:
        time.sleep(3600)


def mode_sleeper(pidfile, role, *flags):
    """sleeper PIDFILE ROLE [--ignore-term] [--setsid] [--spawn ROLE[:ignore]]...: appends "PID ROLE"
    once its own children are started, then sleeps."""
    flags = list(flags)
    if "--setsid" in flags:
        os.setsid()
    if "--ignore-term" in flags:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    children = []
    while "--spawn" in flags:
        i = flags.index("--spawn")
        spec = flags[i + 1]
        del flags[i:i + 2]
        child_role, _, how = spec.partition(":")
        children.append(spawn("sleeper", pidfile, child_role, *(["--ignore-term"] if how == "ignore" else [])))
    append(pidfile, f"{os.getpid()} {role}\n")
    sleep_forever()


def mode_tree(pidfile, *flags):
    """tree PIDFILE [--exit]: a tree under this process, every member listed in PIDFILE as "PID ROLE":
    - child (same group) with a grandchild;           - term_ignorer (same group, ignores SIGTERM);
    - session_leader (setsid) with a grandchild that ignores SIGTERM, in that new session;
    - daemon: double-forked and setsid, its parent gone at once (an orphan from the start).
    Writes PIDFILE.ready when all are there; then sleeps (or exits 0 with --exit)."""
    append(pidfile, f"{os.getpid()} main\n")
    spawn("sleeper", pidfile, "child", "--spawn", "grandchild")
    spawn("sleeper", pidfile, "term_ignorer", "--ignore-term")
    spawn("sleeper", pidfile, "session_leader", "--setsid", "--spawn", "session_grandchild:ignore")
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, HELPER, "sleeper", pidfile, "daemon"])
        os._exit(0)
    os.waitpid(first, 0)
    wait_for_lines(pidfile, 7)
    append(pidfile + ".ready", "ready\n")
    if "--exit" in flags:
        return 0
    sleep_forever()


def mode_record(out, *flags):
    """record OUT [--spawn OUT2] [--setsid-spawn OUT3] [--exit-on-term]: appends the name of every
    signal of RECORDED it gets to OUT; exits 0 once it has had all of them (and its children have
    exited), or at the first SIGTERM with --exit-on-term. Writes OUT.ready when it and its
    children are listening."""
    got = set()

    def on_signal(number, _frame):
        name = signal.Signals(number).name
        append(out, name + "\n")
        got.add(name)
        if name == "SIGTERM" and "--exit-on-term" in flags:
            os._exit(0)

    for name in RECORDED:
        signal.signal(getattr(signal, name), on_signal)
    children = []
    if "--spawn" in flags:
        path = flags[flags.index("--spawn") + 1]
        children.append(spawn("record", path))
        wait_for_lines(path + ".ready", 1)
    if "--setsid-spawn" in flags:
        path = flags[flags.index("--setsid-spawn") + 1]
        spawn("record", path, "--exit-on-term", start_new_session=True)  # left running on purpose
        wait_for_lines(path + ".ready", 1)
    append(out + ".ready", f"{os.getpid()}\n")
    deadline = time.monotonic() + 30
    while len(got) < len(RECORDED) and time.monotonic() < deadline:
        time.sleep(0.01)
    for c in children:
        c.wait()
    return 0 if len(got) == len(RECORDED) else 3


def mode_orphans(count, marker):
    """orphans COUNT MARKER: makes COUNT grandchildren whose parents exit at once, so that they are
    reparented to the nearest subreaper; half exit at once, half after 50 ms. Appends their pids to
    MARKER, then stays alive for 1.5 s (while the test looks for zombies) and exits 0."""
    pids = []
    for i in range(int(count)):
        r, w = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.close(r)
            grandchild = os.fork()
            if grandchild == 0:
                os.close(w)
                if i % 2:
                    time.sleep(0.05)
                os._exit(0)
            os.write(w, f"{grandchild}\n".encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            pids.append(f.read().strip())
        os.waitpid(middle, 0)
    append(marker, "\n".join(pids) + "\n")
    time.sleep(1.5)
    return 0


def mode_holder(device, pidfile, how, nvml_file, nvml_bytes):
    """holder DEVICE PIDFILE open|mmap NVML_FILE|- BYTES: holds DEVICE (an open descriptor, or a
    mapping whose descriptor is closed), lists itself for the fake NVML, then sleeps."""
    if how == "mmap":
        with open(device, "r+b") as f:
            held = mmap.mmap(f.fileno(), 4096)  # the descriptor closes; the mapping stays
    else:
        held = open(device, "rb")  # pylint: disable=consider-using-with
    if nvml_file != "-":
        append(nvml_file, f"process 0 {os.getpid()} {nvml_bytes}\n")  # a fake_nvml.cpp spec line
    append(pidfile, f"{os.getpid()} holder\n")
    while held is not None:
        time.sleep(3600)


def mode_hold(device, pidfile, *flags):
    """hold DEVICE PIDFILE [--mmap] [--nvml FILE BYTES] [--none]: starts a background process that
    holds DEVICE open (or mapped, with --mmap), and exits 0 once it does. With --none this process
    opens and closes DEVICE itself, and the background process holds nothing."""
    flags = list(flags)
    nvml_file, nvml_bytes = "-", "0"
    if "--nvml" in flags:
        i = flags.index("--nvml")
        nvml_file, nvml_bytes = flags[i + 1], flags[i + 2]
    if "--none" in flags:
        with open(device, "rb"):
            pass
        spawn("sleeper", pidfile, "holder")
    else:
        spawn("holder", device, pidfile, "mmap" if "--mmap" in flags else "open", nvml_file, nvml_bytes)
    wait_for_lines(pidfile, 1)
    return 0


def mode_env():
    """env: prints the variables `gpuguard run` sets or removes, as JSON."""
    names = ["LD_PRELOAD", "GPUGUARD_OPTIONS", "GPUGUARD_RUN_OPTIONS", "GPUGUARD_TEST_MARK"]
    print(json.dumps({n: os.environ.get(n) for n in names}))
    return 0


def mode_die(name):
    """die SIGNAME: ends this process with that signal (default disposition)."""
    number = getattr(signal, name)
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)
    time.sleep(5)
    return 99


def mode_tty():
    """tty: on a terminal, says whether its group is the foreground one, then echoes every line it
    reads until Ctrl-C (SIGINT, default disposition) ends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    print(f"ready foreground={os.tcgetpgrp(0) == os.getpgrp()}", flush=True)
    for line in sys.stdin:
        print(f"got {line.strip()}", flush=True)
    return 0


def mode_jobshell(*argv):
    """jobshell PROGRAM ARGS...: a job-control shell in miniature, for a session whose controlling
    terminal is stdin. Runs the program as a foreground job (its own group, the terminal's
    foreground), waits until it stops or ends, and when it stops, takes the terminal back, then
    brings the job back to the foreground ("fg") and waits again. Says each step on stdout."""
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a shell moves the foreground while in the background
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os.tcsetpgrp(0, os.getpgrp())
        signal.signal(signal.SIGTTOU, signal.SIG_DFL)
        os.execv(argv[0], list(argv))
    try:
        # Both sides set the group, as shells do, so that neither order races. EACCES: the child
        # has already exec'd, which it does only after setting its group itself.
        os.setpgid(pid, pid)
    except PermissionError:
        pass
    os.tcsetpgrp(0, pid)
    while True:
        _, status = os.waitpid(pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            print(f"shell: ended {os.waitstatus_to_exitcode(status)}", flush=True)
            return 0
        os.tcsetpgrp(0, os.getpgrp())
        print(f"shell: stopped by {signal.Signals(os.WSTOPSIG(status)).name}", flush=True)
        time.sleep(0.2)
        os.tcsetpgrp(0, pid)
        os.killpg(pid, signal.SIGCONT)
        print("shell: continued", flush=True)


def mode_daemon(out):
    """daemon OUT: a double-forked, setsid'd daemon in "/" that ignores SIGTERM (only SIGKILL ends
    it); it appends "PID CGROUP" (its cgroup v2 path) to OUT, and this process exits 0 at once."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.chdir("/")
            with open("/proc/self/cgroup") as f:
                cgroup = next((l[3:].strip() for l in f if l.startswith("0::")), "?")
            append(out, f"{os.getpid()} {cgroup}\n")
            sleep_forever()
        os._exit(0)
    os.wait()
    wait_for_lines(out, 1)
    return 0


def mode_entrypoint(out, orphans):
    """entrypoint OUT COUNT: a container's main process under `gpuguard run` as PID 1: makes COUNT
    orphans that exit at once (each reparented, then a zombie until someone reaps it), writes
    "ready PID" to OUT, and on SIGTERM appends "sigterm" and the zombies it sees in its PID
    namespace ("zombies PID..."), then exits 0."""
    def on_term(_number, _frame):
        zombies = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        text = f.read()
                except OSError:
                    continue
                if text[text.rindex(")") + 2] == "Z":
                    zombies.append(name)
        append(out, "sigterm\nzombies " + " ".join(zombies) + "\n")
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    for _ in range(int(orphans)):
        if os.fork() == 0:
            if os.fork() == 0:
                time.sleep(0.05)
                os._exit(0)
            os._exit(0)
        os.wait()
    append(out, f"ready {os.getpid()}\n")
    sleep_forever()


def mode_hopper(out, hops, sleep_ms, life_s):
    """hopper OUT HOPS SLEEP_MS LIFE_S: a PID hopper that ignores SIGTERM: forks, lets the parent
    exit, sleeps SLEEP_MS in the child, and again, HOPS times, appending "PID" to OUT at each hop;
    the last one appends "done" and sleeps LIFE_S then exits (so that one that escapes is
    bounded). This process waits for the first hop, and exits 0."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() != 0:
        wait_for_lines(out, 1)
        return 0
    for _ in range(int(hops)):
        if os.fork() != 0:
            os._exit(0)
        append(out, f"{os.getpid()}\n")
        time.sleep(float(sleep_ms) / 1000.0)
    append(out, "done\n")
    time.sleep(float(life_s))
    os._exit(0)


def mode_forkbomb(out, cap, life_s, *flags):
    """forkbomb OUT CAP LIFE_S [--spin]: a fork bomb that ignores SIGTERM: every process forks a
    child (which does the same) every 200 us, until CAP processes were made in all (counted by
    one-byte appends to OUT + ".count"); each then sleeps (with --spin: keeps a CPU busy) for
    LIFE_S and exits. This process exits 0 as soon as the bomb has started, so that it grows
    through the teardown."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    counter = out + ".count"
    cap = int(cap)
    if os.fork() != 0:
        os._exit(0)  # at once: with --spin, an interpreter's exit could take seconds
    end = time.monotonic() + float(life_s)
    fd = os.open(counter, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    while True:
        os.write(fd, b"x")  # claims one fork
        if os.fstat(fd).st_size > cap:
            break
        if os.fork() != 0:
            time.sleep(0.0002)  # the parent forks again after 200 us; the child at once
    os.close(fd)
    while time.monotonic() < end:
        if "--spin" not in flags:
            time.sleep(end - time.monotonic())
    os._exit(0)

MODES = {"sleeper": mode_sleeper, "hopper": mode_hopper, "forkbomb": mode_forkbomb, "daemon": mode_daemon, "entrypoint": mode_entrypoint, "tree": mode_tree, "record": mode_record, "orphans": mode_orphans,
         "holder": mode_holder, "hold": mode_hold, "env": mode_env, "die": mode_die, "tty": mode_tty,
         "jobshell": mode_jobshell}

if __name__ == "__main__":
    sys.exit(MODES[sys.argv[1]](*sys.argv[2:]))
