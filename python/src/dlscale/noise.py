"""The gradient noise scale, measured from what data-parallel training already computes.

What is estimated
-----------------
Let ``g_b`` be the gradient of the mean loss over ``b`` independently drawn samples, ``G = E[g_b]``
the true gradient and ``Σ`` the covariance of a *single sample's* gradient. Then

    E|g_b|² = |G|² + tr(Σ) / b.

Two gradients of the same step at batch sizes ``b_s < b_b`` (a worker's local gradient and the
all-reduced one, or one micro-batch and the whole step) give unbiased estimates of both terms
(McCandlish et al., "An Empirical Model of Large-Batch Training", 2018, appendix A; Pollux/AdaptDL
use the same):

    |G|²  ≈ (b_b |g_b|² − b_s |g_s|²) / (b_b − b_s)
    tr(Σ) ≈ (|g_s|² − |g_b|²) / (1/b_s − 1/b_b)

One step's estimates are very noisy (either can come out negative), so the estimator keeps
bias-corrected exponential moving averages of the two *separately* and divides only when asked.
The **gradient noise scale** is ``B_noise = tr(Σ) / |G|²``, in samples: the batch size at which
the gradient's noise is as large as its signal.

What is reported
----------------
``GradNoiseEstimator.report(init_batch_size)`` gives the ``grad`` field of a metrics report in the
convention of the server's ``GradNoise`` (``crates/dlscale-core/src/efficiency.rs``, Pollux's
``grad_sqr``/``grad_var``):

* ``grad_sqr`` = ``|G|²``;
* ``grad_var`` = ``tr(Σ) / B0``: the variance ``E|g_B0 − G|²`` of a gradient at the job's
  *initial* batch ``B0`` (the batch its progress is counted in: ``init_batch`` in the job's
  submission, ``min_batch`` by default), not the per-sample variance and not the current batch's.

So ``B_noise = grad_var · B0 / grad_sqr``, which is ``GradNoise::noise_scale(B0)``.

Units: ``|G|²`` and ``tr(Σ)`` are in the units of the squared gradient as it ends up in ``.grad``
(the gradient of the *mean* loss over the samples it was computed on). A constant factor on all
gradients (a loss scale; with equal micro-batches, a loss summed instead of averaged over them)
scales both alike and cancels in ``B_noise`` and in the statistical efficiency, which depends on their ratio only.

Where the two gradients come from
---------------------------------
* **Several workers** (``register_ddp_hook``): a DDP communication hook sees every gradient bucket
  before the all-reduce (this worker's local gradient, ``local_batch_size`` samples) and after it
  (the average, ``local_batch_size × world`` samples). It adds a squared norm per bucket and never
  changes the gradients; there is no extra communication per step: each worker folds its own
  local measurement into its own averages, and ``GradNoiseEstimator.sync`` (a collective, called by
  ``Job`` once per log window) averages those over the workers.
* **One worker** (``track_micro_batches``): the step must be split into ``K ≥ 2`` micro-batches
  of ``ceil(b/K)`` samples, the last possibly smaller (as ``chunk(K)`` makes them, and as
  ``Allocation.micro_batch_size`` splits an accumulated step), one ``backward()`` each with the
  loss scaled by the micro-batch's share of the step (``len(part) / len(step)``; ``1/K`` for
  equal parts): gradient accumulation of the step's mean loss. A hook on each parameter sees every micro-batch's
  gradient as it is accumulated, and at the end of each backward pass the accumulated gradient's
  norm is taken: the micro-batches are the small gradients (at their harmonic mean size, ``b/K``
  for equal parts), the whole step (``b``) the big one. So an odd batch is measured exactly too.
  No gradient is copied. A step with a single backward pass measures nothing.
* **Anything else**: call ``GradNoiseEstimator.update`` with the two squared norms (``sqr_norm``
  computes one from a list of gradients).
"""
from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from .collective import collective_device

Number = Union[int, float]

STATE_VERSION = 1


