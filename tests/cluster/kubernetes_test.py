#!/usr/bin/env python3
"""The Kubernetes manifests of deploy/kubernetes/, checked offline: no cluster runs here, so this test
checks what the API server and the kubelet would check first, and what gpuguard itself would.

What it checks, for every YAML document of every deploy/kubernetes/*.yaml:
- it parses (PyYAML), and its apiVersion/kind pair is one that current Kubernetes serves (v1
  Namespace/Pod/ConfigMap/Service/ServiceAccount, apps/v1 DaemonSet/Deployment/StatefulSet,
  batch/v1 Job/CronJob); metadata.name is a DNS-1123 subdomain, label keys and values are valid;
- a DaemonSet's or Job's spec.selector.matchLabels are all in its template's labels; a Job's pods
  restart Never or OnFailure;
- every pod spec: containers each with a unique DNS-1123 label name and an image; every
  volumeMount names a declared volume, at an absolute path, once; volume names unique, each with
  one source; hostPath paths absolute and their type one of the kubelet's (DirectoryOrCreate,
  Directory, FileOrCreate, File, Socket, CharDevice, BlockDevice, or empty);
  lifecycle.preStop/postStart.exec.command a non-empty list of strings; resource quantities in
  the API's grammar, requests no larger than limits; ports 1..65535 with names of at most 15
  characters; env names valid and every $(VAR) they or the command use defined before; added
  capabilities real Linux capability names, each one explained in deploy/kubernetes/README.md;
  no container privileged, every container dropping ALL capabilities;
- what these manifests promise: the DaemonSet runs the doctor with hostPID and writes its
  --prometheus file into a volume that a node-exporter container of the same pod reads as its
  --collector.textfile.directory; the training Job's container runs its command under
  `gpuguard run` and has a preStop hook that runs `gpuguard doctor --reap`, without
  shareProcessNamespace, with a termination grace period longer than the hook's --grace;
- every gpuguard command line in them (exec form, or inside `sh -c`) is accepted by the real
  `gpuguard` binary: each flag appears in `gpuguard <command> --help`, and the line itself runs in
  a dry form (doctor: its --prometheus file moved to a scratch folder, --count 1 after --watch, a
  device prefix that matches nothing and --no-nvml, so it finds no holder and signals nothing;
  run: CMD replaced by `true`), which must not be a usage error (status 2); the doctor's file is
  read back with prometheus-client's parser;
- every key of a GPUGUARD_OPTIONS value is a key of docs/options.md's table;
- and that the checks above can fail: broken copies of the manifests (a selector that matches
  nothing, a mount of an undeclared volume, a bad quantity, a bad hostPath type, a preStop
  command that is a string, an unknown doctor flag) are each rejected.

usage: kubernetes_test.py GPUGUARD_BINARY REPO_ROOT
"""
import copy
import glob
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from harness import check, finish, scratch  # noqa: E402  (tests/support)

try:
    import yaml
except ImportError:
    print("FAILED: PyYAML is not installed for %s (scripts/deps.sh installs it into the test venv)" % sys.executable)
    sys.exit(1)

GPUGUARD, ROOT = sys.argv[1], sys.argv[2]
DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")

SERVED = {
    ("v1", "Namespace"), ("v1", "Pod"), ("v1", "ConfigMap"), ("v1", "Service"), ("v1", "ServiceAccount"),
    ("apps/v1", "DaemonSet"), ("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"),
    ("batch/v1", "Job"), ("batch/v1", "CronJob"),
}
HOST_PATH_TYPES = {"", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"}
VOLUME_SOURCES = {"hostPath", "emptyDir", "configMap", "secret", "persistentVolumeClaim", "projected", "downwardAPI",
                  "csi", "ephemeral", "nfs"}
CAPABILITIES = {
    "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE", "CHOWN",
    "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE",
    "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST",
    "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT",
    "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME",
    "SYS_TTY_CONFIG", "SYSLOG", "WAKE_ALARM", "ALL",
}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?)$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# The API's resource.Quantity: a signed decimal, then a binary or decimal suffix or an exponent.
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": 1e-9, "u": 1e-6,
          "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "": 1}


def quantity(text):
    """The value of a resource quantity, or None where the API would reject it."""
    text = str(text)
    m = QUANTITY.match(text)
    if not m:
        return None
    suffix = m.group(3) or ""
    number = text[:len(text) - len(suffix)] if suffix else text
    if suffix[:1] in ("e", "E"):
        return float(text)
    return float(number) * SUFFIX[suffix]


