"""PyTorch's caching-allocator figures for the scopes (python/native/module.cpp's probe).

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