def sqr_norm(tensors: Iterable[Any]) -> Any:
    """The squared L2 norm of all ``tensors`` together (``None`` entries skipped), as a 0-d float32
    tensor on their device; no host synchronization. 0 for no tensors."""
    import torch

    parts = [torch.linalg.vector_norm(t.detach()).float() for t in tensors if t is not None]
    if not parts:
        return torch.zeros((), dtype=torch.float32)
    # A norm per tensor, then one of those: the tensors may differ in shape and dtype.
    return torch.stack(parts).square().sum()


class GradNoiseEstimator:
    """Smoothed estimates of ``|G|²`` (squared norm of the true gradient) and ``tr(Σ)`` (trace of
    the per-sample gradient covariance), hence of the gradient noise scale ``tr(Σ)/|G|²``.

    ``window_samples``: the moving averages forget with a time constant of this many samples
    (a step whose big gradient covers ``b`` samples decays the past by ``exp(-b/window_samples)``
    and weighs ``1 - exp(-b/window_samples)``; Pollux's decay of 0.999 per step at its initial
    batch ``B0`` is a window of about ``1000 · B0``, what ``Job.measure_grad_noise`` uses).
    The bias correction makes the first estimates plain averages of the steps seen so far.

    ``min_updates``: ``report`` says nothing until this many steps were measured.

    Under data parallelism each worker holds its own averages of its own measurements (each is an
    unbiased estimate); ``sync`` replaces them by their mean over the workers. The properties and
    ``report`` describe this worker's averages: call ``sync`` first (on every worker) for the job's.
    """

    def __init__(self, window_samples: float = 100_000.0, min_updates: int = 10) -> None:
        window_samples = float(window_samples)
        if not (math.isfinite(window_samples) and window_samples > 0):
            raise ValueError("window_samples must be a finite number > 0")
        if min_updates < 1:
            raise ValueError("min_updates must be >= 1")
        self.window_samples = window_samples
        self.min_updates = int(min_updates)
        self.updates = 0  # steps folded into the averages
        self.skipped = 0  # steps with a NaN/inf measurement, ignored
        self._sqr = 0.0  # biased moving sums of the per-step |G|² and tr(Σ) estimates ...
        self._var = 0.0
        self._weight = 0.0  # ... and of their weights (the bias correction)
        # Measurements given as tensors, not yet read back (read in one transfer when needed).
        self._pending: List[Tuple[Any, float, Any, float]] = []

    # -- measurements ------------------------------------------------------------------------
    def update(self, small_sqr: Any, small_batch: Number, big_sqr: Any, big_batch: Number) -> None:
        """One step's measurement: ``small_sqr`` = ``|g_s|²`` for a gradient over ``small_batch``
        samples (or the mean of such squared norms over several disjoint small gradients, e.g.
        over workers or micro-batches), ``big_sqr`` = ``|g_b|²`` for the gradient over all
        ``big_batch`` samples of the step (the small ones included). Either may be a float or a
        0-d tensor; tensors are read back lazily, so this never synchronizes a GPU. A NaN/inf
        measurement is skipped (counted in ``skipped``)."""
        bs, bb = float(small_batch), float(big_batch)
        if not (math.isfinite(bs) and math.isfinite(bb) and 0 < bs < bb):
            raise ValueError(f"need 0 < small_batch < big_batch, got {small_batch} and {big_batch}")
        if isinstance(small_sqr, (int, float)) and isinstance(big_sqr, (int, float)):
            self._apply(float(small_sqr), bs, float(big_sqr), bb)
            return
        self._pending.append((small_sqr, bs, big_sqr, bb))
        if len(self._pending) >= 1024:  # bound the memory of a job that never reads
            self._fold()

    def _apply(self, small: float, bs: float, big: float, bb: float) -> None:
        if not (math.isfinite(small) and math.isfinite(big)):
            self.skipped += 1
            return
        sqr = (bb * big - bs * small) / (bb - bs)
        var = (small - big) * bs * bb / (bb - bs)  # = (small - big) / (1/bs - 1/bb)
        theta = math.exp(-bb / self.window_samples)
        w = -math.expm1(-bb / self.window_samples)  # 1 - theta, accurately
        self._sqr = theta * self._sqr + w * sqr
        self._var = theta * self._var + w * var
        self._weight = theta * self._weight + w
        self.updates += 1

    def _fold(self) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        values = _to_floats([v for s, _, b, _ in pending for v in (s, b)])
        for i, (_, bs, _, bb) in enumerate(pending):
            self._apply(values[2 * i], bs, values[2 * i + 1], bb)

    # -- across workers --------------------------------------------------------------------------
    def sync(self, group: Any = None) -> None:
        """Average the estimator's state over the workers of ``group`` (default: all).

        A collective: with torch.distributed initialized and more than one rank, every rank must
        call it at the same point. Otherwise it does nothing. Since the averages are linear in the
        measurements, the mean of the workers' averages is the average of the workers' mean
        measurements, i.e. exactly the estimate from all workers' local gradients."""
        self._fold()
        if "torch" not in sys.modules:
            return
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        world = dist.get_world_size(group)
        if world <= 1:
            return
        t = torch.tensor(
            [self._sqr, self._var, self._weight],
            dtype=torch.float64,
            device=collective_device(group),
        )
        dist.all_reduce(t, group=group)
        self._sqr, self._var, self._weight = (v / world for v in t.tolist())

    # -- estimates ---------------------------------------------------------------------------
    def _means(self) -> Optional[Tuple[float, float]]:
        self._fold()
        if self.updates == 0 or not self._weight > 0:
            return None
        sqr, var = self._sqr / self._weight, self._var / self._weight
        if not (math.isfinite(sqr) and math.isfinite(var)):
            return None
        return sqr, var

    @property
    def grad_sqr(self) -> Optional[float]:
        """Smoothed ``|G|²``, clipped at 0; None before the first measurement."""
        m = self._means()
        return None if m is None else max(m[0], 0.0)

    @property
    def trace_cov(self) -> Optional[float]:
        """Smoothed ``tr(Σ)`` (per-sample gradient variance), clipped at 0; None before the first
        measurement."""
        m = self._means()
        return None if m is None else max(m[1], 0.0)

    @property
    def noise_scale(self) -> Optional[float]:
        """``tr(Σ) / |G|²`` in samples (``inf`` when no gradient signal was measured); None before
        the first measurement."""
        m = self._means()
        if m is None:
            return None
        sqr, var = max(m[0], 0.0), max(m[1], 0.0)
        if sqr <= 0.0:
            return math.inf if var > 0.0 else None
        return var / sqr

    def report(self, init_batch_size: int) -> Optional[Dict[str, float]]:
        """The ``grad`` field of a metrics report, in the server's ``GradNoise`` convention, or
        None (fewer than ``min_updates`` steps measured, or nothing finite to say):

        * ``grad_sqr``: ``|G|²``;
        * ``grad_var``: ``tr(Σ) / init_batch_size``, the variance of a gradient at the job's
          initial batch ``B0 = init_batch_size`` (Pollux's ``grad_var``).

        Both are clipped at 0, since the server takes no negative statistics."""
        init_batch_size = int(init_batch_size)
        if init_batch_size < 1:
            raise ValueError("init_batch_size must be >= 1")
        m = self._means()  # folds pending measurements, so ``updates`` is current
        if m is None or self.updates < self.min_updates:
            return None
        return {"grad_sqr": max(m[0], 0.0), "grad_var": max(m[1], 0.0) / init_batch_size}

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Plain numbers (loadable with ``torch.load(weights_only=True)``). This worker's averages:
        ``sync`` first to save the job's (``Job.checkpoint`` does)."""
        self._fold()
        return {"version": STATE_VERSION, "sqr": self._sqr, "var": self._var,
                "weight": self._weight, "updates": self.updates, "skipped": self.skipped}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore averages saved by ``state_dict`` (the settings stay this object's). The
        statistics do not depend on the batch size, so they carry over to any new allocation."""
        if int(state.get("version", 0)) != STATE_VERSION:
            raise ValueError(f"unknown gradient-noise state version {state.get('version')!r}")
        values = [float(state[k]) for k in ("sqr", "var", "weight")]
        if not all(math.isfinite(v) for v in values) or values[2] < 0:
            raise ValueError("gradient-noise state holds non-finite values")
        self._pending = []
        self._sqr, self._var, self._weight = values
        self.updates = int(state["updates"])
        self.skipped = int(state.get("skipped", 0))


def _to_floats(values: List[Any]) -> List[float]:
    """Python floats from numbers and 0-d tensors, reading tensors back in one transfer."""
    out: List[Optional[float]] = [float(v) if isinstance(v, (int, float)) else None for v in values]
    tensors = [v for v in values if not isinstance(v, (int, float))]
    if tensors:
        import torch

        try:
            read = torch.stack([t.detach().reshape(()).double() for t in tensors]).cpu().tolist()
        except RuntimeError:  # on different devices
            read = [float(t) for t in tensors]
        it = iter(read)
        out = [next(it) if v is None else v for v in out]
    return [float(v) for v in out]  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------
# Several workers: a DDP communication hook.


class DDPNoiseProbe:
    """Measures each step's local and all-reduced squared gradient norms in a DDP communication
    hook (made by ``register_ddp_hook``). One step's measurement goes to the estimator when the
    next step's first bucket arrives, or at ``step()``, whichever is first.

    It also times each step's compute alone: from one ``step()`` (or the ``start_timing()``
    after it) to the moment the step's last bucket is handed to the all-reduce (its backward
    pass is then done; what follows is the all-reduce that did not overlap it, and the optimizer
    step), per micro-step of ``micro_steps`` (``no_sync`` accumulation: the hook sees the last one
    only). On CUDA it times with events on the current stream (the hook runs as the GPU work is
    queued, not done); ``take_compute_time_s()`` gives the mean since it was last called."""

    def __init__(self, estimator: GradNoiseEstimator, local_batch_size: int, world_size: int,
                 hook: Optional[Callable] = None, state: Any = None, micro_steps: int = 1) -> None:
        if local_batch_size < 1 or world_size < 2:
            raise ValueError("a DDP probe needs local_batch_size >= 1 and world_size >= 2")
        if hook is None:
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            hook = allreduce_hook
        self.estimator = estimator
        self.local_batch_size = int(local_batch_size)
        self.world_size = int(world_size)
        self.inner_hook, self.inner_state = hook, state
        self._local: List[Any] = []  # norms of this step's buckets before the all-reduce ...
        self._total: List[Any] = []  # ... and after (filled in by the futures' callbacks)
        self._ended = False  # the step's last bucket was handed over
        self.micro_steps = max(1, int(micro_steps))
        self._start: Any = None  # when the current step began: perf_counter or a CUDA event
        self._handed: Any = None  # when its last bucket was handed over, alike
        self._compute_s = 0.0  # timed micro-steps' compute, summed since the last take
        self._computes = 0

    def _now(self, cuda: bool) -> Any:
        if cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _time_step(self) -> None:
        """Folds the step just closed into the compute time, and starts timing the next."""
        start, handed = self._start, self._handed
        cuda = handed is not None and not isinstance(handed, float)
        self._start, self._handed = self._now(cuda), None
        if start is None or handed is None or isinstance(start, float) == cuda:
            return  # the first step (no start), or one the hook never saw
        if cuda:
            handed.synchronize()
            seconds = start.elapsed_time(handed) / 1000.0
        else:
            seconds = handed - start
        if seconds > 0.0:
            self._compute_s += seconds / self.micro_steps
            self._computes += 1

    def start_timing(self) -> None:
        """Start timing the current step now rather than at its ``step()``: what ran in between
        (``Job.step_done``'s report, checkpoint and sync point) was no step's compute."""
        if self._start is not None:  # None: the first step, or after discard(): not timed
            self._start = self._now(not isinstance(self._start, float))

    def take_compute_time_s(self) -> Optional[float]:
        """Mean seconds of one micro-step's compute over the steps timed since the last call;
        None if none was."""
        if self._computes == 0:
            return None
        mean = self._compute_s / self._computes
        self._compute_s, self._computes = 0.0, 0
        return mean

    def step(self) -> None:
        """Close the current step (no-op if it is already closed or measured nothing)."""
        self._time_step()
        self._ended = False
        local, total = self._local, self._total
        if not local:
            return
        self._local, self._total = [], []
        if len(total) != len(local):  # a bucket's all-reduce never completed: no measurement
            return
        import torch

        b = self.local_batch_size
        self.estimator.update(torch.stack(local).square().sum(), b,
                              torch.stack(total).square().sum(), b * self.world_size)

    def discard(self) -> None:
        """Forget what the backward passes since the last ``step()`` left: passes that were no
        part of a training step (a memory probe's). Call it after each such pass: the next pass's
        first bucket would otherwise close it as a step, measured at ``local_batch_size`` and
        timed. The next step is not timed either (it began at no ``step()``)."""
        self._local, self._total = [], []  # a late callback appends to the lists dropped here
        self._ended = False
        self._start = self._handed = None

    def hook(self, _state: Any, bucket: Any) -> Any:
        import torch

        if self._ended:  # a new backward pass began: the previous step is complete
            self.step()
        buffer = bucket.buffer()
        # Before the inner hook: allreduce_hook divides the buffer in place.
        self._local.append(torch.linalg.vector_norm(buffer.detach()).float())
        if bucket.is_last():
            self._ended = True
            self._handed = self._now(buffer.is_cuda)
        fut = self.inner_hook(self.inner_state, bucket)
        total = self._total

        def measure(f: Any) -> Any:
            value = f.value()
            t = value[0] if isinstance(value, (list, tuple)) else value
            total.append(torch.linalg.vector_norm(t.detach()).float())
            return value

        return fut.then(measure)


def _ddp_hook(probe, bucket):  # no annotations: DDP checks them against its own types
    return probe.hook(None, bucket)


def register_ddp_hook(ddp_model: Any, estimator: GradNoiseEstimator, local_batch_size: int,
                      hook: Optional[Callable] = None, state: Any = None,
                      micro_steps: int = 1) -> DDPNoiseProbe:
    """Register a communication hook on ``ddp_model`` (a DistributedDataParallel with more than
    one rank) that feeds ``estimator`` every step. ``local_batch_size``: the samples in one
    worker's gradient for one step (with ``no_sync`` accumulation: all of its micro-batches).

    ``hook``/``state``: the communication hook to wrap, if the job uses its own (e.g. fp16
    compression); default: ``allreduce_hook`` (what DDP does without a hook). The gradients DDP
    receives are exactly what that hook returns. DDP takes one hook only: register this instead.

    Call the returned probe's ``step()`` after each optimizer step (``Job.step_done`` does), or
    rely on the next step's first bucket to close the step (the compute time then includes the
    wait); its ``start_timing()``, once the loop's own work after ``step()`` is done, leaves that
    work out of the next step's compute time (``Job.step_done`` calls it last). ``micro_steps``:
    the micro-batches of each step (``no_sync`` accumulation)."""
    import torch.distributed as dist

    world = dist.get_world_size(getattr(ddp_model, "process_group", None))
    probe = DDPNoiseProbe(estimator, local_batch_size, world, hook, state, micro_steps)
    ddp_model.register_comm_hook(probe, _ddp_hook)
    return probe


# ------------------------------------------------------------------------------------------------
# One worker: micro-batches of gradient accumulation.


class MicroBatchProbe:
    """Measures the micro-batches of gradient accumulation (made by ``track_micro_batches``).

    Per backward pass: the squared norm of each parameter's incoming gradient (that micro-batch's
    contribution), summed, and at the end of the pass the squared norm of the accumulated
    ``.grad``. ``step()`` turns the ``K`` passes since the last ``step()`` into one measurement.
    Micro-batch ``k`` holds ``b_k`` of the step's ``b`` samples (``ceil(b/K)``, the last possibly
    fewer) and its loss is scaled by ``b_k / b``, so its mean gradient ``g_k`` is its contribution
    times ``b / b_k``. Since ``E|g_k|² = |G|² + tr(Σ)/b_k``, the mean of the ``|g_k|²`` estimates
    ``|G|² + tr(Σ)/h`` with ``h`` the harmonic mean of the ``b_k``: the small gradients are that
    mean at batch ``h``, and the big one (``b`` samples) is the final ``.grad``."""

    def __init__(self, estimator: GradNoiseEstimator, parameters: Iterable[Any], batch_size: int) -> None:
        import torch
        from torch.autograd import Variable

        # A step of one sample cannot be split: such steps measure nothing (see step()).
        self.estimator = estimator
        self.batch_size = int(batch_size)
        self.params = [p for p in parameters if p.requires_grad]
        if not self.params:
            raise ValueError("no parameters that require gradients")
        self._engine = Variable._execution_engine
        self._torch = torch
        self._incoming: List[Any] = []
        self._passes: List[Tuple[Any, Any]] = []
        self._queued = False
        self._handles = [p.register_hook(self._on_grad) for p in self.params]

    def _on_grad(self, grad: Any) -> None:
        if grad.is_sparse:
            grad = grad.coalesce().values()
        self._incoming.append(self._torch.linalg.vector_norm(grad.detach()).float())
        if not self._queued:
            # Runs once at the end of this backward pass, when every .grad holds its sum (DDP's
            # reducer finalizes the same way).
            self._queued = True
            self._engine.queue_callback(self._pass_done)
        return None  # the gradient is not changed

    def _pass_done(self) -> None:
        self._queued = False
        incoming, self._incoming = self._incoming, []
        if not incoming:
            return
        torch = self._torch
        grads = [p.grad.detach() for p in self.params if p.grad is not None]
        if any(g.is_sparse for g in grads):
            grads = [g.coalesce().values() if g.is_sparse else g for g in grads]
        self._passes.append((torch.stack(incoming).square().sum(), sqr_norm(grads)))

    def step(self) -> None:
        """Close the step: with ``K ≥ 2`` backward passes since the last call, feed the estimator."""
        self._forget_failed_pass()
        passes, self._passes = self._passes, []
        k = len(passes)
        if k < 2:
            return
        sizes = micro_batch_sizes(self.batch_size, k)
        if sizes[-1] < 1:
            return  # not a chunk(K) split of this batch: nothing to weigh it by
        # Python floats as weights: the norms stay on the parameters' device.
        weights = [(self.batch_size / size) ** 2 / k for size in sizes]
        small = sum(inc * w for (inc, _), w in zip(passes, weights))
        harmonic = k / sum(1.0 / size for size in sizes)
        self.estimator.update(small, harmonic, passes[-1][1], self.batch_size)

    def discard(self) -> None:
        """Forget the backward passes since the last ``step()``: passes that were no part of a
        training step (a memory probe's)."""
        self._passes, self._incoming = [], []
        self._forget_failed_pass()

    def _forget_failed_pass(self) -> None:
        """A backward pass that raised (out of memory) never ran its queued end: its flag would
        keep every later pass from queueing its own, and nothing would be measured again."""
        self._queued = False
        self._incoming = []

    def remove(self) -> None:
        """Remove the parameter hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []


def micro_batch_sizes(batch_size: int, parts: int) -> List[int]:
    """The sizes of ``parts`` micro-batches of ``ceil(batch_size / parts)`` samples, the last
    taking the rest: what ``chunk`` makes of ``batch_size`` samples when it gives ``parts``
    pieces, and ``Allocation.micro_batch_size``'s split."""
    batch_size, parts = int(batch_size), int(parts)
    size = -(-batch_size // parts)
    return [min(size, batch_size - i * size) for i in range(parts)]


def track_micro_batches(parameters: Iterable[Any], estimator: GradNoiseEstimator,
                        batch_size: int) -> MicroBatchProbe:
    """Measure the gradient noise of a single worker that splits each step of ``batch_size``
    samples into ``K ≥ 2`` micro-batches of ``ceil(batch_size/K)``, the last possibly smaller
    (``chunk(K)``; one
    ``backward()`` each, the loss scaled by the part's share of the step, gradients zeroed before
    the first). Call the probe's ``step()`` once per optimizer step
    (``Job.step_done`` does). Costs one norm per parameter and backward pass; copies nothing."""
    return MicroBatchProbe(estimator, parameters, batch_size)