def label_key_ok(key):
    prefix, _, name = key.rpartition("/")
    return (not prefix or (len(prefix) <= 253 and DNS_SUBDOMAIN.match(prefix))) and bool(LABEL_NAME.match(name))


def label_value_ok(value):
    return isinstance(value, str) and len(value) <= 63 and bool(LABEL_VALUE.match(value))


# ---- structure -----------------------------------------------------------------------------------

def pod_template(doc):
    """The pod spec and the template's metadata of a workload, or (None, None)."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Pod":
        return spec, doc.get("metadata") or {}
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template") or {}
    return template.get("spec"), template.get("metadata") or {}


def container_problems(where, c, volumes):
    problems = []
    name = c.get("name")
    if not isinstance(name, str) or not DNS_LABEL.match(name):
        problems.append("%s: container name %r is not a DNS-1123 label" % (where, name))
    where = "%s container %s" % (where, name)
    if not isinstance(c.get("image"), str) or not c["image"]:
        problems.append("%s: no image" % where)
    for key in ("command", "args"):
        if key in c and not (isinstance(c[key], list) and all(isinstance(a, str) for a in c[key])):
            problems.append("%s: %s is not a list of strings" % (where, key))
    paths = set()
    for m in c.get("volumeMounts") or []:
        if m.get("name") not in volumes:
            problems.append("%s: volumeMount %r names no declared volume" % (where, m.get("name")))
        path = m.get("mountPath")
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append("%s: mountPath %r is not absolute" % (where, path))
        if path in paths:
            problems.append("%s: mountPath %r twice" % (where, path))
        paths.add(path)
    for hook in ("preStop", "postStart"):
        handler = ((c.get("lifecycle") or {}).get(hook)) or None
        if handler is not None and "exec" in handler:
            command = handler["exec"].get("command")
            if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
                problems.append("%s: lifecycle.%s.exec.command is not a non-empty list of strings: %r" % (where, hook, command))
    resources = c.get("resources") or {}
    values = {}
    for kind in ("requests", "limits"):
        for resource, amount in (resources.get(kind) or {}).items():
            value = quantity(amount)
            if value is None or value < 0:
                problems.append("%s: %s.%s %r is not a resource quantity" % (where, kind, resource, amount))
            values[(kind, resource)] = value
    for (kind, resource), value in values.items():
        limit = values.get(("limits", resource))
        if kind == "requests" and value is not None and limit is not None and value > limit:
            problems.append("%s: requests.%s is above its limit" % (where, resource))
    for port in c.get("ports") or []:
        number = port.get("containerPort")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            problems.append("%s: containerPort %r" % (where, number))
        if "name" in port and not (len(port["name"]) <= 15 and DNS_LABEL.match(port["name"])):
            problems.append("%s: port name %r" % (where, port["name"]))
    defined = []
    for e in c.get("env") or []:
        if not ENV_NAME.match(str(e.get("name", ""))):
            problems.append("%s: env name %r" % (where, e.get("name")))
        for ref in re.findall(r"\$\(([^)]*)\)", str(e.get("value", ""))):
            if ref not in defined:
                problems.append("%s: env %s uses $(%s) before it is defined" % (where, e.get("name"), ref))
        defined.append(e.get("name"))
    for word in (c.get("command") or []) + (c.get("args") or []):
        for ref in re.findall(r"\$\(([^)]*)\)", word):
            if ref not in defined:
                problems.append("%s: $(%s) in its command names no env variable" % (where, ref))
    sc = c.get("securityContext") or {}
    if sc.get("privileged"):
        problems.append("%s: privileged" % where)
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        problems.append("%s: does not drop ALL capabilities" % where)
    for cap in caps.get("add") or []:
        if cap not in CAPABILITIES or cap == "ALL":
            problems.append("%s: %r is not a capability to add" % (where, cap))
    return problems


def document_problems(where, doc):
    """Every way `doc` breaks what the API requires of its kind (the list above)."""
    problems = []
    pair = (doc.get("apiVersion"), doc.get("kind"))
    if pair not in SERVED:
        return ["%s: %s %s is not served by Kubernetes" % (where, *pair)]
    meta = doc.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        problems.append("%s: metadata.name %r is not a DNS-1123 subdomain" % (where, name))
    where = "%s %s/%s" % (where, pair[1], name)
    spec, template_meta = pod_template(doc)
    for labels in (meta.get("labels") or {}, template_meta.get("labels") or {}):
        for key, value in labels.items():
            if not label_key_ok(key) or not label_value_ok(value):
                problems.append("%s: label %r=%r" % (where, key, value))
    if pair[1] in ("Namespace", "ConfigMap", "ServiceAccount", "Service"):
        return problems
    if spec is None:
        return problems + ["%s: no pod template" % where]
    if pair[1] in ("DaemonSet", "Deployment", "StatefulSet"):
        selector = ((doc.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        template_labels = template_meta.get("labels") or {}
        if not selector or any(template_labels.get(k) != v for k, v in selector.items()):
            problems.append("%s: spec.selector.matchLabels %r do not match the template's labels %r" %
                            (where, selector, template_labels))
    if pair[1] in ("Job", "CronJob") and spec.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append("%s: a Job's pods must restart Never or OnFailure, not %r" % (where, spec.get("restartPolicy")))
    volumes = {}
    for v in spec.get("volumes") or []:
        vname = v.get("name")
        if not isinstance(vname, str) or not DNS_LABEL.match(vname) or vname in volumes:
            problems.append("%s: volume name %r (a DNS-1123 label, once)" % (where, vname))
        sources = [k for k in v if k != "name"]
        if len(sources) != 1 or sources[0] not in VOLUME_SOURCES:
            problems.append("%s: volume %s has sources %r, not one" % (where, vname, sources))
        host = v.get("hostPath")
        if host is not None:
            if not str(host.get("path", "")).startswith("/"):
                problems.append("%s: hostPath %r is not absolute" % (where, host.get("path")))
            if host.get("type", "") not in HOST_PATH_TYPES:
                problems.append("%s: hostPath type %r" % (where, host.get("type")))
        volumes[vname] = v
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append("%s: no containers" % where)
        containers = []
    names = [c.get("name") for c in containers + (spec.get("initContainers") or [])]
    if len(names) != len(set(names)):
        problems.append("%s: container names repeat: %r" % (where, names))
    for c in containers + (spec.get("initContainers") or []):
        problems += container_problems(where, c, volumes)
    return problems


# ---- gpuguard command lines ----------------------------------------------------------------------

def gpuguard_lines(argv):
    """The gpuguard command lines of a container command: the list itself, or those inside `sh -c`."""
    if not argv:
        return []
    if os.path.basename(argv[0]) == "gpuguard":
        return [list(argv)]
    if os.path.basename(argv[0]) in ("sh", "bash") and "-c" in argv:
        script = argv[argv.index("-c") + 1]
        # Redirections ("2>&1", ">/proc/1/fd/2") are the shell's, not the command's: dropped.
        script = re.sub(r"(^|\s)\d*(>>|>&|<&|&>|>|<)\s*[^\s;&|]+", " ", script)
        lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lines, current = [], []
        for w in lexer:
            if w in (";", "&&", "||", "|", "&"):
                lines.append(current)
                current = []
            else:
                current.append(w)
        lines.append(current)
        return [line for line in lines if line and os.path.basename(line[0]) == "gpuguard"]
    return []


def help_flags(command):
    r = subprocess.run([GPUGUARD, command, "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", r.stdout + r.stderr)) if r.returncode == 0 else set()


HELP = {}


def command_problems(where, line, work):
    """Why the real binary would refuse `line` (a gpuguard command line), or []."""
    if len(line) < 2 or line[1] not in ("doctor", "run"):
        return ["%s: %r is not a gpuguard command these manifests may use (doctor, run)" % (where, line)]
    command, args = line[1], list(line[2:])
    flags = HELP.setdefault(command, help_flags(command))
    if not flags:
        return ["%s: gpuguard %s --help failed" % (where, command)]
    options = args[:args.index("--")] if "--" in args else args
    problems = ["%s: %s is not in gpuguard %s --help" % (where, a.split("=")[0], command)
                for a in options if a.startswith("--") and a != "--" and a.split("=")[0] not in flags]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUGUARD_")}
    prom = None
    if command == "doctor":
        if "--prometheus" in args:
            at = args.index("--prometheus") + 1
            prom = os.path.join(work, "doctor-%d.prom" % len(os.listdir(work)))
            args[at] = prom
        if "--watch" in args:
            args += ["--count", "1"]
        if "--device-prefix" not in args:
            args += ["--device-prefix", "/nonexistent-gpuguard-cluster-test/nvidia"]
        args += ["--no-nvml"]
        expected = (0,)
    else:
        if "--" not in args:
            return problems + ["%s: gpuguard run without -- before CMD" % where]
        args = args[:args.index("--") + 1] + ["true"]
        expected = (0,)
    r = subprocess.run([GPUGUARD, command] + args, capture_output=True, text=True, timeout=60, env=env)
    if r.returncode not in expected:
        problems.append("%s: gpuguard %s %s exited %d (2 is a usage error): %s" %
                        (where, command, " ".join(args), r.returncode, r.stderr.strip()))
    if prom is not None and r.returncode in expected:
        try:
            from prometheus_client.parser import text_string_to_metric_families
            with open(prom) as f:
                names = {family.name for family in text_string_to_metric_families(f.read())}
            if "gpuguard_doctor_holders" not in names:
                problems.append("%s: the doctor's --prometheus file lacks gpuguard_doctor_holders: %r" % (where, names))
        except ImportError:
            print("note: prometheus-client is not installed; the doctor's file was not parsed")
    return problems


def option_keys():
    with open(os.path.join(ROOT, "docs", "options.md")) as f:
        return set(re.findall(r"^\| `([a-z_]+)` \|", f.read(), re.M))


def containers_of(doc):
    spec, _ = pod_template(doc)
    if not isinstance(spec, dict):
        return []
    return [(c, spec) for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])]


def commands_of(container):
    """The container's command lines: its command with its args, and its lifecycle hooks'."""
    out = []
    main = (container.get("command") or []) + (container.get("args") or [])
    if main:
        out.append(("command", main))
    for hook, handler in (container.get("lifecycle") or {}).items():
        if isinstance(handler, dict) and isinstance((handler.get("exec") or {}).get("command"), list):
            out.append(("lifecycle." + hook, handler["exec"]["command"]))
    return out


def manifest_problems(path, docs, work, keys):
    problems = []
    for n, doc in enumerate(docs):
        where = "%s[%d]" % (os.path.basename(path), n)
        if not isinstance(doc, dict):
            problems.append("%s: not a mapping" % where)
            continue
        problems += document_problems(where, doc)
        for c, _ in containers_of(doc):
            for what, argv in commands_of(c):
                for line in gpuguard_lines(argv):
                    problems += command_problems("%s %s %s" % (where, c.get("name"), what), line, work)
            for e in c.get("env") or []:
                if e.get("name") == "GPUGUARD_OPTIONS":
                    for item in filter(None, str(e.get("value", "")).split(":")):
                        key = item.split("=", 1)[0]
                        if key not in keys:
                            problems.append("%s %s: GPUGUARD_OPTIONS key %r is not in docs/options.md" %
                                            (where, c.get("name"), key))
    return problems


# ---- the manifests -------------------------------------------------------------------------------

work = scratch("gpuguard-kubernetes-")
keys = option_keys()
check(len(keys) > 20 and "prometheus_job" in keys, "docs/options.md's table lists the keys", sorted(keys))
manifests = {}
for path in sorted(glob.glob(os.path.join(DEPLOY, "*.yaml"))):
    try:
        with open(path) as f:
            manifests[os.path.basename(path)] = [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as error:
        check(False, "%s parses as YAML" % path, error)
check(set(manifests) >= {"daemonset.yaml", "prestop-hook.yaml"}, "deploy/kubernetes has both manifests", sorted(manifests))
for name, docs in manifests.items():
    problems = manifest_problems(name, docs, work, keys)
    check(not problems, "%s: every document is well-formed and every gpuguard line is accepted" % name,
          "\n".join(problems))

with open(os.path.join(DEPLOY, "README.md")) as f:
    readme = f.read()
for name, docs in manifests.items():
    for doc in docs:
        for c, _ in containers_of(doc):
            for cap in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []:
                check(cap in readme, "README.md explains why %s needs %s" % (c.get("name"), cap))

# ---- what the two manifests promise --------------------------------------------------------------


def the(kind, docs):
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == kind]
    return found[0] if len(found) == 1 else None


def mount_of(container, path):
    """The volume whose mount in `container` holds `path`."""
    best = None
    for m in container.get("volumeMounts") or []:
        root = m["mountPath"].rstrip("/") + "/"
        if (path + "/").startswith(root) and (best is None or len(root) > len(best[0])):
            best = (root, m["name"])
    return best[1] if best else None


ds = the("DaemonSet", manifests.get("daemonset.yaml", []))
if check(ds is not None, "daemonset.yaml has one DaemonSet"):
    spec, _ = pod_template(ds)
    check(spec.get("hostPID") is True, "the DaemonSet sees every process of the node (hostPID)")
    doctor = [c for c in spec["containers"] if (c.get("command") or [None])[:2] == ["gpuguard", "doctor"]]
    exporter = [c for c in spec["containers"] if any(a.startswith("--collector.textfile.directory=")
                                                     for a in c.get("args") or [])]
    if check(len(doctor) == 1 and len(exporter) == 1, "one doctor container and one node-exporter container"):
        argv = doctor[0]["command"]
        check("--prometheus" in argv and "--watch" in argv, "the doctor samples in a loop into a textfile", argv)
        prom = argv[argv.index("--prometheus") + 1] if "--prometheus" in argv else ""
        directory = [a.split("=", 1)[1] for a in exporter[0]["args"] if a.startswith("--collector.textfile.directory=")][0]
        check(prom.endswith(".prom") and os.path.dirname(prom) == directory.rstrip("/"),
              "the doctor writes a .prom file into node-exporter's textfile directory", (prom, directory))
        shared = mount_of(doctor[0], prom)
        check(shared is not None and shared == mount_of(exporter[0], directory + "/x.prom"),
              "the textfile directory is one volume mounted in both containers", shared)

job = the("Job", manifests.get("prestop-hook.yaml", []))
if check(job is not None, "prestop-hook.yaml has one Job"):
    spec, _ = pod_template(job)
    check(not spec.get("shareProcessNamespace"), "the hook sees its own container's processes only (no shareProcessNamespace)")
    trainer = spec["containers"][0]
    check((trainer.get("command") or [])[:2] == ["gpuguard", "run"], "the trainer runs under gpuguard run",
          trainer.get("command"))
    hook = (((trainer.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get("command") or []
    lines = gpuguard_lines(hook)
    reap = [line for line in lines if line[1:2] == ["doctor"] and "--reap" in line]
    if check(len(reap) == 1, "the preStop hook runs gpuguard doctor --reap", hook):
        grace = float(reap[0][reap[0].index("--grace") + 1]) if "--grace" in reap[0] else 5.0
        check(spec.get("terminationGracePeriodSeconds", 30) > grace,
              "the pod's grace period outlasts the hook's --grace", (spec.get("terminationGracePeriodSeconds"), grace))

# ---- the checks can fail -------------------------------------------------------------------------


def broken(name, mutate):
    docs = copy.deepcopy(manifests.get(name, []))
    mutate(docs)
    return manifest_problems(name, docs, work, keys)


def workload(docs):
    return [d for d in docs if d.get("kind") in ("DaemonSet", "Job")][0]


def first_container(docs):
    return pod_template(workload(docs))[0]["containers"][0]


if ds is not None and job is not None:
    cases = {
        "a selector that matches no template label":
            ("daemonset.yaml", lambda d: workload(d)["spec"]["selector"]["matchLabels"].update({"app.kubernetes.io/name": "other"}),
             "do not match"),
        "a mount of an undeclared volume":
            ("daemonset.yaml", lambda d: first_container(d)["volumeMounts"].append({"name": "nowhere", "mountPath": "/x"}),
             "names no declared volume"),
        "a malformed quantity":
            ("daemonset.yaml", lambda d: first_container(d)["resources"]["limits"].update({"memory": "256MB"}),
             "is not a resource quantity"),
        "a request above its limit":
            ("daemonset.yaml", lambda d: first_container(d)["resources"]["requests"].update({"cpu": "1"}),
             "above its limit"),
        "an invalid hostPath type":
            ("daemonset.yaml", lambda d: pod_template(workload(d))[0]["volumes"][0]["hostPath"].update({"type": "Dir"}),
             "hostPath type"),
        "an unknown doctor flag":
            ("daemonset.yaml", lambda d: first_container(d)["command"].append("--watch-forever"),
             "is not in gpuguard doctor --help"),
        "a doctor flag used wrongly":
            ("daemonset.yaml", lambda d: first_container(d)["command"].extend(["--grace", "3"]),
             "usage error"),
        "a preStop command that is one string":
            ("prestop-hook.yaml",
             lambda d: first_container(d)["lifecycle"]["preStop"]["exec"].update({"command": "gpuguard doctor --reap"}),
             "not a non-empty list of strings"),
        "an unknown GPUGUARD_OPTIONS key":
            ("prestop-hook.yaml", lambda d: first_container(d)["env"][1].update({"value": "prometheus_jobs=x"}),
             "is not in docs/options.md"),
        "a Job that restarts Always":
            ("prestop-hook.yaml", lambda d: pod_template(workload(d))[0].update({"restartPolicy": "Always"}),
             "Never or OnFailure"),
        "an apiVersion that serves no such kind":
            ("daemonset.yaml", lambda d: workload(d).update({"apiVersion": "extensions/v1beta1"}),
             "not served"),
    }
    for what, (name, mutate, says) in cases.items():
        problems = broken(name, mutate)
        check(any(says in p for p in problems), "rejected: %s (%s)" % (what, says), "\n".join(problems))

finish("cluster.kubernetes")
