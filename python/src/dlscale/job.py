"""``Job``: the pieces wired together for a training loop.

    job = dlscale.init()                      # env -> Allocation, SIGTERM handler, reporter
    job.resume(model, optimizer, lr=lr)       # latest checkpoint, if any (all ranks)
    job.measure_grad_noise(ddp_model, init_batch_size=B0)  # optional: noise scale in reports
    while job.step < total_steps:
        idx = sampler.local_indices(job.samples_seen, job.local_batch_size, job.rank)
        ... one optimizer step on idx ...
        job.step_done(loss=loss.item())       # step += 1, samples_seen += batch, log, report
        if job.should_stop():                 # SIGTERM seen by any rank (collective)
            job.stop()                        # checkpoint, log, exit(EXIT_STOPPED)
        if job.rebatched():                   # batch_in_place jobs: the server's new batch
            set_lr(optimizer, scaled_lr(base_lr, base_batch, job.batch_size))
    job.finish()                              # final checkpoint, "dlscale: done step=N"
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, NoReturn, Optional, Tuple

from .checkpoint import (
    FORMAT_VERSION,
    capture_rng_state,
    load_latest_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from .collective import collective_device
from .env import Allocation, EnvError
from .lr import set_lr
from .metrics import MetricsReporter, metrics_payload
from .noise import GradNoiseEstimator, register_ddp_hook, track_micro_batches
from .stop import EXIT_BAD_ENV, StopFlag, arm_exit_watchdog, install_stop_handler, stop_exit_code


def _unwrap(model: Any) -> Any:
    # DistributedDataParallel / DataParallel keep the real module in .module
    inner = getattr(model, "module", None)
    if inner is not None and type(model).__name__ in ("DistributedDataParallel", "DataParallel"):
        return inner
    return model


def _dist():
    """torch.distributed if it is initialized with more than one rank, else None."""
    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _float_env(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise EnvError(f"{name}={raw!r} must be a finite number >= 0")
    return value


class Job:
    def __init__(
        self,
        alloc: Optional[Allocation] = None,
        *,
        log_every: int = 10,
        checkpoint_every: int = 0,
        keep_checkpoints: int = 2,
        report_interval: Optional[float] = None,
        install_signals: bool = True,
        environ: Optional[Mapping[str, str]] = None,
        default_local_batch_size: int = 32,
    ) -> None:
        env = os.environ if environ is None else environ
        self.alloc = alloc or Allocation.from_env(env, default_local_batch_size=default_local_batch_size)
        if log_every < 1:
            raise ValueError("log_every must be >= 1")
        self.log_every = log_every
        self.checkpoint_every = max(0, checkpoint_every)
        self.keep_checkpoints = keep_checkpoints
        self.stop_code = stop_exit_code(env)
        # Armed by stop(): ends the process with its stop code if its exit hangs.
        self.exit_watchdog: Optional[threading.Timer] = None
        if report_interval is None:
            report_interval = _float_env(env, "DLSCALE_METRICS_INTERVAL", 5.0)
        self.stop_flag = install_stop_handler() if install_signals else StopFlag()
        a = self.alloc
        self.reporter = MetricsReporter(
            a.api if a.is_chief else None, a.job_id, a.token, interval=report_interval
        )
        self.step = 0
        self.samples_seen = 0
        self.extra: Dict[str, Any] = {}  # saved in / restored from checkpoints
        self.resumed_from: Optional[str] = None
        self.last_loss: Optional[float] = None
        self._model: Any = None
        self._optimizer: Any = None
        self._warned_no_ckpt = False
        self._last_ckpt_step: Optional[int] = None
        # Gradient noise scale (dlscale.noise): measured once measure_grad_noise() is called.
        self.grad_noise = GradNoiseEstimator()
        self._grad_probe: Any = None
        self._grad_measuring = False
        self._grad_init_batch = 0  # B0 of the reports, set by measure_grad_noise()
        self._grad_updates_seen = 0  # grad_noise.updates at the end of the last log window
        self._warned_no_grad = False
        self._rebatch_checked_step: Optional[int] = None
        self._reset_window()

    # -- allocation shortcuts ------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self.alloc.rank

    @property
    def world_size(self) -> int:
        return self.alloc.world_size

    @property
    def batch_size(self) -> int:
        return self.alloc.batch_size

    @property
    def local_batch_size(self) -> int:
        return self.alloc.local_batch_size

    @property
    def is_chief(self) -> bool:
        return self.alloc.is_chief

    def log(self, line: str) -> None:
        """Print a ``dlscale:`` line on rank 0 only."""
        if self.is_chief:
            print(f"dlscale: {line}", flush=True)

    # -- gradient noise ------------------------------------------------------------------------
    def measure_grad_noise(
        self,
        model: Any = None,
        *,
        init_batch_size: int,
        window_samples: Optional[float] = None,
        comm_hook: Any = None,
        comm_hook_state: Any = None,
    ) -> GradNoiseEstimator:
        """Measure the gradient noise scale and report it with the metrics (``grad``). Call it on
        every rank, after wrapping the model in DDP.

        * ``model`` a DistributedDataParallel over more than one rank: a communication hook
          compares each worker's local gradient with the all-reduced one (wrapping
          ``comm_hook``/``comm_hook_state`` if given, else plain all-reduce; the gradients are
          unchanged). The hook also times each step's compute alone (until its last bucket is
          handed to the all-reduce), reported as ``compute_time_s`` per micro-step of
          ``DLSCALE_ACCUM_STEPS``: the server's learned models then tell compute from
          synchronisation.
        * any other ``model`` (one worker): each step must be split into ``K >= 2``
          micro-batches of ``ceil(b/K)`` samples, the last possibly smaller (``chunk(K)``), one ``backward()`` each with
          the loss scaled by the part's share of the step (``1/K`` for equal parts); they are
          compared with the whole step.
        * ``None``: feed ``job.grad_noise.update(...)`` yourself, on every rank.

        ``init_batch_size``: the job's initial batch ``B0``, in which the server counts progress
        (its submission's ``batch_size``, else ``min_batch``; with an analytic ``model`` that
        gives a ``noise_scale``, that model's ``init_batch``, by default ``min_batch``); the reported ``grad_var`` is the
        gradient variance at that batch. It stays the same across relaunches at other batches.

        ``step_done()`` closes each step's measurement; every log window the ranks average their
        estimates (a collective) and rank 0 reports them. ``window_samples``: the smoothing
        time constant, in samples (see ``GradNoiseEstimator``); default ``1000 · B0``, Pollux's
        smoothing of 0.999 per step at ``B0``. The averages are saved in checkpoints and restored
        by ``resume``, before or after this call."""
        if self._grad_measuring:
            raise RuntimeError("measure_grad_noise() was already called")
        if int(init_batch_size) < 1:
            raise ValueError("init_batch_size must be >= 1")
        self._grad_init_batch = int(init_batch_size)
        if window_samples is None:
            window_samples = 1000.0 * self._grad_init_batch
        fresh = GradNoiseEstimator(window_samples, self.grad_noise.min_updates)
        fresh.load_state_dict(self.grad_noise.state_dict())  # keep what a checkpoint restored
        self.grad_noise = fresh
        self._grad_updates_seen = fresh.updates
        if model is not None:
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel

            if isinstance(model, DistributedDataParallel) and dist.get_world_size(model.process_group) > 1:
                self._grad_probe = register_ddp_hook(model, self.grad_noise, self.local_batch_size,
                                                     hook=comm_hook, state=comm_hook_state,
                                                     micro_steps=self.alloc.accum_steps)
            else:
                if comm_hook is not None:
                    raise ValueError("comm_hook needs a DistributedDataParallel model over > 1 rank")
                self._grad_probe = track_micro_batches(_unwrap(model).parameters(), self.grad_noise,
                                                       self.local_batch_size)
        self._grad_measuring = True
        return self.grad_noise

    def _sync_grad_noise(self) -> None:
        if self._grad_measuring and _dist() is not None:
            self.grad_noise.sync()

    # -- resume / checkpoint ------------------------------------------------------------
    def resume(self, model: Any, optimizer: Any = None, lr: Optional[float] = None) -> bool:
        """Load the newest checkpoint into ``model``/``optimizer`` (every rank), restore step,
        samples_seen, RNG and ``extra``. ``lr`` (the LR scaled for *this* allocation) is set
        on the optimizer afterwards, since the saved optimizer state carries the old one.
        Remembers model/optimizer for ``checkpoint()``/``stop()``/``finish()``. Collective with
        torch.distributed initialized: every rank calls it; when one rank fails to load, it
        raises that error and the others ``RuntimeError``, as they do when the ranks resumed at
        different steps (they would otherwise wait in collectives that never come)."""
        self._model, self._optimizer = model, optimizer
        found, failure = None, None
        try:
            found = self._load_latest(model, optimizer)
        except Exception as exc:  # re-raised below, once the other ranks know
            failure = exc
        if lr is not None and optimizer is not None and failure is None:
            set_lr(optimizer, lr)
        if _dist() is not None:
            # Also the barrier: nobody writes a new checkpoint before everyone has read. A rank
            # that failed to load, or ranks at different steps, would leave the others waiting in
            # a collective that never comes: every rank learns of it and raises.
            hi, neg_lo, failed = _all_reduce_max([self.step, -self.step, int(failure is not None)])
            if failure is not None:
                raise failure
            if failed:
                raise RuntimeError("another rank failed to load its checkpoint (see its log)")
            if hi != -neg_lo:
                raise RuntimeError(
                    f"ranks resumed at different steps ({-neg_lo} to {hi}): every rank must see "
                    f"the same checkpoints in {self.alloc.checkpoint_dir}")
        elif failure is not None:
            raise failure
        self._reset_window()
        return found is not None

    def _load_latest(self, model: Any, optimizer: Any) -> Optional[str]:
        """Loads the newest checkpoint into this rank's objects; its path, or None."""
        found = load_latest_checkpoint(self.alloc.checkpoint_dir)
        if found is None:
            return None
        path, state = found
        _unwrap(model).load_state_dict(state["model"])
        if optimizer is not None and state.get("optimizer") is not None:
            optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        self.samples_seen = int(state["samples_seen"])
        self.extra = dict(state.get("extra") or {})
        if state.get("grad_noise"):
            try:
                self.grad_noise.load_state_dict(state["grad_noise"])
                self._grad_updates_seen = self.grad_noise.updates
            except (ValueError, KeyError, TypeError) as exc:
                print(f"dlscale: warning: gradient-noise state not restored: {exc}",
                      file=sys.stderr, flush=True)
        if state.get("rng"):
            restore_rng_state(state["rng"])
        self.resumed_from = path
        self._last_ckpt_step = self.step
        self.log(
            f"resumed step={self.step} samples_seen={self.samples_seen} "
            f"world_size={self.world_size} batch_size={self.batch_size}"
        )
        return path

    def state_dict(self) -> Dict[str, Any]:
        opt = self._optimizer
        return {
            "format": FORMAT_VERSION,
            "step": self.step,
            "samples_seen": self.samples_seen,
            "model": _unwrap(self._model).state_dict(),
            "optimizer": opt.state_dict() if opt is not None else None,
            "rng": capture_rng_state(),
            "extra": dict(self.extra),
            "grad_noise": self.grad_noise.state_dict(),
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "local_batch_size": self.local_batch_size,
            "job_id": self.alloc.job_id,
            "time": time.time(),
        }

    def checkpoint(self) -> Optional[str]:
        """Rank 0 writes the checkpoint atomically; all ranks then meet at a barrier.
        Collective: call it on every rank at the same step."""
        if self._model is None:
            raise RuntimeError("call job.resume(model, optimizer) before checkpointing")
        if self._last_ckpt_step == self.step:
            return None  # this step is already on disk (e.g. periodic checkpoint, then stop)
        path = None
        if not self.alloc.checkpoint_dir:
            if not self._warned_no_ckpt and self.is_chief:
                self._warned_no_ckpt = True
                print("dlscale: warning: DLSCALE_CHECKPOINT_DIR is not set; not checkpointing",
                      file=sys.stderr, flush=True)
        else:
            self._sync_grad_noise()  # collective, on every rank: rank 0 saves the job's estimate
            if self.is_chief:
                path = save_checkpoint(self.alloc.checkpoint_dir, self.step, self.state_dict(),
                                       keep=self.keep_checkpoints)
                self.log(f"checkpoint step={self.step}")
        self._last_ckpt_step = self.step
        dist = _dist()
        if dist is not None:
            dist.barrier()
        return path

    # -- the loop --------------------------------------------------------------------------
    def micro_batches(self, batch: Any, model: Any = None, parts: Optional[int] = None) -> Iterator[Tuple[Any, float]]:
        """Gradient accumulation done for you: this worker's ``batch`` (a tensor, or a tuple,
        list or dict of tensors, split along their first dimension) as ``parts`` micro-batches
        (default ``DLSCALE_ACCUM_STEPS``: what the server sized so that each fits the GPU) of
        ``ceil(n / parts)`` samples, the last possibly smaller. Yields ``(micro, weight)``;
        ``weight`` is the micro-batch's share of the batch, so ``(loss(micro) * weight).backward()``
        for each gives the gradient of the whole batch's mean loss, as one pass would. With a
        DistributedDataParallel ``model`` every micro-batch but the last runs in its
        ``no_sync()``: the gradients are all-reduced once per step."""
        k = self.alloc.accum_steps if parts is None else int(parts)
        if k < 1:
            raise ValueError("parts must be >= 1")
        n = _batch_len(batch)
        size = max(1, -(-n // k))
        bounds = [(lo, min(lo + size, n)) for lo in range(0, n, size)]
        no_sync = getattr(model, "no_sync", None)
        for j, (lo, hi) in enumerate(bounds):
            micro, weight = _batch_slice(batch, lo, hi), (hi - lo) / n
            if no_sync is not None and j < len(bounds) - 1:
                with no_sync():
                    yield micro, weight
            else:
                yield micro, weight

    def _reset_window(self) -> None:
        self._win_t0 = time.monotonic()
        self._win_steps = 0
        self._win_samples = 0
        self._win_losses: List[float] = []

    def step_done(self, loss: Optional[float] = None, samples: Optional[int] = None) -> None:
        """Count one finished optimizer step of ``samples`` samples (default: the global batch)."""
        if self._grad_probe is not None:
            self._grad_probe.step()
        self.step += 1
        n = self.batch_size if samples is None else int(samples)
        self.samples_seen += n
        self._win_steps += 1
        self._win_samples += n
        if loss is not None:
            loss = float(loss)
            self.last_loss = loss
            if math.isfinite(loss):
                self._win_losses.append(loss)
        if self.step % self.log_every == 0:
            self._flush_window()
        if self.checkpoint_every and self.step % self.checkpoint_every == 0:
            self.checkpoint()

    def _flush_window(self) -> None:
        if self._win_steps == 0:
            return
        elapsed = max(time.monotonic() - self._win_t0, 1e-9)
        sps = self._win_samples / elapsed
        loss = sum(self._win_losses) / len(self._win_losses) if self._win_losses else None
        self._sync_grad_noise()  # collective, like the window itself (same step on every rank)
        take = getattr(self._grad_probe, "take_compute_time_s", None)
        compute_time_s = take() if take is not None else None  # rank 0's own, as its step time
        self.log(
            f"step={self.step} loss={'nan' if loss is None else f'{loss:.4f}'} "
            f"samples_per_s={sps:.0f} world_size={self.world_size} batch_size={self.batch_size}"
        )
        if self.is_chief:
            grad = None
            if self._grad_measuring:
                grad = self.grad_noise.report(self._grad_init_batch)  # also folds pending steps
                if self.grad_noise.updates == self._grad_updates_seen and not self._warned_no_grad:
                    # Without it a missing `grad` (e.g. one worker, one backward pass per step)
                    # would go unnoticed.
                    self._warned_no_grad = True
                    print("dlscale: warning: no step of this log window measured the gradient "
                          "noise (one worker needs >= 2 backward passes per step)",
                          file=sys.stderr, flush=True)
                self._grad_updates_seen = self.grad_noise.updates
            self.reporter.report(metrics_payload(
                step=self.step, samples_per_s=sps, batch_size=self.batch_size,
                world_size=self.world_size, loss=loss, samples_seen=self.samples_seen,
                attempt=self.alloc.attempt, grad=grad, compute_time_s=compute_time_s,
            ))
        self._reset_window()

    def should_stop(self) -> bool:
        """True once SIGTERM reached any rank. With torch.distributed initialized this is a
        collective (all-reduce MAX of the flag), so every rank stops after the same step."""
        flag = self.stop_flag.is_set()
        if _dist() is None:
            return flag
        return bool(_all_reduce_max([1 if flag else 0])[0])

    def rebatched(self) -> bool:
        """Whether this launch runs another batch from the next step on. A job submitted with
        ``batch_in_place: true`` has its batch changed while it runs: the server answers its
        reports with the batch its launch is to run. Call this on every rank after
        ``step_done()`` (and ``should_stop()``), before the next step draws its samples. At the
        end of each log window (every ``log_every`` steps, right after a report, so that each
        report covers one batch) the ranks take rank 0's latest answer (a collective). When it
        returns True, ``batch_size``, ``local_batch_size`` and ``alloc.accum_steps`` have
        changed, and so has what the gradient-noise probe counts: rescale the learning rate
        (``scaled_lr``) and draw the next samples with the new sizes."""
        if self.step % self.log_every != 0 or self._rebatch_checked_step == self.step:
            return False
        self._rebatch_checked_step = self.step
        answer = self.reporter.batch() if self.is_chief else None
        wanted = list(answer) if answer is not None else [0, 0, 0]
        if _dist() is not None:
            wanted = _all_reduce_max(wanted)  # only rank 0 has an answer (the others send 0)
        batch, local, micro = wanted
        a = self.alloc
        if batch < 1 or (batch, local, micro) == (a.batch_size, a.local_batch_size, a.accum_steps):
            return False
        if local * a.world_size < batch or micro > local:
            # An answer for another world size (torchrun formed fewer workers): kept as is.
            if self.is_chief:
                print(f"dlscale: warning: batch {batch} ({local} per worker, {micro} micro-steps) "
                      f"does not fit {a.world_size} workers; kept {a.batch_size}",
                      file=sys.stderr, flush=True)
            return False
        self.alloc = dataclasses.replace(a, batch_size=batch, local_batch_size=local, accum_steps=micro)
        probe = self._grad_probe
        if hasattr(probe, "local_batch_size"):  # DDP: per-worker gradients
            probe.local_batch_size, probe.micro_steps = local, micro
        elif hasattr(probe, "batch_size"):  # one worker: its micro-batches
            probe.batch_size = local
        self.log(f"rebatched step={self.step} batch_size={batch} local_batch_size={local} "
                 f"accum_steps={micro}")
        return True

    def _close(self) -> None:
        self.reporter.close()
        self.stop_flag.uninstall()

    def stop(self) -> NoReturn:
        """Checkpoint, log ``dlscale: stopped step=N``, leave the process group, exit. A process
        still alive ``EXIT_WATCHDOG_S`` seconds after its checkpoint and last report is ended with
        its stop code (``arm_exit_watchdog``): nothing is lost, and its GPUs are freed."""
        self._flush_window()
        self.checkpoint()
        self.log(f"stopped step={self.step} samples_seen={self.samples_seen} exit_code={self.stop_code}")
        self.reporter.close()
        # From here on nothing is left to save: leaving the group and the interpreter's teardown
        # may hang (NCCL, a non-daemon thread), and must not hold the GPUs until the grace ends.
        self.exit_watchdog = arm_exit_watchdog(self.stop_code)
        dist = _dist()
        if dist is not None:
            dist.destroy_process_group()
        sys.stdout.flush()
        # Restored only now: a late SIGTERM (a launcher's second) while the process leaves its
        # group must not kill it before it exits with its stop code.
        self.stop_flag.uninstall()
        sys.exit(self.stop_code)

    def finish(self) -> None:
        """Final checkpoint, the completion report to the server (rank 0, synchronous: the job
        then succeeds even if a stop reached it meanwhile) and ``dlscale: done step=N``."""
        self._flush_window()
        self.checkpoint()
        self.reporter.close()  # the last progress report goes before the completion
        if self.is_chief and self.alloc.attempt is not None:
            self.reporter.complete({"attempt": self.alloc.attempt, "step": self.step,
                                    "samples_seen": self.samples_seen})
        self.log(f"done step={self.step} samples_seen={self.samples_seen}")
        self._close()
        dist = _dist()
        if dist is not None:
            # The ranks leave together: without it the others tear the group down while the
            # chief still reports the completion, and the chief's own teardown can then abort
            # (seen as SIGABRT on a loaded machine), failing a job that finished.
            dist.barrier()


def _batch_len(batch: Any) -> int:
    """Samples in ``batch``: the first dimension of its (first) tensor."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    elif isinstance(batch, (tuple, list)):
        batch = batch[0]
    n = len(batch)
    if n < 1:
        raise ValueError("an empty batch has no micro-batches")
    return n


def _batch_slice(batch: Any, lo: int, hi: int) -> Any:
    """Samples ``[lo, hi)`` of every tensor in ``batch``, in the same structure."""
    if isinstance(batch, dict):
        return {k: _batch_slice(v, lo, hi) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_batch_slice(v, lo, hi) for v in batch)
    return batch[lo:hi]


def _all_reduce_max(values: List[int]) -> List[int]:
    """The element-wise maximum of ``values`` over every rank (a collective)."""
    import torch

    dist = _dist()
    t = torch.tensor(values, dtype=torch.int64, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [int(v) for v in t.tolist()]


def init(**kwargs: Any) -> Job:
    """``Job(**kwargs)``; a malformed environment prints one line and exits with code 2."""
    try:
        return Job(**kwargs)
    except EnvError as exc:
        print(f"dlscale: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_ENV)
