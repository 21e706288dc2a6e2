"""PyTorch's caching-allocator figures for the scopes (python/native/module.cpp's probe) and the
pytest plugin (pytest_plugin.py).

Read only from a `torch` the program imported: gpuguard never imports it.
"""
import sys


def ready():
    """True when PyTorch is imported and its CUDA state is initialized."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.cuda.is_initialized()


def memory(device):
    """(allocated, reserved) bytes of PyTorch's allocator on `device`, or None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    stats = torch.cuda.memory_stats_as_nested_dict(device)
    return stats["allocated_bytes"]["all"]["current"], stats["reserved_bytes"]["all"]["current"]


def settled_allocated():
    """{device: bytes in tensors} of each device PyTorch holds memory on, after waiting for its
    work there and returning its cache's free blocks to the driver (empty_cache), so that the
    driver-level ledger keeps only blocks that hold tensors; {} before its CUDA state is up."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    used = [d for d in range(torch.cuda.device_count()) if torch.cuda.memory_reserved(d) > 0]
    for device in used:  # a device without memory of PyTorch's may have no context: none is made
        torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return {d: torch.cuda.memory_allocated(d) for d in used}
