#!/usr/bin/env python3
"""Symbolic links planted by another user at every output path: none is written through.

As root, in a sticky, world-writable directory (chmod 1777, as /tmp is), the user `nobody` plants
links to a root-owned 0600 victim file (the planting runs as nobody, through setpriv) at each output
path of the library (jsonl_log, trace_file, text_log, crash_file, prometheus_file, leak_json) and of
the commands (`gpuguard report -o`, `gpuguard run --report`, `gpuguard doctor --prometheus`, with and
without --watch), and, for the files published through a temporary file, at the temporary names
an older gpuguard used (PATH.tmp.PID) for the next few hundred process ids. Then:
  - the victim file is unchanged every time (content and mode);
  - a file opened for writing refuses the link, with a message that names the path (and refuses a
    regular file nobody made there, as fs.protected_regular=1 would);
  - a published file replaces the link with a regular file of mode 0644 less the umask, and the
    process that published it had a process id among the planted names.
Skips (77) unless run as root, where setpriv and the user nobody exist.

usage: symlink_attack_test.py OPS_CHILD LEAK_CHILD GPUGUARD REPO_ROOT
"""
import os
import pwd
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, scratch  # noqa: E402  (tests/support)

OPS_CHILD, LEAK_CHILD, GPUGUARD, ROOT = sys.argv[1:5]
NAME = "symlink_attack_test"
PLANTED_PIDS = 400  # temporary names planted per published output: the next process ids

if os.geteuid() != 0:
    print("skipped: planting links as another user needs root (this is uid %d)" % os.geteuid())
    sys.exit(77)
try:
    NOBODY = pwd.getpwnam("nobody")
except KeyError:
    print("skipped: no user 'nobody' to plant the links")
    sys.exit(77)
if shutil.which("setpriv") is None:
    print("skipped: setpriv (util-linux) is not installed")
    sys.exit(77)

os.umask(0o022)
EXPECTED_MODE = 0o644
tmp = scratch("gpuguard-links-")
os.chmod(tmp, 0o755)  # nobody must reach the sticky directory inside
victim_dir = os.path.join(tmp, "victim")
os.mkdir(victim_dir, 0o700)
VICTIM = os.path.join(victim_dir, "secret")
VICTIM_TEXT = "root's secret, which no gpuguard output may touch\n" * 20


def write_victim():
    with open(VICTIM, "w") as f:
        f.write(VICTIM_TEXT)
    os.chown(VICTIM, 0, 0)
    os.chmod(VICTIM, 0o600)


write_victim()
sticky = os.path.join(tmp, "shared")
os.mkdir(sticky)
os.chmod(sticky, 0o1777)

PLANT = "import os, sys\nfor link in sys.argv[2:]:\n    os.symlink(sys.argv[1], link)\n"


def plant(links):
    """Creates each of `links` as a symlink to the victim, as nobody."""
    result = subprocess.run(["setpriv", "--reuid=%d" % NOBODY.pw_uid, "--regid=%d" % NOBODY.pw_gid,
                             "--clear-groups", "/usr/bin/python3", "-c", PLANT, VICTIM, *links],
                            capture_output=True, text=True, timeout=20)
    ok = check(result.returncode == 0, "nobody planted %d links" % len(links), result.stderr)
    if ok:
        owner = os.lstat(links[0]).st_uid
        check(owner == NOBODY.pw_uid, "the planted link %s is nobody's (uid %d)" % (links[0], owner))
    return ok


def victim_unchanged(case):
    """Checks the victim, and restores it where it changed, so each case is judged on its own."""
    st = os.stat(VICTIM)
    with open(VICTIM) as f:
        text = f.read()
    if not check(text == VICTIM_TEXT and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0,
                 "%s: the victim file is unchanged" % case,
                 "mode %o uid %d, %d bytes" % (stat.S_IMODE(st.st_mode), st.st_uid, len(text))):
        write_victim()


def next_pids():
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    return [(last + i) % pid_max for i in range(1, PLANTED_PIDS + 1)]


def run(command, options=None, timeout=20):
    env = dict(os.environ)
    if options is not None:
        env["GPUGUARD_OPTIONS"] = options
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = process.communicate(timeout=timeout)
    return process.pid, process.returncode, out, err


