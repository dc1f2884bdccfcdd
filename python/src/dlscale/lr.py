"""Learning-rate scaling with the global batch size."""
from __future__ import annotations

import math
from typing import Any, List

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


# The learning rates a param group may hold: its own, and what schedulers keep beside it
# (``initial_lr`` of every scheduler, OneCycleLR's ``max_lr``/``min_lr``).
_GROUP_LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")


def rescale_lr(optimizer: Any, factor: float, scheduler: Any = None) -> None:
    """Multiply every learning rate ``optimizer`` and ``scheduler`` hold by ``factor``: each param
    group's (with its schedulers' base LRs, ``initial_lr``, ``max_lr``, ``min_lr``) and the
    scheduler's ``base_lrs``, last LRs, ``max_lrs`` and ``eta_min`` (those of the schedulers a
    SequentialLR or ChainedScheduler runs too), so that the schedule goes on, scaled."""
    for group in optimizer.param_groups:
        for key in _GROUP_LR_KEYS:
            value = group.get(key)
            if value is None:
                continue
            if hasattr(value, "mul_"):  # a tensor LR (capturable optimizers)
                value.mul_(factor)
            else:
                group[key] = value * factor
    for each in _schedulers_in(scheduler):
        for name in _SCHEDULER_LR_KEYS:
            values = getattr(each, name, None)
            if isinstance(values, list):
                setattr(each, name, [v * factor for v in values])
        floor = getattr(each, "eta_min", None)
        if isinstance(floor, (int, float)) and not isinstance(floor, bool):
            # The cosines' floor: unscaled, the schedule would end at base_batch's floor.
            each.eta_min = floor * factor


# The learning rates a scheduler keeps: its base and last LRs, CyclicLR's peaks (and, one
# number, the cosine schedulers' floor ``eta_min``).
_SCHEDULER_LR_KEYS = ("base_lrs", "_last_lr", "max_lrs")


def _schedulers_in(scheduler: Any) -> List[Any]:
    """``scheduler`` and those it runs (SequentialLR's, ChainedScheduler's: a SequentialLR
    restarts each at its milestone from that one's own base LRs; the one an accelerate
    ``AcceleratedScheduler`` wraps, whose ``base_lrs`` it does not show), each once."""
    found: List[Any] = []
    pending = [scheduler] if scheduler is not None else []
    while pending:
        each = pending.pop()
        if any(each is seen for seen in found):
            continue
        found.append(each)
        pending.extend(getattr(each, "_schedulers", None) or [])
        inner = getattr(each, "scheduler", None)
        if inner is not None and hasattr(inner, "base_lrs"):
            pending.append(inner)
    return found


class LrScaling:
    """Keeps an optimizer's learning rates scaled for the job's global batch: built with the LRs
    tuned for ``base_batch``, it multiplies them (and a scheduler's) by ``rule``'s factor whenever
    the batch they are scaled for changes (``scale_to``)."""

    def __init__(self, optimizer: Any, base_batch: int, rule: str = "linear", scheduler: Any = None) -> None:
        scaled_lr(1.0, base_batch, base_batch, rule)  # checks base_batch and rule
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.rule = rule
        self.base_batch = base_batch
        self.batch = base_batch  # the batch the optimizer's LRs are scaled for now

    def describe(self) -> str:
        """What the LRs are scaled by now, for the job's log."""
        factor = scaled_lr(1.0, self.base_batch, self.batch, self.rule)
        return f"lr batch_size={self.batch} factor={factor:.6g} rule={self.rule} base_batch={self.base_batch}"

    def scale_to(self, batch: int) -> None:
        """Rescale from the batch the LRs are scaled for to ``batch``."""
        if batch != self.batch:
            rescale_lr(self.optimizer, scaled_lr(1.0, self.batch, batch, self.rule), self.scheduler)
            self.batch = batch
