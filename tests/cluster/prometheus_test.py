#!/usr/bin/env python3
"""deploy/prometheus/ as an operator would run it, on loopback: the alert rules under promtool, the
systemd units and the loop script, the Grafana dashboard's queries, and the whole path on real
servers: a real node_exporter (textfile collector only) and a real Prometheus (scrape and rule
evaluation every second) reading what `gpuguard doctor --prometheus` writes about a real orphan
holding fake device files (as tests/cli/doctor/doctor_test.py makes them), with NVML replaced by
tests/cli/fake_nvml.cpp.

  1. promtool check rules alerts.yml, promtool test rules alerts_test.yml; every alert has a
     `for:`, a severity and the annotations an operator reads, and alerts_test.yml makes each fire
     and shows it quiet;
  2. the dashboard is JSON whose every query parses (promtool check rules on a file of them) and,
     on the live server, returns data;
  3. the service's ExecStart and the timer (systemd-analyze verify where it is installed), the
     loop script (rewrites the file, ends at SIGTERM leaving no sleep behind, stops at a bad
     option);
  4. live: the orphan count shows through the HTTP API, GpuguardOrphanHoldsGpu becomes pending
     or firing (the test's copy of alerts.yml has every `for:` set to 2s) and the other alerts
     stay quiet; `gpuguard doctor --reap` ends the orphan, a fresh textfile brings the count to 0,
     the alert goes, and the residue NVML still reports on the now idle node raises
     GpuguardResidueOnIdleNode. Every rule evaluates without error on the real series.

Every process it starts is ended in a `finally`; ports are free ones on 127.0.0.1; every wait is
bounded, the whole test by DEADLINE_S. Exits 77 ("skipped: ...") where prometheus, promtool or
node_exporter is not installed (Debian: prometheus, prometheus-node-exporter), unless
GPUGUARD_REQUIRE_CLUSTER=1 (as CI sets), where that is a failure.

usage: prometheus_test.py GPUGUARD FAKE_NVML OPS_CHILD REPO_ROOT
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "cli", "doctor"))
from harness import check, finish, say, scratch, skip  # noqa: E402  (tests/support)
from procfs import stat as read_stat, wait_until  # noqa: E402  (tests/support)
from doctor_test import ORPHAN_MAKER  # noqa: E402  (the doctor tests' orphan: a reparented holder)

if len(sys.argv) != 5:
    sys.exit(__doc__)
GPUGUARD, FAKE_NVML, OPS_CHILD, ROOT = (os.path.abspath(a) for a in sys.argv[1:5])
DEPLOY = os.path.join(ROOT, "deploy", "prometheus")
DEADLINE_S = 80          # the whole test, servers included
TEST_FOR = "2s"          # every `for:` in the live copy of alerts.yml
TEXTFILE = "/var/lib/prometheus/node-exporter/gpuguard.prom"   # what the units and script name
START = time.monotonic()
NAME = "cluster.prometheus"


def left():
    return max(DEADLINE_S - (time.monotonic() - START), 0.5)


def read(name):
    with open(os.path.join(DEPLOY, name)) as f:
        return f.read()


def find_binary(*names):
    return next((shutil.which(n) for n in names if shutil.which(n)), None)


PROMTOOL = find_binary("promtool")
PROMETHEUS = find_binary("prometheus")
NODE_EXPORTER = find_binary("prometheus-node-exporter", "node_exporter")
missing = [n for n, p in (("promtool", PROMTOOL), ("prometheus", PROMETHEUS),
                          ("node_exporter (prometheus-node-exporter)", NODE_EXPORTER)) if p is None]
if missing:
    skip(", ".join(missing) + " not installed (Debian: prometheus, prometheus-node-exporter)",
         variable="GPUGUARD_REQUIRE_CLUSTER")

tmp = scratch("gpuguard-prometheus-")


def run(argv, timeout=30, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=min(timeout, left()), **kw)


# ---- 1. the alert rules under promtool ----------------------------------------------------------

ALERTS_TEXT = read("alerts.yml")
ALERT_NAMES = re.findall(r"^\s*- alert:\s*(\S+)", ALERTS_TEXT, re.M)
check(len(ALERT_NAMES) >= 4, "alerts.yml names its alerts", ALERT_NAMES)
r = run([PROMTOOL, "check", "rules", os.path.join(DEPLOY, "alerts.yml")])
check(r.returncode == 0 and f"SUCCESS: {len(ALERT_NAMES)} rules found" in r.stdout,
      "promtool check rules alerts.yml", r.stdout + r.stderr)
r = run([PROMTOOL, "test", "rules", os.path.join(DEPLOY, "alerts_test.yml")], timeout=60)
check(r.returncode == 0 and "SUCCESS" in r.stdout, "promtool test rules alerts_test.yml", r.stdout + r.stderr)

# Each alert is made to fire (a non-empty exp_alerts) and shown quiet (an empty one) in the tests.
cases = re.findall(r"- eval_time:.*?\n\s*alertname:\s*(\S+)\s*\n\s*exp_alerts:\s*(\[\])?", read("alerts_test.yml"))
for alert in ALERT_NAMES:
    check(any(a == alert and not empty for a, empty in cases), f"alerts_test.yml makes {alert} fire")
    check(any(a == alert and empty for a, empty in cases), f"alerts_test.yml shows {alert} quiet")

# The live copy: every `for:` shortened, so that an alert turns pending, then firing, in seconds.
live_alerts, shortened = re.subn(r"^(\s*)for:\s*\S+", rf"\1for: {TEST_FOR}", ALERTS_TEXT, flags=re.M)
check(shortened == len(ALERT_NAMES), f"every alert has a for: ({shortened} of {len(ALERT_NAMES)})")
LIVE_RULES = os.path.join(tmp, "alerts.live.yml")
with open(LIVE_RULES, "w") as f:
    f.write(live_alerts)
r = run([PROMTOOL, "check", "rules", LIVE_RULES])
check(r.returncode == 0, "the live copy of alerts.yml is still valid", r.stdout + r.stderr)

# ---- 2. the dashboard: JSON, and every query parses ---------------------------------------------

GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$instance": ".*"}   # what Grafana puts in


def concrete(expr):
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


try:
    DASHBOARD = json.loads(read("grafana-dashboard.json"))
except ValueError as error:
    DASHBOARD = {}
    check(False, "grafana-dashboard.json is JSON", error)
panels = DASHBOARD.get("panels", [])
ids = [p.get("id") for p in panels]
check(len(ids) == len(set(ids)) and None not in ids, "every panel has its own id", ids)
QUERIES = []   # (panel title, refId, expr)
for p in panels:
    if p.get("type") == "row":
        continue
    targets = p.get("targets", [])
    check(targets and p.get("title"), f"panel {p.get('id')} has a title and queries", p)
    refs = [t.get("refId") for t in targets]
    check(len(refs) == len(set(refs)), f"panel {p.get('title')}: refIds differ", refs)
    for t in targets:
        check(t.get("expr") and t.get("datasource", {}).get("uid") == "${datasource}",
              f"panel {p.get('title')} {t.get('refId')}: an expr on the dashboard's data source", t)
        QUERIES.append((p.get("title"), t.get("refId"), t.get("expr", "")))
variables = {v.get("name"): v for v in DASHBOARD.get("templating", {}).get("list", [])}
check({"datasource", "instance"} <= set(variables), "the dashboard has the variables datasource and instance",
      list(variables))
instance_query = variables.get("instance", {}).get("definition", "")
selector = re.fullmatch(r"label_values\((.+), instance\)", instance_query)
check(selector is not None, "the instance variable is label_values(SELECTOR, instance)", instance_query)
check(set(re.findall(r"\$\w+", " ".join(e for _, _, e in QUERIES))) <= set(GRAFANA_VARIABLES),
      "the queries use only the variables the test fills in", [e for _, _, e in QUERIES])

# promtool parses a rule file offline: one recording rule per query.
parse_rules = os.path.join(tmp, "dashboard.rules.yml")
with open(parse_rules, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for number, (_, _, expr) in enumerate(QUERIES):
        f.write(f"      - record: dashboard:query_{number}\n        expr: {json.dumps(concrete(expr))}\n")
r = run([PROMTOOL, "check", "rules", parse_rules])
check(r.returncode == 0 and f"SUCCESS: {len(QUERIES)} rules found" in r.stdout,
      f"promtool parses the dashboard's {len(QUERIES)} queries", r.stdout + r.stderr)

# ---- 3. the systemd units and the loop script ---------------------------------------------------

SERVICE = read("gpuguard-doctor.service")
TIMER = read("gpuguard-doctor.timer")
exec_start = re.search(r"^ExecStart=(.+)$", SERVICE, re.M)
check(exec_start is not None, "the service has an ExecStart")
EXEC_ARGV = exec_start.group(1).split() if exec_start else ["gpuguard", "doctor"]
check(EXEC_ARGV[1:] == ["doctor", "--prometheus", TEXTFILE], "ExecStart runs the doctor into the textfile",
      EXEC_ARGV)
check(f"ReadWritePaths={os.path.dirname(TEXTFILE)}\n" in SERVICE, "the service may write the textfile's folder")
check(re.search(r"^SuccessExitStatus=1$", SERVICE, re.M), "status 1 (holders found) is not a failed unit")
period = re.search(r"^OnUnitActiveSec=(\d+)s$", TIMER, re.M)
stale = re.search(r"gpuguard_doctor_last_sample_timestamp_seconds > (\d+)", ALERTS_TEXT)
check(period and stale and 3 * int(period.group(1)) <= int(stale.group(1)),
      "the timer runs at least three times before GpuguardDoctorStale's threshold",
      (period and period.group(0), stale and stale.group(0)))
analyze = shutil.which("systemd-analyze")
if analyze:
    units = os.path.join(tmp, "units")
    os.mkdir(units)
    with open(os.path.join(units, "gpuguard-doctor.service"), "w") as f:
        f.write(SERVICE.replace(exec_start.group(1).split()[0], GPUGUARD, 1))   # this build's binary
    with open(os.path.join(units, "gpuguard-doctor.timer"), "w") as f:
        f.write(TIMER)
    r = run([analyze, "verify", os.path.join(units, "gpuguard-doctor.service"),
             os.path.join(units, "gpuguard-doctor.timer")])
    check(r.returncode == 0 and not r.stderr.strip(), "systemd-analyze verify accepts the service and timer",
          r.stdout + r.stderr)
else:
    say("note: systemd-analyze is not installed here; the units were checked by the test's own reading only")

devices = os.path.join(tmp, "dev")
os.mkdir(devices)
PREFIX = os.path.join(devices, "nvidia")
DEVICE_FILES = [PREFIX + "0", PREFIX + "ctl"]
for path in DEVICE_FILES:
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)


def doctor_env(nvml_spec=None):
    env = dict(os.environ)
    env.pop("GPUGUARD_DEVICE_PREFIX", None)
    if nvml_spec is None:
        env.pop("GPUGUARD_FAKE_NVML", None)
        env["GPUGUARD_NVML_LIBRARY"] = os.path.join(tmp, "no-such-dir", "libnvidia-ml.so.1")
    else:
        spec = os.path.join(tmp, "nvml.spec")
        with open(spec, "w") as f:
            f.write(nvml_spec)
        env["GPUGUARD_NVML_LIBRARY"] = FAKE_NVML
        env["GPUGUARD_FAKE_NVML"] = spec
    return env


def prom_values(path):
    """{metric name with labels: value} of a textfile (the exposition format's plain lines)."""
    with open(path) as f:
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\w+(?:\{[^}]*\})?) (\S+)$", f.read(), re.M)}