def opened_output(case, command, options_for):
    """A file opened for writing: the link at its path is refused, and the message names it."""
    path = os.path.join(sticky, case)
    if not plant([path]):
        return
    _, status, out, err = run(command, options_for(path))
    victim_unchanged(case)
    check(os.path.islink(path), "%s: the planted link is left as it was" % case)
    lines = [line for line in err.splitlines() if "refusing" in line and "'%s'" % path in line]
    check(len(lines) == 1, "%s: one line refuses the link and names '%s'" % (case, path),
          "status %d\nstderr:\n%s\nstdout:\n%s" % (status, err, out))


def published_output(case, command, options=None, expect_status=(0,)):
    """A whole file published by rename: the link at its path and at the old predictable temporary
    names are never written through; the path becomes a regular file."""
    path = os.path.join(sticky, case)
    full = command(path)
    pids = next_pids()
    if not plant([path] + ["%s.tmp.%d" % (path, pid) for pid in pids]):
        return
    pid, status, out, err = run(full, options(path) if options else None)
    victim_unchanged(case)
    check(status in expect_status, "%s: exit status %d" % (case, status), err)
    check(pid in pids, "%s: the publishing process (pid %d) had its old temporary name planted" % (case, pid),
          "planted %d..%d" % (pids[0], pids[-1]))
    st = os.lstat(path)
    check(stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == EXPECTED_MODE,
          "%s: the link was replaced by root's regular file of mode %o" % (case, EXPECTED_MODE),
          "mode %o uid %d" % (st.st_mode, st.st_uid))
    leftovers = [name for name in os.listdir(sticky)
                 if name.startswith(case + ".tmp.") and not os.path.islink(os.path.join(sticky, name))]
    check(not leftovers, "%s: no temporary file is left behind" % case, leftovers)


# ---- the library's outputs, in real child processes -----------------------------------------------
for option in ("jsonl_log", "trace_file", "text_log"):
    opened_output(option, [OPS_CHILD, "plain"], lambda p, o=option: "device=host:%s=%s" % (o, p))
opened_output("crash_file", [OPS_CHILD, "plain"], lambda p: "device=host:text_log=off:crash_file=%s" % p)
published_output("prometheus_file", lambda p: [OPS_CHILD, "plain"],
                 lambda p: "device=host:text_log=off:prometheus_file=%s" % p)
published_output("leak_json", lambda p: [LEAK_CHILD, "leak"], lambda p: "device=host:leak_json=%s" % p)

# A regular file nobody made at the event log's path: refused as fs.protected_regular=1 would (the
# log would be theirs to read and rewrite), and left as it was.
planted_file = os.path.join(sticky, "planted.jsonl")
made = subprocess.run(["setpriv", "--reuid=%d" % NOBODY.pw_uid, "--regid=%d" % NOBODY.pw_gid, "--clear-groups",
                       "/usr/bin/python3", "-c", "open(__import__('sys').argv[1], 'w').write('planted\\n')",
                       planted_file], capture_output=True, text=True, timeout=20)
if check(made.returncode == 0 and os.stat(planted_file).st_uid == NOBODY.pw_uid,
         "nobody made the regular file %s" % planted_file, made.stderr):
    _, status, _, err = run([OPS_CHILD, "plain"], "device=host:jsonl_log=%s" % planted_file)
    with open(planted_file) as f:
        check(f.read() == "planted\n", "planted.jsonl: nobody's file is left as it was")
    check(any("refusing" in line and "'%s'" % planted_file in line for line in err.splitlines()),
          "planted.jsonl: one line refuses nobody's file and names it", err)

# ---- the commands' outputs ------------------------------------------------------------------------
LOG = os.path.join(ROOT, "tests", "cli", "report", "testdata", "good.jsonl")
published_output("report.html", lambda p: [GPUGUARD, "report", LOG, "-o", p])
published_output("run-report.json", lambda p: [GPUGUARD, "run", "--no-cgroup", "--report", p, "--", "true"])
# doctor's exit status says what it found on this machine (0 none, 1 holders or residue): not judged.
published_output("doctor.prom", lambda p: [GPUGUARD, "doctor", "--no-nvml", "--prometheus", p],
                 expect_status=(0, 1))
published_output("doctor-watch.prom", lambda p: [GPUGUARD, "doctor", "--no-nvml", "--prometheus", p,
                                                 "--watch", "0.05", "--count", "4"], expect_status=(0, 1))

finish(NAME)
