"""gpuguard for Python: operation scopes and the ledger's figures (docs/python.md).

    import gpuguard

    with gpuguard.op("forward"):
        ...

    @gpuguard.op("step")
    def step(batch):
        ...

    print(gpuguard.figures())

A scope is the library's own op_scope: it goes to the same outputs as a C++ scope (the text line,
the JSONL log, the Chrome trace, Prometheus), set with GPUGUARD_OPTIONS or `gpuguard run`. The
device memory a scope and figures() count is what the process's ledger saw: under
`gpuguard run --track`, every allocation of the CUDA driver's; without it, only what goes through
gpuguard's own memory resources. When PyTorch is imported and its CUDA state is up, a scope also
records PyTorch's allocated and reserved deltas.
"""
import functools
import inspect

from gpuguard import _native, _torch

__all__ = ["op", "figures", "sites", "reset_phase_peak", "__version__"]
__version__ = _native.version

reset_phase_peak = _native.reset_phase_peak

_FIGURES = ("live_bytes", "peak_bytes", "phase_peak_bytes", "total_bytes", "allocations", "frees", "live_allocations")


def figures():
    """The ledger's counters per device, as {device: {live_bytes, peak_bytes, phase_peak_bytes,
    total_bytes, allocations, frees, live_allocations}}; host memory is device -1. Under
    `gpuguard run --track` they are the interposer's: every driver allocation of the process."""
    return {row[0]: dict(zip(_FIGURES, row[1:])) for row in _native.device_counters()}


def sites(limit=20):
    """What is live now, by allocation site, largest first: a list of dicts {site, device, tag,
    bytes, count, held, frames}. Under `gpuguard run --track` an allocation made while Python
    ran records the allocating Python lines, so `frames` begins with them, innermost first, each
    {function, file, line} (docs/python.md, "Sites"). `held` is true for what a cache keeps until
    exit on purpose (PyTorch's caching allocator, its cuBLAS workspaces: `tag` names it), false
    for the rest. The frames of the `limit` largest sites of each kind are resolved; the others'
    are empty. Sites with the same frames, device and tag are one."""
    if not isinstance(limit, int) or limit < 0:
        raise ValueError(f"gpuguard.sites(limit={limit!r}): limit must be a non-negative int")
    keys = ("function", "file", "line")
    found = [{"site": site, "device": device, "tag": tag, "bytes": size, "count": count, "held": held,
              "frames": [dict(zip(keys, frame)) for frame in frames]}
             for site, device, tag, size, count, held, frames in _native._live_sites(limit)]
    return sorted(found, key=lambda one: one["bytes"], reverse=True)


_native._set_torch_readers(_torch.ready, _torch.memory)


class op(_native.op):
    """A named operation: `with gpuguard.op("forward"):` or `@gpuguard.op("step")`.

    Each entry is a scope of its own, so one object may be entered again inside itself, and from
    several threads; a scope ends on the thread that entered it, innermost first. A scope left by
    an exception is recorded with `exception: true` and the exception goes on. `result` is the dict
    of the scope that ended last (the JSONL op line's fields: name, duration_ns, alloc_bytes,
    free_bytes, net_bytes, peak_bytes, allocs, frees, depth, thread, exception, and framework,
    framework_allocated_delta, framework_reserved_delta when PyTorch's figures were read).
    """

    __slots__ = ()

    def __call__(self, function):
        """Decorates `function`: each call runs inside this operation's scope."""
        if inspect.iscoroutinefunction(function) or inspect.isgeneratorfunction(function) or \
                inspect.isasyncgenfunction(function):
            raise TypeError(f"gpuguard.op({self.name!r}) cannot decorate {function.__qualname__}: "
                            "it returns before its body runs; use `with gpuguard.op(...)` inside it")

        @functools.wraps(function)
        def scoped(*args, **kwargs):
            with self:
                return function(*args, **kwargs)

        return scoped

    def __repr__(self):
        return f"gpuguard.op({self.name!r})"
