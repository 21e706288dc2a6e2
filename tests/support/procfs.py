"""What the Python process tests read from /proc, in one place: a process's stat line, its state,
whether it is alive, its PID outside a PID namespace, and polling until something holds (with the
time it took). Imported by tests that put this folder on sys.path; harness.py beside it holds the
rest of what the tests share."""
import collections
import os
import time

# The fields of /proc/PID/stat the tests use (proc(5)): the state letter, parent, process group,
# session, start time (clock ticks after boot: with the PID, a process's identity) and name.
proc = collections.namedtuple("proc", "state ppid pgid sid start_time comm")


def stat(pid):
    """`pid`'s stat line as a proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]  # a name may hold spaces and parentheses
    fields = text[text.rindex(")") + 2:].split()
    return proc(fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), comm)


def state(pid):
    """`pid`'s state letter (R, S, D, T, Z...), or "gone"; for messages."""
    s = stat(pid)
    return s.state if s is not None else "gone"


def alive(pid):
    """Whether `pid` is running (a zombie is not)."""
    s = stat(pid)
    return s is not None and s.state not in ("Z", "X")


def seconds_until(predicate, timeout, step=0.01, since=None):
    """Polls `predicate` every `step` seconds for up to `timeout` seconds after `since` (a
    time.monotonic() reading; default now): the seconds from `since` until it held, or None."""
    since = time.monotonic() if since is None else since
    deadline = since + timeout
    while time.monotonic() < deadline:
        if predicate():
            return max(time.monotonic() - since, 0.0)
        time.sleep(step)
    return max(time.monotonic() - since, 0.0) if predicate() else None


def wait_until(predicate, timeout, step=0.01):
    """Polls `predicate` every `step` seconds for up to `timeout`: whether it held."""
    return seconds_until(predicate, timeout, step) is not None


def outer_pid(inner, ancestor):
    """The PID, as this process's namespace sees it, of the descendant of `ancestor` whose PID in
    its own innermost namespace is `inner` (what a process inside `gpuguard run`'s PID namespace
    says of itself: the last field of "NSpid:" in /proc/PID/status), or None."""
    import os
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                ns_pids = next((l.split()[1:] for l in f if l.startswith("NSpid:")), [])
        except OSError:
            continue
        if len(ns_pids) < 2 or int(ns_pids[-1]) != inner:
            continue
        pid = int(name)
        while pid > 1:  # its ancestry must reach `ancestor`
            s = stat(pid)
            if s is None:
                break
            if s.ppid == ancestor:
                return int(name)
            pid = s.ppid
    return None
