"""Where the worker library's own collectives put their tensors."""
from __future__ import annotations

from typing import Any


def collective_device(group: Any = None) -> str:
    """The device for a tensor reduced over ``group`` (default: all ranks): the process's current
    CUDA device under NCCL, which reduces CUDA tensors only; the CPU under any other backend."""
    import torch
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"
