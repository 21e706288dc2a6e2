#!/usr/bin/env python3
"""Python lines as allocation sites (docs/python.md, "Sites"): sites_job.py, a program that knows
nothing of gpuguard, run under `gpuguard run --track` on the stand-in CUDA runtime and driver
(tests/preload/), as a user would start it.

By default (python_frames=user) the leak report, as text and as JSON (--report's file,
leak_json), the JSONL log (its alloc events' site ids and its sites line) and the HTML report
(`gpuguard report`) name the marked Python line and function of the allocation made with the GIL
held, and, where gpuguard reads frames without the GIL (RAW_VERSIONS), of the ones made by native
code that released it (a ctypes.CDLL call; at the bottom of a deep recursion, in a generator, in a
coroutine); the one made on a native thread Python never ran on has no frames; the one made inside
a stand-in torch module begins at the user's line that called into it. With python_frames=all it
begins inside that module; with python_frames=off no site has Python frames. With --module DIR
(where the build put gpuguard._native), gpuguard.sites() names the same lines.

usage: sites_test.py GPUGUARD PRELOAD --fake-driver DIR --fake-cudart LIBRARY --hooks LIBRARY [--module DIR]
"""
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from harness import check, check_schema, finish, line_of, scratch  # noqa: E402  (tests/support)

CLI, PRELOAD = sys.argv[1], sys.argv[2]
FAKE_DRIVER = sys.argv[sys.argv.index("--fake-driver") + 1]
FAKE_CUDART = sys.argv[sys.argv.index("--fake-cudart") + 1]
HOOKS = sys.argv[sys.argv.index("--hooks") + 1]
MODULE = sys.argv[sys.argv.index("--module") + 1] if "--module" in sys.argv else None
# The Python versions whose frames gpuguard reads without the GIL (src/ledger/python_raw.cpp).
RAW = sys.version_info[:2] in {(3, 11), (3, 12)}
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
JOB = os.path.join(HERE, "sites_job.py")
MIB = 1024 * 1024
GIL_LINE, NOGIL_LINE = line_of(JOB, "# site: gil"), line_of(JOB, "# site: nogil")
TORCH_CALLER = line_of(JOB, "# site: torch caller")
RECURSION, RECURSION_STEP = line_of(JOB, "# site: recursion"), line_of(JOB, "# site: recursion step")
GENERATOR, GENERATOR_CALLER = line_of(JOB, "# site: generator"), line_of(JOB, "# site: generator caller")
COROUTINE, COROUTINE_CALLER = line_of(JOB, "# site: coroutine"), line_of(JOB, "# site: coroutine caller")
ALLOCATE_LINE = line_of(JOB, "status = lib.cudaMalloc(ctypes.byref(pointer), size)")
STAND_IN_LINE = 7  # sites_job.py's STAND_IN_LINE
STAND_IN_FILE = "/opt/venv/lib/python3/site-packages/torch/_stand_in.py"  # sites_job.py's
SIZES = [19, 17, 13, 11, 7, 5, 3]  # MiB, every allocation the job leaves
tmp = scratch("gpuguard-sites-")


def load(name):
    with open(os.path.join(SOURCE, "docs", "schemas", name)) as f:
        return json.load(f)


LEAKS_SCHEMA, EVENTS_SCHEMA = load("leaks-v1.schema.json"), load("events-v1.schema.json")


