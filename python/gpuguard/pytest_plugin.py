"""pytest --gpuguard: tests fail on the device memory they leak or peak at (docs/python.md, "pytest").

    @pytest.mark.gpu_limit_memory("2 GiB")   # the test's peak on each device, above its start
    @pytest.mark.gpu_limit_leaks("0 B")      # device memory the test body left live
    def test_forward():
        ...

Registered through the wheel's `pytest11` entry point, so an installed gpuguard adds the option and
the markers to every pytest of its environment; without --gpuguard the markers change nothing.

The figures are the ledger's (gpuguard/core/test_window.hpp, the GoogleTest listener's rules):
what was live at the body's start never counts, and allocations under an exit holder's tag
(PyTorch's caching allocator) are never leaked. Every CUDA driver allocation reaches the ledger
only through the interposer (libgpuguard_preload.so), so a pytest started without it is started
again, by exec, with it preloaded: same argv, same process id, pytest's own exit status.
"""
import gc
import os
import re
import sys

import pytest

_OPTION = "--gpuguard"
_MARKERS = ("gpu_limit_memory", "gpu_limit_leaks")
_REEXEC = "GPUGUARD_PYTEST_REEXEC"  # set in the environment of the pytest started again
_PRELOAD = "libgpuguard_preload.so"
_RESULT = pytest.StashKey()  # an item's failure lines, set by the call's wrapper
_UNCHECKED = pytest.StashKey()  # the config's count of marked tests left unchecked

# ---- sizes ---------------------------------------------------------------------------------------

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*")


def parse_size(value):
    """Bytes from "2 GiB", "24 MB", "512 KiB", "0 B" or an int (bytes). KB, MB, GB, TB are powers
    of 1000; KiB, MiB, GiB, TiB of 1024; the unit's case does not matter. Raises ValueError naming
    `value` when it is none of these."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"bad size {value!r}: expected bytes as an int or a string such as '2 GiB' or '24 MB'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"bad size {value!r}: a size cannot be negative")
        return value
    match = _SIZE.fullmatch(value)
    unit = match and (match.group(2).lower() or "b")
    if not match or unit not in _UNITS:
        raise ValueError(f"bad size {value!r}: expected a number and a unit, such as '2 GiB', '24 MB', "
                         "'512 KiB' or '0 B' (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    return int(float(match.group(1)) * _UNITS[unit] + 0.5)


def format_size(size):
    """Bytes as the library writes them ("3.0 MiB"), with the exact count beside larger ones."""
    if size < 1024:
        return f"{size} B"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit} ({size} bytes)"
    return f"{size} B"  # unreachable


# ---- the interposer: the process is started again with it preloaded ------------------------------

def _interposer_loaded():
    with open("/proc/self/maps") as maps:
        return any(line.rstrip().endswith("/" + _PRELOAD) for line in maps)


def _find_interposer():
    """The wheel's interposer (the environment's lib/), or GPUGUARD_PRELOAD_LIBRARY's, or None;
    with the places looked in."""
    named = os.environ.get("GPUGUARD_PRELOAD_LIBRARY")
    if named:
        return (named if os.access(named, os.R_OK) else None), "GPUGUARD_PRELOAD_LIBRARY=" + named
    import importlib.metadata
    try:
        for file in importlib.metadata.distribution("gpuguard").files or []:
            if file.name == _PRELOAD:
                path = os.path.realpath(str(file.locate()))
                return (path if os.access(path, os.R_OK) else None), path
    except importlib.metadata.PackageNotFoundError:
        pass
    return None, "the gpuguard distribution's files (no installed gpuguard lists it)"


def _command_line():
    """This interpreter's command line, as started (sys.orig_argv from Python 3.10)."""
    return list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)


