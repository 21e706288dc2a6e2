#!/usr/bin/env python3
"""deploy/slurm/ on a real one-node Slurm cluster on localhost: munged with a key of its own,
slurmctld and slurmd (-D, ports free on 127.0.0.1, state and spool in a scratch folder,
proctrack/linuxproc), Prolog= and Epilog= running deploy/slurm/prolog.sh and epilog.sh with their
settings in a defaults file (GPUGUARD_SLURM_DEFAULTS, as an operator sets them), gpuguard pointed
at fake device files (regular files named like /dev/nvidia0) and at the stand-in NVML.

  pattern   deploy/slurm/train.sbatch: a trainer SIGKILLed while its forked worker holds the
            device, under `srun gpuguard run`: run ends the worker, the epilog finds nothing
  reap      a job leaves a holder double-forked away from its process tree (`( ... &)`): the
            epilog ends it (gpuguard doctor's class `orphaned`), the node stays up
  drain     a job leaves a `nohup`'d holder the same way: the orphan rule spares it (it ignores
            SIGHUP: detached on purpose), so the epilog may not end it and the GPU stays held; the
            epilog drains the node, the reason naming the process; the holder is still alive
  dirty     a holder of no job, left before the job starts: the prolog refuses (the job never runs,
            Slurm requeues it held), the node drains with the reason
  residue   NVML (the stand-in) says 1 GiB is used with no process: the prolog refuses the same way
  cgroup    then a second cluster with proctrack/cgroup, where Slurm's cgroup plugin starts here
            (otherwise a note says why it is left out): a job leaves both kinds of holder above;
            Slurm ends them itself and the epilog finds the GPU clean

Skips (77) naming what is missing or did not start: not root, a Slurm or munge program, munged,
slurmctld or slurmd; with GPUGUARD_REQUIRE_CLUSTER=1 (as CI sets) that is a failure. Every daemon and holder it starts is ended in the end, and the cgroup folders
Slurm's cgroup plugin made are removed.

usage: slurm_test.py GPUGUARD_BINARY FAKE_NVML_LIBRARY REPO_ROOT
"""
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import abort, check, failures, finish, say, scratch, skip, write_text  # noqa: E402  (tests/support)
from procfs import alive, stat, wait_until  # noqa: E402  (tests/support)

GPUGUARD, FAKE_NVML, ROOT = (os.path.abspath(a) for a in sys.argv[1:4])
DEPLOY = os.path.join(ROOT, "deploy", "slurm")
NODE = "localhost"
GiB = 1 << 30

# A holder of the fake device: puts SIGHUP back to its default unless told "nohup" (a job started
# normally does not ignore it), opens the device, writes "PID START_TIME" to the file named, waits.
HOLDER = """
import os, signal, sys
device, pid_file, mode = sys.argv[1:4]
if mode != "nohup":
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
held = open(device, "r+b")
with open(pid_file + ".tmp", "w") as f:
    f.write("%d %s" % (os.getpid(), open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]))
os.rename(pid_file + ".tmp", pid_file)
while True:
    signal.pause()
"""

# The trainer train.sbatch runs: opens the device, forks a worker that holds it too (a DataLoader
# worker), and is SIGKILLed, as a crash or the OOM killer ends one.
TRAINER = """
import os, signal
held = open(os.environ["GPUGUARD_DEVICE_PREFIX"] + "0", "r+b")
if os.fork() == 0:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    while True:
        signal.pause()
os.kill(os.getpid(), signal.SIGKILL)
"""


def left_behind(holders_and_pid_files):
    """A job script that starts each holder double-forked away from its process tree (`( ... &)`,
    reparented to init once the subshell exits) and ends when every one holds the device (its pid
    file is there, within 10 s), as a job's leftover holds it long before the job ends."""
    started = "".join(f"({command} &); " for command, _ in holders_and_pid_files)
    ready = " && ".join(f"[ -e {pid_file} ]" for _, pid_file in holders_and_pid_files)
    return started + f"for i in $(seq 200); do {ready} && exit 0; sleep 0.05; done; exit 1"