def end(process, grace=5):
    """SIGTERM, then SIGKILL after `grace` seconds; collects it. Never raises."""
    if process is None or process.poll() is not None:
        return
    try:
        process.terminate()
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def group_members(pgid):
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = read_stat(int(name))
            if s is not None and s.pgid == pgid and s.state not in ("Z", "X"):
                members.append((int(name), s.comm))
    return members


loop_dir = os.path.join(tmp, "loop")
os.mkdir(loop_dir)
loop_file = os.path.join(loop_dir, "gpuguard.prom")
loop_env = dict(doctor_env(), GPUGUARD=GPUGUARD, GPUGUARD_TEXTFILE=loop_file)


def loop_until_sigterm(interval, samples):
    """Runs the loop script every `interval` s until its textfile has had `samples` distinct
    samples, then SIGTERMs it: it must end at once with status 0, its sleep with it."""
    if os.path.exists(loop_file):
        os.unlink(loop_file)   # the samples counted are this run's
    loop = subprocess.Popen(["sh", os.path.join(DEPLOY, "gpuguard-doctor-loop.sh"), "--device-prefix", PREFIX,
                             "--no-nvml"], env=dict(loop_env, GPUGUARD_INTERVAL=str(interval)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stamps = set()

        def seen():
            if os.path.exists(loop_file):
                stamps.add(prom_values(loop_file).get("gpuguard_doctor_last_sample_timestamp_seconds"))
            return len(stamps - {None}) >= samples

        check(wait_until(seen, min(5 + samples * interval, left()), step=0.1),
              f"the loop script (every {interval} s) writes {samples} sample(s)", stamps)
        check(sorted(os.listdir(loop_dir)) == ["gpuguard.prom"], "only the .prom file is left in the folder",
              os.listdir(loop_dir))
        os.kill(loop.pid, signal.SIGTERM)
        try:
            _, err = loop.communicate(timeout=3)
            check(loop.returncode == 0, "the loop script ends at SIGTERM with status 0", (loop.returncode, err))
        except subprocess.TimeoutExpired:
            check(False, f"the loop script ends within 3 s of SIGTERM while it sleeps {interval} s")
        # Its sleep was in its process group: nothing of the group may outlive it.
        check(wait_until(lambda: not group_members(loop.pid), 1), "the loop script leaves no sleep behind",
              group_members(loop.pid))
    finally:
        if loop.poll() is None:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait(timeout=10)
        for member, _ in group_members(loop.pid):   # the group the test made for it, nothing else
            os.kill(member, signal.SIGKILL)


loop_until_sigterm(1, 2)     # rewrites the file
loop_until_sigterm(30, 1)    # a signal ends the wait at once
r = run(["sh", os.path.join(DEPLOY, "gpuguard-doctor-loop.sh"), "--no-such-option"], env=loop_env, timeout=15)
check(r.returncode == 2 and "status 2" in r.stderr, "the loop script stops at an option the doctor refuses",
      (r.returncode, r.stderr))
r = run(["sh", os.path.join(DEPLOY, "gpuguard-doctor-loop.sh")], env=dict(loop_env, GPUGUARD_INTERVAL="1m"), timeout=15)
check(r.returncode == 2 and "GPUGUARD_INTERVAL" in r.stderr and "'1m'" in r.stderr,
      "the loop script names a bad GPUGUARD_INTERVAL", (r.returncode, r.stderr))

# ---- 4. live: node_exporter and Prometheus on loopback ------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=3):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


def start_server(name, argv_for_port, ready_path, log_name):
    """Starts a server on a free port (another try on a fresh port if it dies at once: the port was
    taken meanwhile); returns (Popen, port) once `ready_path` answers 200, or (None, None)."""
    for _ in range(3):
        port = free_port()
        log = open(os.path.join(tmp, log_name), "w")
        process = subprocess.Popen(argv_for_port(port), stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        log.close()
        servers.append(process)

        def ready():
            if process.poll() is not None:
                return True
            try:
                return http_get(f"http://127.0.0.1:{port}{ready_path}")[0] == 200
            except (OSError, urllib.error.URLError):
                return False

        if wait_until(ready, min(30, left()), step=0.1) and process.poll() is None:
            return process, port
        end(process)
        with open(os.path.join(tmp, log_name)) as f:
            say(f"{name} did not start on port {port}: {f.read()[-2000:]}")
    return None, None


def api(path, **params):
    """The `data` of a Prometheus API answer; raises on an error answer."""
    url = f"http://127.0.0.1:{prom_port}/api/v1/{path}?" + urllib.parse.urlencode(params)
    try:
        _, body = http_get(url)
    except urllib.error.HTTPError as error:
        body = error.read().decode()
    answer = json.loads(body)
    if answer.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {answer.get('errorType')}: {answer.get('error')}")
    return answer["data"]


def value_of(expr):
    result = api("query", query=expr)["result"]
    return float(result[0]["value"][1]) if len(result) == 1 else None


def alerts(name):
    return [a for a in api("alerts")["alerts"] if a["labels"].get("alertname") == name]


def wait_for(predicate, what, detail, timeout=25):
    """check() that `predicate` comes to hold within `timeout` seconds (bounded by the deadline)."""
    return check(wait_until(predicate, min(timeout, left()), step=0.2), what, detail())


servers = []
maker = None
orphan = orphan_start = None
try:
    textfile_dir = os.path.join(tmp, "textfile")
    os.mkdir(textfile_dir)
    node_exporter, node_port = start_server(
        "node_exporter",
        lambda port: [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                      "--collector.textfile", f"--collector.textfile.directory={textfile_dir}",
                      "--web.disable-exporter-metrics"],
        "/metrics", "node_exporter.log")
    if node_exporter is None:
        check(False, "node_exporter starts on 127.0.0.1")
        finish(NAME)
    TARGET = f"127.0.0.1:{node_port}"
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                f"rule_files:\n  - {json.dumps(LIVE_RULES)}\n"
                "scrape_configs:\n  - job_name: node\n"
                f"    static_configs:\n      - targets: [\"{TARGET}\"]\n")
    prometheus, prom_port = start_server(
        "prometheus",
        lambda port: [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                      f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        "/-/ready", "prometheus.log")
    if prometheus is None:
        check(False, "Prometheus starts on 127.0.0.1")
        finish(NAME)
    say(f"node_exporter on {TARGET}, Prometheus on 127.0.0.1:{prom_port} ({time.monotonic() - START:.1f} s in)")
    series_from = time.time()

    # A program tracked by the library writes its own file beside the doctor's (prometheus_file).
    r = run([OPS_CHILD, "plain"], env=dict(os.environ, GPUGUARD_OPTIONS="device=host:text_log=off:prometheus_file="
                                           + os.path.join(textfile_dir, "gpuguard-%p.prom")))
    check(r.returncode == 0, "the tracked program writes its Prometheus file", r.stderr)

    # The orphan: a holder of the fake device files whose job is gone, reparented to a subreaper
    # (the maker, our child), which collects it once reaped: an init that does not collect its
    # children (a container's) would leave a zombie, a holder of its own class.
    maker = subprocess.Popen([sys.executable, "-c", ORPHAN_MAKER, "subreaper", *DEVICE_FILES],
                             stdout=subprocess.PIPE, text=True, cwd=tmp)
    check(int(maker.stdout.readline()) == maker.pid, "the maker is the subreaper")
    orphan = int(maker.stdout.readline())
    orphan_start = read_stat(orphan).start_time
    check(wait_until(lambda: read_stat(orphan) is not None and read_stat(orphan).ppid == maker.pid, 10),
          "the orphan is reparented to the subreaper")
    GiB = 1 << 30
    nvml = doctor_env(f"device 0 {80 * GiB} 0 {6 * GiB} Fake H200\nprocess 0 {orphan} {4 * GiB}\n")
    textfile = os.path.join(textfile_dir, "gpuguard.prom")

    def doctor(*extra):
        # The service's command line, with this build's binary, the test's textfile and devices.
        argv = [GPUGUARD, *EXEC_ARGV[1:]]
        argv[argv.index(TEXTFILE)] = textfile
        return run([*argv, "--device-prefix", PREFIX, *extra], env=nvml)

    r = doctor()
    check(r.returncode == 1, "the doctor finds the orphan (status 1)", r.stdout + r.stderr)
    wait_for(lambda: value_of("gpuguard_doctor_orphans") == 1, "Prometheus shows 1 orphan through node_exporter",
             lambda: api("query", query="gpuguard_doctor_orphans"))
    wait_for(lambda: any(a["state"] in ("pending", "firing") for a in alerts("GpuguardOrphanHoldsGpu")),
             "GpuguardOrphanHoldsGpu becomes pending or firing", lambda: api("alerts"))
    fired = alerts("GpuguardOrphanHoldsGpu")
    check(fired and fired[0]["labels"].get("severity") == "warning" and fired[0]["labels"].get("instance") == TARGET
          and "gpuguard doctor --reap" in fired[0]["annotations"].get("action", ""),
          "the orphan alert names the node, its severity and what to do", fired)
    wait_for(lambda: any(a["state"] == "firing" for a in alerts("GpuguardOrphanHoldsGpu")),
             f"GpuguardOrphanHoldsGpu fires after its for: ({TEST_FOR})", lambda: alerts("GpuguardOrphanHoldsGpu"))
    for quiet in ("GpuguardResidueOnIdleNode", "GpuguardDeviceMemoryFull", "GpuguardDoctorStale",
                  "GpuguardHolderStuckInDriver", "GpuguardDoctorFailing"):
        if quiet in ALERT_NAMES:
            check(not alerts(quiet), f"{quiet} stays quiet while a job's orphan holds the GPU", alerts(quiet))
    check(value_of("node_textfile_scrape_error") == 0, "node_exporter reads every textfile without error",
          api("query", query="node_textfile_scrape_error"))

    # Every rule was loaded with its labels and annotations, and evaluates on real series.
    rules = [rule for group in api("rules")["groups"] for rule in group["rules"]]
    check(sorted(rule["name"] for rule in rules) == sorted(ALERT_NAMES), "Prometheus loaded every alert",
          [rule["name"] for rule in rules])
    for rule in rules:
        check(rule.get("health") == "ok", f"{rule['name']} evaluates without error", rule.get("lastError"))
        check(rule["labels"].get("severity") in ("critical", "warning", "info"), f"{rule['name']} has a severity",
              rule["labels"])
        check({"summary", "description", "action"} <= set(rule["annotations"]),
              f"{rule['name']} says what happened and what to do", rule["annotations"])

    # --reap ends the orphan; its file says what it did; a fresh file has no orphan left.
    r = doctor("--reap", "--grace", "2")
    check(r.returncode == 0, "doctor --reap: status 0 (every holder listed has ended)", r.stdout + r.stderr)
    check(wait_until(lambda: read_stat(orphan) is None, 5), "the orphan has ended and was collected",
          read_stat(orphan))
    wait_for(lambda: value_of('gpuguard_doctor_reap_targets{action="terminated"}') == 1,
             "Prometheus shows the reap's terminated target",
             lambda: api("query", query="gpuguard_doctor_reap_targets"))
    r = doctor()
    check(r.returncode == 1, "the doctor after the reap: status 1 (a PID NVML lists, not visible here)",
          r.stdout + r.stderr)
    check(prom_values(textfile).get("gpuguard_doctor_orphans") == 0, "the fresh textfile counts no orphan")
    wait_for(lambda: value_of("gpuguard_doctor_orphans") == 0, "Prometheus shows the orphan count back at 0",
             lambda: api("query", query="gpuguard_doctor_orphans"))
    wait_for(lambda: not alerts("GpuguardOrphanHoldsGpu"), "GpuguardOrphanHoldsGpu goes once the orphan is reaped",
             lambda: alerts("GpuguardOrphanHoldsGpu"))
    wait_for(lambda: any(a["state"] in ("pending", "firing") and a["labels"].get("device") == "0"
                         for a in alerts("GpuguardResidueOnIdleNode")),
             "GpuguardResidueOnIdleNode rises for the 6 GiB no process here accounts for",
             lambda: (api("alerts"), api("query", query="gpuguard_doctor_holders_by_class")))
    check(sorted(os.listdir(textfile_dir)) == sorted(n for n in os.listdir(textfile_dir) if n.endswith(".prom")),
          "only .prom files in the textfile folder (the doctor's temporary files are renamed)",
          os.listdir(textfile_dir))

    # Every dashboard query answers, with data, over the time the test's series exist.
    if selector:
        found = api("series", **{"match[]": selector.group(1), "start": series_from, "end": time.time()})
        check(any(s.get("instance") == TARGET for s in found), "the instance variable lists this node", found)
    for title, ref, expr in QUERIES:
        try:
            result = api("query_range", query=concrete(expr), start=series_from, end=time.time(), step=1)["result"]
            check(result, f"dashboard {title} {ref} returns data", concrete(expr))
        except RuntimeError as error:
            check(False, f"dashboard {title} {ref} is a query Prometheus runs", error)
finally:
    if orphan is not None:
        s = read_stat(orphan)
        if s is not None and s.start_time == orphan_start:   # the same process, never another one
            os.kill(orphan, signal.SIGKILL)
    if maker is not None:
        end(maker)
        maker.stdout.close()
    for server in reversed(servers):
        end(server)

finish(NAME, f"({time.monotonic() - START:.1f} s)")