def tracked(name, options="", api=False, pythonpath=None):
    """Runs sites_job.py under `gpuguard run --track`, with native stacks off unless `options` turn
    them on (the checks below look at the Python part of each site); returns (result, leak JSON,
    JSONL lines)."""
    leaks, log = os.path.join(tmp, name + ".leaks.json"), os.path.join(tmp, name + ".jsonl")
    env = dict(os.environ, GPUGUARD_PRELOAD_LIBRARY=PRELOAD,
               GPUGUARD_OPTIONS=f"text_log=off:stacks=off:jsonl_log={log}:leak_json={leaks}" + (":" + options if options else ""),
               LD_LIBRARY_PATH=FAKE_DRIVER + (os.pathsep + os.environ["LD_LIBRARY_PATH"]
                                              if os.environ.get("LD_LIBRARY_PATH") else ""))
    for variable in ("LD_PRELOAD", "GPUGUARD_RUN_OPTIONS", "PYTHONPATH"):
        env.pop(variable, None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [CLI, "run", "--track", "--", sys.executable, JOB, FAKE_CUDART, "--native-thread", HOOKS]
    result = subprocess.run(argv + (["--api"] if api else []), env=env, capture_output=True, text=True, timeout=120)
    check(result.returncode == 0, f"{name}: the job ran under gpuguard run --track", result.stderr[-3000:])
    report, events = {}, []
    try:
        with open(leaks) as f:
            report = json.load(f)
        with open(log) as f:
            events = [json.loads(line) for line in f]
    except (OSError, ValueError) as error:
        check(False, f"{name}: the leak report and the JSONL log are written", error)
    return result, report, events


def site_of(report, size):
    found = [s for s in report.get("sites", []) if s["bytes"] == size]
    return found[0] if len(found) == 1 else {}


def frame(function, file, line):
    return {"address": "0x0", "function": function, "file": file, "line": line}


# ---- the default: python_frames=user -------------------------------------------------------------
result, report, events = tracked("user")
text = result.stderr
check(f"#0 make_leak at {JOB}:{GIL_LINE}" in text and f"#1 <module> at {JOB}:" in text,
      "the text leak report names the Python line and function that allocated, then its caller", text[-3000:])
check(f"#0 make_through_torch at {JOB}:{TORCH_CALLER}" in text and "_stand_in.py" not in text,
      "a site begins at the user's line, torch's own frames passed over", text[-3000:])
check(check_schema(report, LEAKS_SCHEMA, "the JSON leak report (leak_json)"), "the JSON leak report is valid")
gil, nogil, torch_site = site_of(report, 3 * MIB), site_of(report, 5 * MIB), site_of(report, 7 * MIB)
check(gil.get("frames", [None])[0] == frame("make_leak", JOB, GIL_LINE) and len(gil.get("frames", [])) == 2
      and gil["frames"][1]["function"] == "<module>", "the JSON leak report: the GIL holder's site, its two frames", gil)
if RAW:
    check(nogil.get("frames", [None])[0] == frame("make_released", JOB, NOGIL_LINE) and len(nogil["frames"]) == 2,
          "an allocation by code that released the GIL (ctypes.CDLL) names its line and its caller", nogil)
    deep = site_of(report, 11 * MIB).get("frames", [])
    check(deep[:2] == [frame("allocate", JOB, ALLOCATE_LINE), frame("recurse", JOB, RECURSION)] and len(deep) == 8
          and all(f == frame("recurse", JOB, RECURSION_STEP) for f in deep[2:]),
          "300 calls deep: the innermost 8 frames, the recursion's own lines", deep)
    made = site_of(report, 13 * MIB).get("frames", [])
    check(made[1:3] == [frame("producer", JOB, GENERATOR), frame("make_from_generator", JOB, GENERATOR_CALLER)],
          "in a generator: its line, then the line that runs it", made)
    awaited = site_of(report, 17 * MIB).get("frames", [])
    check(awaited[1:3] == [frame("coroutine", JOB, COROUTINE), frame("make_from_coroutine", JOB, COROUTINE_CALLER)],
          "in a coroutine: its line, then the line that sends to it", awaited)
else:
    check(nogil.get("frames") == [] and nogil.get("site") == 0,
          "an allocation by code that released the GIL has no Python frames on this Python", nogil)
native = site_of(report, 19 * MIB)
check(native.get("frames") == [] and native.get("site") == 0,
      "an allocation on a native thread Python never ran on has no Python frames", native)
check(torch_site.get("frames", [None])[0] == frame("make_through_torch", JOB, TORCH_CALLER),
      "the JSON leak report: the site inside torch's package begins at the user's caller", torch_site)

for event in events:
    check_schema(event, EVENTS_SCHEMA, f"JSONL {event.get('type')} line")
allocs = {e["bytes"]: e for e in events if e.get("type") == "alloc"}
check(allocs.get(3 * MIB, {}).get("site") == gil.get("site") != 0 and allocs.get(19 * MIB, {}).get("site") == 0
      and allocs.get(5 * MIB, {}).get("site") == nogil.get("site"),
      "the JSONL alloc events carry the site ids the leak report names", allocs)
sites_lines = [e for e in events if e.get("type") == "sites"]
listed = {s["site"]: s for s in (sites_lines[0]["sites"] if sites_lines else [])}
check(len(sites_lines) == 1 and listed.get(gil.get("site"), {}).get("frames", [None])[0] == frame("make_leak", JOB, GIL_LINE),
      "the JSONL sites line (stacks off) lists the Python site with its frames", sites_lines)
leaks_lines = [e for e in events if e.get("type") == "leaks"]
check(len(leaks_lines) == 1 and any(s["frames"][:1] == [frame("make_leak", JOB, GIL_LINE)] for s in leaks_lines[0]["sites"]),
      "the JSONL leaks line names the Python line", leaks_lines)

html = os.path.join(tmp, "report.html")
made = subprocess.run([CLI, "report", os.path.join(tmp, "user.jsonl"), "-o", html], capture_output=True, text=True, timeout=120)
page = open(html).read() if made.returncode == 0 and os.path.exists(html) else ""
check("make_leak" in page and "sites_job.py" in page and "make_through_torch" in page,
      "the HTML report (gpuguard report) shows the Python sites", made.stderr[-2000:])

# ---- with native stacks (the default outside this test): the Python frames, then the native ones --
result, report, events = tracked("stacks", "stacks=all")
frames = site_of(report, 3 * MIB).get("frames", [])
check(frames[:1] == [frame("make_leak", JOB, GIL_LINE)] and len(frames) > 1 and frames[1]["function"] == "<module>",
      "stacks=all: the site begins with its Python frames", frames)
check(any(f["function"].startswith("cuMemAlloc") and f["address"] != "0x0" for f in frames[2:]),
      "stacks=all: the native frames follow, the driver call among them", frames)

# ---- python_frames=all: frames in torch's package are kept ---------------------------------------
result, report, events = tracked("all", "python_frames=all")
inside = site_of(report, 7 * MIB).get("frames", [])
check(inside[:2] == [frame("grow", STAND_IN_FILE, STAND_IN_LINE), frame("make_through_torch", JOB, TORCH_CALLER)],
      "python_frames=all: the site begins inside the torch module, then the user's caller", inside)
check(site_of(report, 3 * MIB).get("frames", [None])[0] == frame("make_leak", JOB, GIL_LINE),
      "python_frames=all: the plain site is the same line", site_of(report, 3 * MIB))

# ---- python_frames=off ---------------------------------------------------------------------------
result, report, events = tracked("off", "python_frames=off")
check(report.get("total_count") == len(SIZES) and all(s["frames"] == [] for s in report.get("sites", [])),
      f"python_frames=off: {len(SIZES)} leaks, no site has frames", report.get("sites"))
check(not any(e.get("type") == "sites" for e in events) and "make_leak" not in result.stderr,
      "python_frames=off: no sites line in the log, no Python line in the text", result.stderr[-2000:])

# ---- gpuguard.sites(), with the module this build made -------------------------------------------
if MODULE:
    package = os.path.join(tmp, "package", "gpuguard")
    os.makedirs(package)
    for path in glob.glob(os.path.join(SOURCE, "python", "gpuguard", "*.py")) + glob.glob(os.path.join(MODULE, "_native*.so")):
        os.symlink(path, os.path.join(package, os.path.basename(path)))
    result, report, events = tracked("api", api=True, pythonpath=os.path.dirname(package))
    lines = [line for line in result.stdout.splitlines() if line.startswith("[")]
    found = json.loads(lines[-1]) if lines else []
    by_size = {s["bytes"]: s for s in found}
    check(by_size.get(3 * MIB, {}).get("frames", [None])[0] == {"function": "make_leak", "file": JOB, "line": GIL_LINE}
          and by_size[3 * MIB]["held"] is False and by_size[3 * MIB]["site"] == site_of(report, 3 * MIB).get("site"),
          "gpuguard.sites(): the live site with its Python line, the leak report's site id", found)
    check(by_size.get(19 * MIB, {}).get("frames") == [] and [s["bytes"] for s in found] == [size * MIB for size in SIZES],
          "gpuguard.sites(): the native thread's site without frames, largest first", found)

finish("python.sites")