SBIN = {}        # program name: its path (start_munge)
procs = []       # (name, Popen) of the daemons, ended last
holders = []     # pid files of every holder started, ended in the end if still there


def tail(path, lines=8):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no file)"


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def slurm(*args, timeout=20):
    return subprocess.run([SBIN.get(args[0], args[0]), *args[1:]], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def fields(*args):
    """`scontrol show ... -o` as a dict (a value runs to the next " Key=": Reason has spaces)."""
    out = slurm("scontrol", "show", *args, "-o").stdout.strip()
    result, key = {}, None
    for word in out.split(" "):
        name, eq, value = word.partition("=")
        if eq and name and name[0].isupper():
            key = name
            result[key] = value
        elif key:
            result[key] += " " + word
    return result


def node():
    return fields("node", NODE)


def job(job_id):
    return fields("job", str(job_id))


def node_ready():
    state = node().get("State", "")
    return state.startswith("IDLE") and not any(flag in state for flag in ("DRAIN", "NOT_RESPONDING", "COMPLETING"))


def read_holder(pid_file, timeout=15):
    if not wait_until(lambda: os.path.exists(pid_file), timeout, step=0.05):
        return None
    with open(pid_file) as f:
        pid, start = f.read().split()
    return int(pid), int(start)


def same_process(pid, start):
    s = stat(pid)
    return s is not None and s.start_time == start and alive(pid)


def end_holders():
    for pid_file in holders:
        if os.path.exists(pid_file):
            pid, start = read_holder(pid_file, 0)
            if same_process(pid, start):
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda: not alive(pid), 5)


def sbatch(*args):
    done = slurm("sbatch", "--parsable", *args)
    if done.returncode != 0:
        abort("sbatch failed", done.stderr)
    return int(done.stdout.strip().split(";")[0])


def wait_job_done(job_id, timeout=30):
    """Until the job has ended and the node has finished its epilog (not COMPLETING)."""
    def done():
        state = job(job_id).get("JobState", "")
        return state not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "") and \
            "COMPLETING" not in node().get("State", "")
    return wait_until(done, timeout, step=0.2)


def log_lines(job_id):
    path = os.path.join(LOG_DIR, "gpuguard-slurm.log")
    try:
        with open(path) as f:
            return [line.strip() for line in f if f" job {job_id} on " in line]
    except OSError:
        return []


def resume():
    slurm("scontrol", "update", f"nodename={NODE}", "state=resume")
    return wait_until(node_ready, 20, step=0.2)