def _start_again_with_interposer(config):
    if os.environ.get(_REEXEC):
        raise pytest.UsageError(
            f"gpuguard: pytest was started again with {os.environ.get('LD_PRELOAD', '')!r} in LD_PRELOAD, but the "
            f"interposer ({_PRELOAD}) is not in the process (the dynamic loader ignored it: see the line it printed "
            "above); run pytest under `gpuguard run --track -- ...` instead")
    if list(config.invocation_params.args) != sys.argv[1:]:
        # pytest.main() inside another program: that program is not ours to replace.
        raise pytest.UsageError(
            "gpuguard: --gpuguard needs the interposer in the process, and this pytest runs inside another "
            "program (pytest.main), which gpuguard does not restart: run that program under "
            "`gpuguard run --track -- ...`")
    interposer, looked = _find_interposer()
    if interposer is None:
        raise pytest.UsageError(f"gpuguard: --gpuguard: {_PRELOAD} not found; looked in: {looked} "
                                "(install the gpuguard wheel, or set GPUGUARD_PRELOAD_LIBRARY=PATH)")
    env = dict(os.environ)
    env["LD_PRELOAD"] = interposer + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env[_REEXEC] = "1"  # the failures name the sites: stacks=all is the library's default
    sys.stderr.write(f"gpuguard: starting pytest again with {interposer} preloaded, so that every CUDA "
                     "driver allocation is tracked\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os.execve(sys.executable, _command_line(), env)


# ---- pytest's hooks ------------------------------------------------------------------------------

def pytest_addoption(parser):
    group = parser.getgroup("gpuguard", "GPU memory limits (gpuguard)")
    group.addoption(_OPTION, action="store_true", default=False,
                    help="check the gpu_limit_memory and gpu_limit_leaks markers (pytest is started again "
                         "with gpuguard's interposer preloaded when it is not)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu_limit_memory(size, device=None): with --gpuguard, fail when the test body's device "
                   "memory peak rises more than SIZE ('2 GiB', '24 MB', bytes) above what was live at its "
                   "start, on any device (or on DEVICE)")
    config.addinivalue_line(
        "markers", "gpu_limit_leaks(size): with --gpuguard, fail when the test body leaves more than SIZE of "
                   "device memory live (a framework's cache apart)")
    config.stash[_UNCHECKED] = 0


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # The earliest point where the options are known, before conftest.py files are imported (they
    # may import torch and start CUDA), and, as the outermost wrapper, before pytest captures the
    # output: the started pytest writes to the terminal, not to a capture file.
    if early_config.known_args_namespace.gpuguard and not _interposer_loaded():
        _start_again_with_interposer(early_config)
    yield


def pytest_report_header(config):
    if config.getoption("gpuguard"):
        return f"gpuguard: device memory from the CUDA driver, tracked by {_PRELOAD}"
    return None


def _limits(item):
    """The item's limits: {"memory": (bytes, device or None, text), "leaks": (bytes, text)}."""
    limits = {}
    for name in _MARKERS:
        marker = item.get_closest_marker(name)
        if marker is None:
            continue
        call = f"{name}({', '.join([repr(a) for a in marker.args] + [f'{k}={v!r}' for k, v in marker.kwargs.items()])})"
        allowed = {"size", "device"} if name == "gpu_limit_memory" else {"size"}
        extra = set(marker.kwargs) - allowed
        args = list(marker.args) + ([marker.kwargs["size"]] if "size" in marker.kwargs else [])
        if extra or len(args) != 1:
            raise pytest.UsageError(f"{item.nodeid}: {call}: expected one size"
                                    + (" and an optional device=N" if name == "gpu_limit_memory" else ""))
        try:
            size = parse_size(args[0])
        except ValueError as error:
            raise pytest.UsageError(f"{item.nodeid}: {call}: {error}") from None
        device = marker.kwargs.get("device")
        if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
            raise pytest.UsageError(f"{item.nodeid}: {call}: device must be a device number (0, 1, ...)")
        limits["memory" if name == "gpu_limit_memory" else "leaks"] = (size, device, call)
    return limits


def pytest_collection_modifyitems(session, config, items):
    marked = [item for item in items if any(item.get_closest_marker(n) for n in _MARKERS)]
    if config.getoption("gpuguard"):
        for item in marked:
            _limits(item)  # a bad marker stops the run before any test, naming the test
    else:
        config.stash[_UNCHECKED] = len(marked)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    unchecked = config.stash.get(_UNCHECKED, 0)
    if unchecked:
        terminalreporter.write_line(f"gpuguard: {unchecked} test(s) carry gpu_limit_memory or gpu_limit_leaks "
                                    "markers, not checked: run pytest with --gpuguard")


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    # The test body alone, as pytest-memray measures: fixtures' setup and teardown are outside.
    if not pyfuncitem.config.getoption("gpuguard"):
        yield
        return
    limits = _limits(pyfuncitem)
    if not limits:
        yield
        return
    from gpuguard import _native, _torch
    torch_start = _torch.settled_allocated()
    window = _native._test_window()
    window.start()
    outcome = yield
    if outcome.excinfo is not None:
        return
    gc.collect()  # tensors in reference cycles are freed now, not at some later test
    torch_end = _torch.settled_allocated()
    pyfuncitem.stash[_RESULT] = _judge(limits, window.end(), torch_start, torch_end)


def _judge(limits, figures, torch_start, torch_end):
    """The failure text of a test's figures under its limits; "" when within them."""
    failures = []
    if "memory" in limits:
        size, only, call = limits["memory"]
        for device, at_start, peak, rise in figures["devices"]:
            if (only is None or device == only) and rise > size:
                failures.append(
                    f"gpuguard: the test's device memory peak on device {device} rose {format_size(rise)} above the "
                    f"{format_size(at_start)} live at its start (peak {format_size(peak)}), over the limit of "
                    f"{format_size(size)} ({call}). The ledger keeps no record of what was live at the peak: "
                    "gpuguard.op scopes around the test's steps show which one reached it.")
    if "leaks" in limits:
        size, _, call = limits["leaks"]
        tensors = {d: torch_end[d] - torch_start.get(d, 0) for d in torch_end if torch_end[d] > torch_start.get(d, 0)}
        left = figures["leaked_bytes"] + sum(tensors.values())
        if left > size:
            text = [f"gpuguard: the test left {format_size(left)} of device memory live, over the limit of "
                    f"{format_size(size)} ({call})"]
            if figures["leaked_count"]:
                text.append(figures["leak_text"].rstrip("\n"))
            for device, grew in sorted(tensors.items()):
                text.append(f"PyTorch: its tensors hold {format_size(grew)} more on device {device} than at the "
                            "test's start (torch.cuda.memory_allocated, after synchronize and empty_cache)")
            if tensors and figures["held_count"]:
                text.append("in memory that PyTorch's cache took from the driver during the test and still holds:")
                text.append(figures["held_text"].rstrip("\n"))
            failures.append("\n".join(text))
    return "\n\n".join(failures)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call":
        return
    report = outcome.get_result()
    failure = item.stash.get(_RESULT, "")
    if report.passed and failure:
        report.outcome = "failed"
        report.longrepr = failure
