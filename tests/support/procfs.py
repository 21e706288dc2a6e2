"""What the Python process tests read from /proc, in one place: a process's stat line, whether it
is alive, and polling until something holds. Imported by tests that put this folder on sys.path."""
import collections
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


def alive(pid):
    """Whether `pid` is running (a zombie is not)."""
    s = stat(pid)
    return s is not None and s.state not in ("Z", "X")


def wait_until(predicate, timeout, step=0.01):
    """Polls `predicate` every `step` seconds for up to `timeout`; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