def start_munge():
    for program in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "srun"):
        # The daemons are in sbin, which a CI shell's PATH may leave out.
        found = shutil.which(program, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if found is None:
            skip(f"{program} is not installed (Debian: slurm-wlm and munge)",
                 variable="GPUGUARD_REQUIRE_CLUSTER")
        SBIN[program] = found
    if os.geteuid() != 0:
        skip("slurmd must run as root to start jobs, and this test is not root",
             variable="GPUGUARD_REQUIRE_CLUSTER")
    munge_dir = os.path.join(DIR, "munge")
    os.makedirs(munge_dir)
    key = os.path.join(munge_dir, "munge.key")
    with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(os.urandom(1024))
    munged = subprocess.Popen(
        [SBIN["munged"], "-F", f"--key-file={key}", f"--socket={MUNGE_SOCKET}", f"--pid-file={munge_dir}/munged.pid",
         f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"],
        stdout=open(os.path.join(DIR, "munged.out"), "w"), stderr=subprocess.STDOUT)
    procs.append(("munged", munged))
    if not wait_until(lambda: os.path.exists(MUNGE_SOCKET) or munged.poll() is not None, 10, step=0.05) \
            or munged.poll() is not None:
        skip("munged could not start: " + tail(os.path.join(DIR, "munged.out"), 2).strip(),
             variable="GPUGUARD_REQUIRE_CLUSTER")
    for sub in ("log", "job"):
        os.makedirs(os.path.join(DIR, sub))
    os.makedirs(os.path.join(DIR, "prolog.d"))
    for script in ("prolog", "epilog"):
        # What an operator's slurm.conf names is deploy/slurm/SCRIPT.sh, or a link to it in a
        # prolog.d folder (as here); this wrapper only names the test's defaults file, which
        # stands for /etc/default/gpuguard-slurm.
        link = os.path.join(DIR, "prolog.d", f"50-gpuguard-{script}.sh")
        os.symlink(os.path.join(DEPLOY, f"{script}.sh"), link)
        path = write_text(os.path.join(DIR, script),
                          f"#!/bin/sh\nGPUGUARD_SLURM_DEFAULTS={DIR}/gpuguard-slurm.env exec {link}\n")
        os.chmod(path, 0o755)
    write_text(os.path.join(DIR, "gpuguard-slurm.env"), f"""
GPUGUARD={GPUGUARD}
GPUGUARD_DEVICE_PREFIX={DEVICE_PREFIX}
GPUGUARD_PYTHON={sys.executable}
GPUGUARD_GRACE=1
GPUGUARD_SETTLE_SECONDS=3
GPUGUARD_SLURM_LOG_DIR={LOG_DIR}
export GPUGUARD_NVML_LIBRARY={FAKE_NVML}
export GPUGUARD_FAKE_NVML={NVML_SPEC}
""")


def start_slurm(proctrack):
    """slurmctld and slurmd with ProctrackType=proctrack/PROCTRACK, configured in a folder of their
    own (state, spool, logs); sets CONF and ENV. Returns why they could not start, or None."""
    global CONF, ENV, SLURM_DIR
    SLURM_DIR = os.path.join(DIR, proctrack)
    for sub in ("state", "spool"):
        os.makedirs(os.path.join(SLURM_DIR, sub))
    CONF = os.path.join(SLURM_DIR, "slurm.conf")
    ENV = dict(os.environ, SLURM_CONF=CONF)
    ctld_port, d_port = free_ports(2)
    # cgroup.conf is read only by the cgroup plugins (proctrack/cgroup): the kernel's hierarchy.
    write_text(os.path.join(SLURM_DIR, "cgroup.conf"), "CgroupPlugin=autodetect\n")
    write_text(CONF, f"""
ClusterName=gpuguardtest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={MUNGE_SOCKET}
CredType=cred/munge
StateSaveLocation={SLURM_DIR}/state
SlurmdSpoolDir={SLURM_DIR}/spool
SlurmctldPidFile={SLURM_DIR}/slurmctld.pid
SlurmdPidFile={SLURM_DIR}/slurmd.pid
SlurmctldLogFile={SLURM_DIR}/slurmctld.log
SlurmdLogFile={SLURM_DIR}/slurmd.log
ProctrackType=proctrack/{proctrack}
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
Prolog={DIR}/prolog
Epilog={DIR}/epilog
NodeName={NODE} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=test Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
    for name, command in (("slurmctld", [SBIN["slurmctld"], "-D", "-f", CONF]),
                          ("slurmd", [SBIN["slurmd"], "-D", "-f", CONF, "-N", NODE])):
        out = os.path.join(SLURM_DIR, f"{name}.out")
        daemon = subprocess.Popen(command, env=ENV, stdout=open(out, "w"), stderr=subprocess.STDOUT)
        procs.append((name, daemon))
        time.sleep(0.3)
        if daemon.poll() is not None:
            return f"{name} could not start (status {daemon.returncode}): " + \
                (tail(out, 2) + tail(os.path.join(SLURM_DIR, f"{name}.log"), 2)).strip()
    if not wait_until(node_ready, 30, step=0.2):
        return f"the node did not come up (State={node().get('State')}): " + \
            tail(os.path.join(SLURM_DIR, "slurmd.log"), 3).strip()
    return None


def slurm_cgroups():
    """The cgroup folders slurmd's cgroup plugin makes for this node (slurm_NODE in a v1
    hierarchy, system.slice/slurmstepd.scope under v2), which outlive slurmd."""
    return set(glob.glob(f"/sys/fs/cgroup/*/slurm_{NODE}") + glob.glob(f"/sys/fs/cgroup/slurm_{NODE}")
               + glob.glob("/sys/fs/cgroup/**/slurmstepd.scope", recursive=True))


def remove_cgroups(folders):
    """Removes these (empty) cgroup folders, the deepest first; one still in use stays."""
    for folder in folders:
        for root, _, _ in sorted(os.walk(folder), key=lambda entry: -entry[0].count("/")):
            try:
                os.rmdir(root)
            except OSError:
                pass


def stop(names):
    """Ends the daemons of these names that are running, the last started first; before slurmctld
    goes, every job is cancelled."""
    if "slurmctld" in names and any(name == "slurmctld" and daemon.poll() is None for name, daemon in procs):
        for job_id in slurm("squeue", "-h", "-o", "%i").stdout.split():
            slurm("scancel", job_id)
    for name, daemon in reversed(procs):
        if name in names and daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(5)


# ---- the cases ------------------------------------------------------------------------------------

def case_pattern():
    """train.sbatch: `srun gpuguard run -- python train.py`, the trainer SIGKILLed, its worker left."""
    work = os.path.join(DIR, "job", "pattern")
    os.makedirs(work)
    write_text(os.path.join(work, "train.py"), TRAINER)
    bin_dir = os.path.join(DIR, "bin")
    os.makedirs(bin_dir)
    os.symlink(GPUGUARD, os.path.join(bin_dir, "gpuguard"))
    os.symlink(sys.executable, os.path.join(bin_dir, "python"))
    env = dict(ENV, PATH=bin_dir + ":" + ENV["PATH"], GPUGUARD_DEVICE_PREFIX=DEVICE_PREFIX,
               GPUGUARD_RUN_OPTIONS="grace=1")
    done = subprocess.run([SBIN["sbatch"], "--parsable", f"--chdir={work}", f"--output={work}/out.txt",
                           os.path.join(DEPLOY, "train.sbatch")], capture_output=True, text=True, env=env, timeout=20)
    if not check(done.returncode == 0, "pattern: sbatch train.sbatch is accepted", done.stderr):
        return
    job_id = int(done.stdout.strip())
    check(wait_job_done(job_id), f"pattern: job {job_id} ends", job(job_id))
    out = tail(os.path.join(work, "out.txt"), 20)
    check("[gpuguard run] python was killed by SIGKILL (status 137)" in out and "1 process outlived it" in out
          and "1 process of it held a GPU when it ended" in out and "none holds one now" in out,
          "pattern: gpuguard run says the trainer was SIGKILLed and it ended the worker that held the device", out)
    lines = log_lines(job_id)
    check(any(line.endswith("epilog job %d on %s: clean" % (job_id, NODE)) for line in lines)
          and not any("reaped" in line for line in lines),
          "pattern: the epilog found nothing to reap, the GPU clean", lines)
    check(node_ready(), "pattern: the node stays up", node())


def case_reap():
    """A job leaves a holder double-forked out of its process tree: the epilog ends it."""
    pid_file = os.path.join(DIR, "job", "reap.pid")
    holders.append(pid_file)
    holder = write_text(os.path.join(DIR, "job", "holder.py"), HOLDER)
    job_id = sbatch(f"--chdir={DIR}/job", f"--output={DIR}/job/reap.out",
                    "--wrap", left_behind([(f"{sys.executable} {holder} {DEVICE_PREFIX}0 {pid_file} plain", pid_file)]))
    held = read_holder(pid_file)
    if not check(held is not None, "reap: the job's holder started", tail(f"{DIR}/job/reap.out")):
        return
    pid, start = held
    check(wait_job_done(job_id), f"reap: job {job_id} ends and its epilog runs", job(job_id))
    check(not same_process(pid, start), f"reap: the leftover holder {pid} is gone after the epilog")
    lines = log_lines(job_id)
    check(any(f"reaped: PID {pid} " in line and line.endswith("terminated") for line in lines),
          f"reap: the epilog says it ended PID {pid} (SIGTERM)", lines)
    check(any(line.endswith("clean") for line in lines), "reap: then the GPU was clean", lines)
    check(node_ready(), "reap: the node stays up (not drained)", node())


def case_drain():
    """A job leaves a nohup'd holder: the rule spares it, the epilog drains the node."""
    pid_file = os.path.join(DIR, "job", "drain.pid")
    holders.append(pid_file)
    holder = os.path.join(DIR, "job", "holder.py")
    job_id = sbatch(f"--chdir={DIR}/job", f"--output={DIR}/job/drain.out",
                    "--wrap", left_behind([(f"nohup {sys.executable} {holder} {DEVICE_PREFIX}0 {pid_file} nohup > /dev/null 2>&1",
                                  pid_file)]))
    held = read_holder(pid_file)
    if not check(held is not None, "drain: the job's holder started", tail(f"{DIR}/job/drain.out")):
        return
    pid, start = held
    check(wait_job_done(job_id), f"drain: job {job_id} ends and its epilog runs", job(job_id))
    state = node()
    reason = state.get("Reason", "")
    check("DRAIN" in state.get("State", ""), "drain: the node is drained", state)
    check(reason.startswith(f"gpuguard: after job {job_id}: PID {pid} ") and "(running) holds a GPU device" in reason
          and f"see {LOG_DIR}/epilog-job{job_id}.txt" in reason,
          "drain: scontrol show node gives gpuguard's reason, naming the holder and the report", reason)
    check(same_process(pid, start), f"drain: the holder the rule spares ({pid}, nohup) was not signalled")
    report = tail(os.path.join(LOG_DIR, f"epilog-job{job_id}.txt"), 50)
    check("ignores SIGHUP (nohup)" in report, "drain: the kept report says why the doctor spared it", report)
    end_holders()
    check(resume(), "drain: the node comes back after the holder is gone and it is resumed", node())


def refused(job_id, marker, what):
    """The prolog refused the job: it is requeued held and never ran; the node drained."""
    check(wait_until(lambda: "requeued_held" in job(job_id).get("Reason", "") or
                     "JobHeldAdmin" in job(job_id).get("Reason", ""), 20, step=0.2),
          f"{what}: job {job_id} is requeued and held", job(job_id))
    check(not os.path.exists(marker), f"{what}: the job did not run")
    state = node()
    check("DRAIN" in state.get("State", ""), f"{what}: the node is drained", state)
    return state.get("Reason", "")


def case_dirty():
    """A holder of no job before the job starts: the prolog refuses the node."""
    pid_file = os.path.join(DIR, "job", "dirty.pid")
    holders.append(pid_file)
    holder = subprocess.Popen([sys.executable, os.path.join(DIR, "job", "holder.py"), DEVICE_PREFIX + "0", pid_file, "plain"])
    held = read_holder(pid_file)
    if not check(held is not None, "dirty: the holder started"):
        return
    marker = os.path.join(DIR, "job", "dirty.ran")
    job_id = sbatch(f"--chdir={DIR}/job", f"--output={DIR}/job/dirty.out", "--wrap", f"touch {marker}")
    reason = refused(job_id, marker, "dirty")
    check(reason.startswith(f"gpuguard: before job {job_id}: PID {held[0]} ") and "(running) holds a GPU device" in reason,
          "dirty: scontrol show node gives the prolog's reason, naming the holder", reason)
    holder.kill()
    holder.wait()
    slurm("scancel", str(job_id))
    check(resume(), "dirty: the node comes back once the holder is gone", node())


def case_residue():
    """1 GiB used on the (stand-in) device with no process: the prolog refuses the node."""
    write_text(NVML_SPEC, f"driver 580.00\ndevice 0 {80 * GiB} 0 {GiB} FakeGPU\n")
    marker = os.path.join(DIR, "job", "residue.ran")
    job_id = sbatch(f"--chdir={DIR}/job", f"--output={DIR}/job/residue.out", "--wrap", f"touch {marker}")
    reason = refused(job_id, marker, "residue")
    check(reason.startswith(f"gpuguard: before job {job_id}: {GiB} bytes of GPU memory held by no process here"),
          "residue: scontrol show node gives the prolog's reason, the memory no process holds", reason)
    write_text(NVML_SPEC, f"driver 580.00\ndevice 0 {80 * GiB} 0 0 FakeGPU\n")
    slurm("scancel", str(job_id))
    check(resume(), "residue: the node comes back once the memory is free", node())


def case_cgroup():
    """proctrack/cgroup: Slurm's cgroup ends both leftovers at the job's end, nohup'd or not."""
    holder = os.path.join(DIR, "job", "holder.py")
    pid_files = [os.path.join(DIR, "job", f"cgroup-{mode}.pid") for mode in ("plain", "nohup")]
    holders.extend(pid_files)
    job_id = sbatch(f"--chdir={DIR}/job", f"--output={DIR}/job/cgroup.out", "--wrap", left_behind([
        (f"{sys.executable} {holder} {DEVICE_PREFIX}0 {pid_files[0]} plain", pid_files[0]),
        (f"nohup {sys.executable} {holder} {DEVICE_PREFIX}0 {pid_files[1]} nohup > /dev/null 2>&1", pid_files[1])]))
    held = [read_holder(pid_file) for pid_file in pid_files]
    if not check(None not in held, "cgroup: the job's two holders started", tail(f"{DIR}/job/cgroup.out")):
        return
    check(wait_job_done(job_id), f"cgroup: job {job_id} ends and its epilog runs", job(job_id))
    check(not any(same_process(pid, start) for pid, start in held), "cgroup: Slurm ended both leftovers", held)
    lines = log_lines(job_id)
    check(any(line.endswith("epilog job %d on %s: clean" % (job_id, NODE)) for line in lines)
          and not any("reaped" in line for line in lines),
          "cgroup: the epilog found nothing left to reap, the GPU clean", lines)
    check(node_ready(), "cgroup: the node stays up", node())


# What no real process can show here: a target that survives SIGKILL (stuck in the driver) and a
# doctor that cannot look at all. A stand-in doctor answers as gpuguard doctor documents it (its
# exit statuses; the JSON members the scripts read); scontrol records what it is asked.
STAND_IN_DOCTOR = """#!/bin/sh
echo "$*" >> "$0.calls"
holder='"pid":4242,"holds":true,"class":"orphaned","start_time":99,"comm":"python3"'
case "$GG_STAND_IN:$*" in
  blind:*) echo "gpuguard doctor: cannot list /proc: Permission denied" >&2; exit 3 ;;
  *--reap*) echo "{\\"holders\\":[{$holder,\\"reap\\":{\\"action\\":\\"survived\\"}}],\\"residue_bytes\\":0}"; exit 3 ;;
  *--json*) echo "{\\"holders\\":[{$holder,\\"reap\\":null}],\\"residue_bytes\\":0}"; exit 1 ;;
  *) echo "gpuguard doctor: 1 process holds a GPU device"; exit 1 ;;
esac
"""


def case_stand_in():
    """The epilog when --reap could not end a target (status 3), the prolog when the doctor fails."""
    folder = os.path.join(DIR, "stand-in")
    os.makedirs(folder)
    doctor = write_text(os.path.join(folder, "gpuguard"), STAND_IN_DOCTOR)
    scontrol = write_text(os.path.join(folder, "scontrol"),
                          '#!/bin/sh\necho "$*" >> "$0.calls"\n[ "$1" = listpids ] && echo "No job steps exist on this node." && exit 1\nexit 0\n')
    for path in (doctor, scontrol):
        os.chmod(path, 0o755)
    env = dict(os.environ, GPUGUARD=doctor, GPUGUARD_SCONTROL=scontrol, GPUGUARD_PYTHON=sys.executable,
               GPUGUARD_SLURM_LOG_DIR=os.path.join(folder, "log"), GPUGUARD_SETTLE_SECONDS="30",
               GPUGUARD_GRACE="1", GPUGUARD_SLURM_DEFAULTS="/nonexistent", SLURM_JOB_ID="9", SLURMD_NODENAME="n9")

    def calls(path):
        with open(path + ".calls") as f:
            return f.read().splitlines()

    at = time.monotonic()
    done = subprocess.run([os.path.join(DEPLOY, "epilog.sh")], env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - at
    check(done.returncode == 0, "stand-in: the epilog exits 0 after its own drain", done)
    check(any("--reap --grace 1 --pid 4242:99" in call for call in calls(doctor)),
          "stand-in: the epilog reaps exactly the scanned orphan, named with its start time", calls(doctor))
    drains = [call for call in calls(scontrol) if call.startswith("update")]
    check(len(drains) == 1 and drains[0].startswith(
        "update nodename=n9 state=drain reason=gpuguard: after job 9: could not end PID 4242 python3 (survived); "
        "PID 4242 python3 (orphaned) holds a GPU device; see "),
        "stand-in: a target that survived SIGKILL drains the node, the reason naming it", drains)
    check(took < 20, f"stand-in: the epilog drains at once, not after the settle time ({took:.1f} s)")

    done = subprocess.run([os.path.join(DEPLOY, "prolog.sh")], env=dict(env, GG_STAND_IN="blind"),
                          capture_output=True, text=True, timeout=60)
    drains = [call for call in calls(scontrol) if call.startswith("update")][1:]
    check(done.returncode == 1 and len(drains) == 1 and drains[0].startswith(
        "update nodename=n9 state=drain reason=gpuguard: cannot check the GPU before job 9: "
        f"{doctor} doctor failed with status 3 (gpuguard doctor: cannot list /proc: Permission denied)"),
        "stand-in: a doctor that cannot look makes the prolog refuse the node (status 1), saying why", (done, drains))


DIR = scratch("gpuguard-slurm-")
os.chmod(DIR, 0o755)  # munged wants every folder above its socket searchable by all
MUNGE_SOCKET = os.path.join(DIR, "munge", "munge.socket")
CONF = ENV = SLURM_DIR = None  # the running cluster's (start_slurm)
LOG_DIR = os.path.join(DIR, "log")
DEVICE_PREFIX = os.path.join(DIR, "dev", "nvidia")
NVML_SPEC = os.path.join(DIR, "nvml.spec")
os.makedirs(os.path.dirname(DEVICE_PREFIX))
for name in ("0", "ctl"):
    write_text(DEVICE_PREFIX + name, "")
write_text(NVML_SPEC, f"driver 580.00\ndevice 0 {80 * GiB} 0 0 FakeGPU\n")

started = time.monotonic()
cgroups_before = None  # the cgroup folders of Slurm's that were there before its cgroup plugin ran
try:
    case_stand_in()
    start_munge()
    why = start_slurm("linuxproc")
    if why:
        skip(why, variable="GPUGUARD_REQUIRE_CLUSTER")
    say(f"cluster up in {time.monotonic() - started:.1f} s (proctrack/linuxproc)")
    for case in (case_pattern, case_reap, case_drain, case_dirty, case_residue):
        at = time.monotonic()
        case()
        say(f"{case.__name__}: {time.monotonic() - at:.1f} s")
        end_holders()  # a case that failed leaves nothing for the next one
        if not node_ready() and not resume():
            abort(f"the node did not come back after {case.__name__}", node())
    stop(("slurmd", "slurmctld"))
    at = time.monotonic()
    cgroups_before = slurm_cgroups()
    why = start_slurm("cgroup")
    if why:  # a container without a cgroup hierarchy Slurm can use
        say(f"note: proctrack/cgroup cannot run here, so its case is left out: {why}")
    else:
        case_cgroup()
        say(f"case_cgroup (proctrack/cgroup, with its start): {time.monotonic() - at:.1f} s")
finally:
    end_holders()
    stop(("slurmd", "slurmctld", "munged"))
    if cgroups_before is not None:
        remove_cgroups(slurm_cgroups() - cgroups_before)
    if failures:
        for name in ("slurmctld.log", "slurmd.log"):
            say(f"--- {name} (last lines)\n" + tail(os.path.join(SLURM_DIR, name), 15))
finish("cluster.slurm", f"({time.monotonic() - started:.1f} s)")
