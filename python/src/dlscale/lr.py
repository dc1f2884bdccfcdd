"""Learning-rate scaling with the global batch size."""
from __future__ import annotations

import math
from typing import Any

RULES = ("linear", "sqrt", "none")


def scaled_lr(base_lr: float, base_batch: int, batch: int, rule: str = "linear") -> float:
    """LR for global batch ``batch`` given that ``base_lr`` was tuned for ``base_batch``.

    ``linear``: base_lr * batch / base_batch (Goyal et al., SGD).
    ``sqrt``:   base_lr * sqrt(batch / base_batch) (Adam-style optimizers, Krizhevsky).
    ``none``:   base_lr unchanged.
    """
    if not (isinstance(base_lr, (int, float)) and math.isfinite(base_lr) and base_lr > 0):
        raise ValueError(f"base_lr must be a positive finite number, got {base_lr!r}")
    for name, value in (("base_batch", base_batch), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    ratio = batch / base_batch
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "none":
        return float(base_lr)
    raise ValueError(f"unknown LR scaling rule {rule!r}; expected one of {', '.join(RULES)}")


def set_lr(optimizer: Any, lr: float) -> None:
    """Set ``lr`` on every param group (e.g. after loading an optimizer state from a checkpoint
    written at another batch size)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
