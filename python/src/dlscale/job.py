"""``Job``: the pieces wired together for a training loop.

    job = dlscale.init()                      # env -> Allocation, SIGTERM handler, reporter
    model, optimizer, scheduler = ...         # the LRs as tuned for global batch 32
    job.resume(model, optimizer, base_batch=32, scheduler=scheduler, scaler=scaler)  # newest checkpoint
    job.measure_grad_noise(ddp_model, init_batch_size=B0)  # optional: noise scale in reports
    loader = job.loader(dataset, num_workers=2, pin_memory=True)  # this rank's share, resumable
    while job.step < total_steps:
        for batch in loader:                  # one pass: to the end of the epoch
            ... one optimizer step on batch (job.micro_batches for accumulation) ...
            job.step_done(loss)               # the one call: count, log, report; stop at a
            if job.step >= total_steps:       # SIGTERM (checkpoint + exit), take a new batch
                break
    job.finish()                              # final checkpoint, "dlscale: done step=N"
"""
from __future__ import annotations

import collections
import collections.abc
import dataclasses
import json
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterator, List, Mapping, NamedTuple, NoReturn, Optional, Tuple

from .checkpoint import (
    FORMAT_VERSION,
    DirectoryStore,
    capture_rng_state,
    holds_dtensor,
    load_sharded_checkpoint,
    pack_state,
    plain_rng_state,
    restore_rank_rng_state,
    sharded_checkpoint_keys,
    unpack_state,
)
from .collective import collective_device
from .env import Allocation, EnvError
from .loader import ElasticLoader, StreamBatches
from .lr import LrScaling, set_lr
from .metrics import MetricsReporter, metrics_payload
from .noise import GradNoiseEstimator, register_ddp_hook, track_micro_batches
from .stop import (EXIT_BAD_ENV, StopFlag, Stopped, arm_exit_watchdog, exit_watchdog_s,
                   install_stop_handler, stop_exit_code)


def _unwrap(model: Any) -> Any:
    # DistributedDataParallel / DataParallel keep the real module in .module
    inner = getattr(model, "module", None)
    if inner is not None and type(model).__name__ in ("DistributedDataParallel", "DataParallel"):
        return inner
    return model


def _is_sharded(model: Any) -> bool:
    """Whether ``model``'s parameters are sharded across ranks (DTensors: FSDP2's
    ``fully_shard``, tensor parallelism): its checkpoints are then ``torch.distributed.checkpoint``'s."""
    parameters = getattr(model, "parameters", None)
    return parameters is not None and any(type(p).__name__ == "DTensor" for p in parameters())


def _dist():
    """torch.distributed if it is initialized with more than one rank, else None. Read from
    ``sys.modules``: a program that never imported it has no group, and every step asks."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
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


# Where probed memory limits are kept in checkpoints (``Job.extra``): by device name, since a
# job that moves to another GPU type holds another batch there.
PROBED_KEY = "dlscale.max_local_batch"

# Seconds between the stop checks of a distributed job's sync points (one all-reduce each):
# how long after a SIGTERM its ranks stop at most, beside one step and the log window.
STOP_CHECK_S = 1.0


class HandedBatch(NamedTuple):
    """A global batch a loader handed out: at stream ``position``, ``batch_size`` samples, this
    rank's ``local_batch_size`` of them (their dataset ``indices`` when they are logged)."""

    position: int
    batch_size: int
    local_batch_size: int
    indices: Optional[List[int]]


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
        store: Any = None,
        stop_flag: Any = None,
        exit_on_stop: bool = True,
    ) -> None:
        """``store``: where checkpoints go and come from (default: ``DirectoryStore`` on
        ``DLSCALE_CHECKPOINT_DIR``, none if unset; see ``checkpoint.DirectoryStore``).
        ``stop_flag``: what tells the job to stop, an object with ``is_set()`` and
        ``uninstall()`` (default: a ``StopFlag`` set by SIGTERM/SIGINT, installed unless
        ``install_signals=False``). ``exit_on_stop=False``: after a stop's checkpoint, raise
        ``Stopped`` instead of ending the process (a Ray Train worker returns; its driver
        exits). ``dlscale.ray_train.init()`` gives all three."""
        env = os.environ if environ is None else environ
        self.alloc = alloc or Allocation.from_env(env, default_local_batch_size=default_local_batch_size)
        if log_every < 1:
            raise ValueError("log_every must be >= 1")
        self.log_every = log_every
        self.checkpoint_every = max(0, checkpoint_every)
        self.keep_checkpoints = keep_checkpoints
        self.stop_code = stop_exit_code(env)
        self.exit_watchdog_s = exit_watchdog_s(env)
        # Armed by stop(): ends the process with its stop code if its exit hangs.
        self.exit_watchdog: Optional[threading.Timer] = None
        if report_interval is None:
            report_interval = _float_env(env, "DLSCALE_METRICS_INTERVAL", 5.0)
        if stop_flag is not None:
            self.stop_flag = stop_flag
        else:
            self.stop_flag = install_stop_handler() if install_signals else StopFlag()
        self._store = store
        self.exit_on_stop = exit_on_stop
        self.finished = False  # finish() ran
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
        self._rng_by_rank: Optional[List[Any]] = None  # every rank's generators, while saving
        self._sharded = False  # the model's parameters are DTensors (FSDP2): sharded checkpoints
        self._warned_no_ckpt = False
        self._last_ckpt_step: Optional[int] = None
        # Gradient noise scale (dlscale.noise): measured once measure_grad_noise() is called.
        self.grad_noise = GradNoiseEstimator()
        self._grad_probe: Any = None
        self._grad_measuring = False
        self._grad_init_batch = 0  # B0 of the reports, set by measure_grad_noise()
        self._grad_updates_seen = 0  # grad_noise.updates at the end of the last log window
        self._warned_no_grad = False
        # The state saved beside the model and optimizer: name -> an object with state_dict() and
        # load_state_dict() (an LR scheduler, a GradScaler, the user's own).
        self._objects: Dict[str, Any] = {}
        self._lr_scaling: Optional[LrScaling] = None
        # Batches a loader handed out and no step has counted yet, oldest first.
        self._handed: Deque[HandedBatch] = collections.deque()
        sample_log = env.get("DLSCALE_SAMPLE_LOG", "").strip()
        self._sample_log = open(f"{sample_log}.rank{self.rank}", "a") if sample_log else None
        # Distributed jobs agree on a stop at sync points only (one all-reduce, no host sync in
        # between): at every log window, and in between every STOP_CHECK_S or so.
        self._next_sync_step = 0
        self._sync_t0 = time.monotonic()
        self._sync_step0 = 0
        self._rebatched = False  # the batch changed at the last step_done(), not yet asked for
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
        """Print a ``dlscale:`` line on rank 0 only. Written to ``sys.stdout`` itself, not with
        ``print``: Ray Train's workers replace ``print`` with one that writes each line twice
        (to the stream and to its logger, both forwarded to the driver)."""
        if self.is_chief:
            sys.stdout.write(f"dlscale: {line}\n")
            sys.stdout.flush()

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

    # -- memory ----------------------------------------------------------------------------
    def probe_max_local_batch(self, step: Callable[[int], Any], *, start: Optional[int] = None,
                              limit: int = 1 << 16, margin: float = 0.9) -> int:
        """Measure how many samples per GPU one micro-step holds, instead of guessing
        ``max_local_batch``: ``step(b)`` runs one forward and backward pass on ``b`` samples (as
        training does; it must leave nothing behind but gradients) at doubling ``b`` from
        ``start`` (default the local batch) until the device runs out of memory, then bisects;
        ``margin`` of the largest that fit is kept (fragmentation, activations that vary). Every
        rank probes its own GPU and the group takes the smallest (a collective). The result goes
        to the server with every report (``max_local_batch``): the job's limit from then on, its
        batches and accumulation decided within it. It is kept in checkpoints (``extra``) by
        device name, so a relaunch on the same kind of GPU reports it without probing again, and
        one on another kind (a fleet's other type) probes that; a sharded model's (FSDP2: each
        rank holds its share of the parameters and optimizer state, so what fits depends on how
        many share them) by device name and world size. Returns it. Only an
        accelerator's out-of-memory error can be caught: on a CPU the search ends at ``limit``."""
        known = self.probed_max_local_batch()
        if known is not None:
            return known
        if not 0 < margin <= 1:
            raise ValueError("margin must be in (0, 1]")
        discard = getattr(self._grad_probe, "discard", None)

        def probe_step(batch: int) -> Any:
            try:
                return step(batch)
            finally:
                # Its passes were no training step's micro-batches; forgotten after each, since
                # under DDP the next pass's first bucket would close it as a step.
                if discard is not None:
                    discard()

        fits = _largest_fitting(probe_step, max(1, start or self.local_batch_size), limit)
        value = max(1, int(fits * margin))
        if _dist() is not None:
            value = -_all_reduce_max([-value])[0]  # the smallest GPU's
        self.extra[PROBED_KEY] = {**self._probed(), self._probe_key(): value}
        self.log(f"probe max_local_batch={value} (the largest that fit: {fits}, margin {margin})")
        return value

    def probed_max_local_batch(self) -> Optional[int]:
        """What ``probe_max_local_batch`` measured on this kind of device (a sharded model: at
        this world size), if it did (in this run or one its checkpoint comes from); what the
        reports carry."""
        value = self._probed().get(self._probe_key())
        return None if value is None else int(value)

    def _probe_key(self) -> str:
        """What a probed limit holds for: this kind of device, and for a sharded model the
        world size too (its per-GPU state shrinks as more ranks share it)."""
        device = _device_name()
        return f"{device} x{self.world_size} sharded" if self._sharded else device

    def _probed(self) -> Dict[str, int]:
        """The probed limits by device name (and world size, for a sharded model). A checkpoint
        written before they were kept by device holds one number, taken as this device's (its
        job never moved between types) unless the model is sharded: then whose world size it
        was is unknown, and the probe runs again."""
        kept = self.extra.get(PROBED_KEY)
        if kept is None:
            return {}
        if isinstance(kept, dict):
            return {str(k): int(v) for k, v in kept.items()}
        return {} if self._sharded else {_device_name(): int(kept)}

    # -- resume / checkpoint ------------------------------------------------------------
    @property
    def store(self) -> Any:
        """Where checkpoints go: the store given to ``Job``, else a ``DirectoryStore`` on
        ``DLSCALE_CHECKPOINT_DIR``, else None (no checkpoints)."""
        if self._store is not None:
            return self._store
        if self.alloc.checkpoint_dir:
            return DirectoryStore(self.alloc.checkpoint_dir, self.keep_checkpoints)
        return None

    def resume(self, model: Any, optimizer: Any = None, lr: Optional[float] = None, *,
               base_batch: Optional[int] = None, lr_rule: str = "linear", scheduler: Any = None,
               **objects: Any) -> bool:
        """Load the newest checkpoint into ``model``/``optimizer`` and the other stateful objects
        (every rank), restore step, samples_seen, RNG and ``extra``. Remembers them all for
        ``checkpoint()``/``stop()``/``finish()``.

        * ``scheduler`` (an LR scheduler) and ``**objects`` (a ``GradScaler``, the user's own:
          anything with ``state_dict()``/``load_state_dict()``, torch's ``Stateful``) are saved
          in every checkpoint under their names and restored from it.
        * ``base_batch``: the global batch the optimizer's learning rates (as built) were tuned
          for. dlscale then keeps them scaled for the job's batch by ``lr_rule`` (``scaled_lr``):
          at the start, after loading a checkpoint written at another batch, and at every
          rebatch; a scheduler's base LRs go with them, so its schedule goes on, scaled.
        * ``lr`` (instead): the learning rate for *this* allocation, set on the optimizer
          afterwards, since the saved optimizer state carries the old one.

        Collective with torch.distributed initialized: every rank calls it; when one rank fails
        to load, it raises that error and the others ``RuntimeError``, as they do when the ranks
        resumed at different steps (they would otherwise wait in collectives that never come)."""
        if lr is not None and base_batch is not None:
            raise ValueError("give lr (this allocation's LR) or base_batch (dlscale scales it), not both")
        if scheduler is not None:
            objects = {"scheduler": scheduler, **objects}
        for name, obj in objects.items():
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise TypeError(f"resume(): {name}={type(obj).__name__} has no state_dict() and "
                                f"load_state_dict(): it cannot be saved in a checkpoint")
        self._model, self._optimizer, self._objects = model, optimizer, objects
        self._sharded = _is_sharded(model)
        probed = self.extra.get(PROBED_KEY)
        if self._sharded and isinstance(probed, dict) and _device_name() in probed:
            # Probed in this run before the model was known sharded: at this world size.
            probed[self._probe_key()] = probed.pop(_device_name())
        if self._sharded and self.store is not None and not getattr(self.store, "sharded", False):
            raise NotImplementedError(f"a sharded model (DTensor parameters) cannot be checkpointed in "
                                      f"{type(self.store).__name__} yet")
        self.forget_handed()
        self._lr_scaling = None
        if base_batch is not None:
            if optimizer is None:
                raise ValueError("base_batch scales an optimizer's learning rates: give the optimizer")
            self._lr_scaling = LrScaling(optimizer, int(base_batch), lr_rule, scheduler)
        found, failure = None, None
        try:
            found = self._load_latest(model, optimizer)
        except Exception as exc:  # re-raised below, once the other ranks know
            failure = exc
        if failure is None:
            if lr is not None and optimizer is not None:
                set_lr(optimizer, lr)
            if self._lr_scaling is not None:
                self._lr_scaling.scale_to(self.batch_size)
                self.log(self._lr_scaling.describe())
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
                    f"the same checkpoints in {self.store}")
        elif failure is not None:
            raise failure
        self._reset_window()
        self._next_sync_step = self.step
        return found is not None

    def _load_latest(self, model: Any, optimizer: Any) -> Optional[str]:
        """Loads the newest checkpoint into this rank's objects; its path, or None."""
        store = self.store
        if store is None:
            return None
        # The newest checkpoint of either kind: a job sharded at one world size and not at
        # another (FSDP only when world_size > 1) must not resume from an older one of its own
        # kind (its steps since trained again, the newer one then pruned).
        found = store.load_latest()
        if found is None:
            return None
        path, state = found
        if state is None:  # a sharded checkpoint: loaded into this run's objects, sharded or not
            state = self._load_sharded(path)
        elif self._sharded:
            self._load_full_into_sharded(path, state)
        else:
            _unwrap(model).load_state_dict(state["model"])
            if optimizer is not None and state.get("optimizer") is not None:
                optimizer.load_state_dict(state["optimizer"])
        saved = state.get("objects") or {}
        for name, obj in self._objects.items():
            if name in saved:
                obj.load_state_dict(saved[name])
            else:
                print(f"dlscale: warning: {path} has no state for {name}: it starts afresh",
                      file=sys.stderr, flush=True)
        if self._lr_scaling is not None and state.get("lr_batch"):
            # The loaded optimizer's LRs are scaled for the batch it was saved at.
            self._lr_scaling.batch = int(state["lr_batch"])
        self.step = int(state["step"])
        self.samples_seen = int(state["samples_seen"])
        probed_here = self._probed()  # a probe made before this resume: this run's own
        self.extra = dict(state.get("extra") or {})
        if probed_here:
            self.extra[PROBED_KEY] = {**self._probed(), **probed_here}
        if state.get("grad_noise"):
            try:
                self.grad_noise.load_state_dict(state["grad_noise"])
                self._grad_updates_seen = self.grad_noise.updates
            except (ValueError, KeyError, TypeError) as exc:
                print(f"dlscale: warning: gradient-noise state not restored: {exc}",
                      file=sys.stderr, flush=True)
        # Every rank's generators; from a checkpoint written before they were kept, rank 0's.
        by_rank = json.loads(state.get("rng_by_rank") or "[]")
        if not by_rank and state.get("rng"):
            by_rank = [state["rng"]]
        if by_rank:
            restore_rank_rng_state(by_rank, self.rank)
        self.resumed_from = path
        self._last_ckpt_step = self.step
        self.log(
            f"resumed step={self.step} samples_seen={self.samples_seen} "
            f"world_size={self.world_size} batch_size={self.batch_size}"
        )
        return path

    def _load_sharded(self, path: str) -> Dict[str, Any]:
        """Loads the sharded checkpoint at ``path`` into the model and optimizer (collective:
        every rank its shards, resharded to this group; an unsharded model takes whole tensors);
        the rest of its state."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        # The template, as a sharded checkpoint holds it: its tensors are filled, its other
        # values replaced.
        state = self._state_dict(sharded=True)
        # The template names what this checkpoint holds, as it holds it: an older version wrote
        # no `rng_by_rank` and its `extra` and objects as dicts (an `extra` it could not
        # restore), and an object added since has no state there (it starts afresh).
        saved = sharded_checkpoint_keys(path)
        for key in ("rng_by_rank", "extra"):
            if key not in saved:
                del state[key]
        objects = state["objects"]
        for name, obj in self._objects.items():
            if f"objects.{name}" in saved:
                continue  # packed, as now
            if any(k.startswith(f"objects.{name}.") for k in saved):
                objects[name] = obj.state_dict()  # its values one by one, as before
            else:
                del objects[name]
        load_sharded_checkpoint(path, state)
        if state.get("format") != FORMAT_VERSION:
            raise RuntimeError(f"{path} is not a dlscale checkpoint")
        state["extra"] = unpack_state(state["extra"]) if state.get("extra") else {}
        state["objects"] = {name: unpack_state(value) if isinstance(value, bytes) else value
                            for name, value in (state.get("objects") or {}).items()}
        set_state_dict(_unwrap(self._model), self._optimizer if self._optimizer is not None else [],
                       model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"] if self._optimizer is not None else {})
        return state

    def _load_full_into_sharded(self, path: str, state: Dict[str, Any]) -> None:
        """Loads an unsharded checkpoint's whole model and optimizer state into the sharded model
        and its optimizer: every rank keeps its shards. The optimizer's state is by parameter
        index there, matched to this optimizer's parameters (built alike) by position."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        opt, saved = self._optimizer, state.get("optimizer")
        by_name = None
        if opt is not None and saved is not None:
            names = {p: n for n, p in _unwrap(self._model).named_parameters()}
            groups = saved["param_groups"]
            if [len(g["params"]) for g in groups] != [len(g["params"]) for g in opt.param_groups]:
                raise RuntimeError(
                    f"{path}: its optimizer's parameter groups do not match this optimizer's: build "
                    f"the optimizer as the run that saved it did, or remove {path} to resume from the "
                    f"checkpoint before it")
            by_name = {"state": {}, "param_groups": []}
            for saved_group, group in zip(groups, opt.param_groups):
                fqns = [names[p] for p in group["params"]]
                by_name["param_groups"].append({**saved_group, "params": fqns})
                for index, fqn in zip(saved_group["params"], fqns):
                    if index in saved["state"]:
                        by_name["state"][fqn] = saved["state"][index]
        set_state_dict(_unwrap(self._model), opt if by_name is not None else [],
                       model_state_dict=state["model"], optim_state_dict=by_name or {},
                       options=StateDictOptions(full_state_dict=True))

    def _model_state(self, sharded: bool) -> Tuple[Any, Any]:
        """The model's and optimizer's state dicts: this rank's shards for a sharded model; as a
        sharded checkpoint holds them if ``sharded`` (the optimizer's by parameter name)."""
        opt = self._optimizer
        if sharded:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

            if opt is None:
                return get_model_state_dict(_unwrap(self._model)), None
            return get_state_dict(_unwrap(self._model), opt)
        return _unwrap(self._model).state_dict(), opt.state_dict() if opt is not None else None

    def state_dict(self) -> Dict[str, Any]:
        """Everything a checkpoint holds, as this run's kind of checkpoint holds it."""
        return self._state_dict(self._sharded)

    def _state_dict(self, sharded: bool) -> Dict[str, Any]:
        model, optimizer = self._model_state(sharded)
        rng = capture_rng_state()
        return {
            "format": FORMAT_VERSION,
            "step": self.step,
            "samples_seen": self.samples_seen,
            "model": model,
            "optimizer": optimizer,
            "objects": {name: self._object_state(name, obj, sharded) for name, obj in self._objects.items()},
            "lr_batch": self._lr_scaling.batch if self._lr_scaling is not None else None,
            "rng": rng,
            # Every rank's generators (a rank restores its own): `checkpoint()` gathers them. As
            # one string: a sharded checkpoint then holds one value whatever the world size.
            "rng_by_rank": json.dumps(self._rng_by_rank or [plain_rng_state(rng)]),
            # A sharded checkpoint's loader fills its template's keys only: one value there.
            "extra": pack_state(dict(self.extra)) if sharded else dict(self.extra),
            "grad_noise": self.grad_noise.state_dict(),
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "local_batch_size": self.local_batch_size,
            "job_id": self.alloc.job_id,
            "time": time.time(),
        }

    def _object_state(self, name: str, obj: Any, sharded: bool) -> Any:
        """``obj``'s state as a checkpoint holds it: for a sharded model's checkpoint packed into
        one value (its loader fills only the keys a template names, and an object's keys or
        lists may differ at a resume), unless the state is sharded itself (DTensors)."""
        state = obj.state_dict()
        if not sharded or holds_dtensor(state):
            return state
        return pack_state(state, f"the state of {name!r}")

    def checkpoint(self) -> Optional[str]:
        """Rank 0 writes the checkpoint atomically (every rank its shards of a sharded model) to
        the job's ``store``; all ranks then meet at a barrier. Collective: call it on every rank
        at the same step."""
        if self._model is None:
            raise RuntimeError("call job.resume(model, optimizer) before checkpointing")
        if self._last_ckpt_step == self.step:
            return None  # this step is already on disk (e.g. periodic checkpoint, then stop)
        path = None
        store, dist = self.store, _dist()
        if store is None:
            if not self._warned_no_ckpt and self.is_chief:
                self._warned_no_ckpt = True
                print("dlscale: warning: DLSCALE_CHECKPOINT_DIR is not set; not checkpointing",
                      file=sys.stderr, flush=True)
        else:
            self._sync_grad_noise()  # collective, on every rank: rank 0 saves the job's estimate
            if dist is not None:  # collective: every rank's generators, to rank 0's file
                self._rng_by_rank = [None] * dist.get_world_size()
                dist.all_gather_object(self._rng_by_rank, plain_rng_state(capture_rng_state()))
            # Rank 0 writes an unsharded checkpoint, every rank its shards of a sharded one.
            try:
                path = store.save(self.step, self.state_dict, chief=self.is_chief, sharded=self._sharded)
            finally:
                self._rng_by_rank = None
            self.log(f"checkpoint step={self.step}")
        self._last_ckpt_step = self.step
        if dist is not None:
            dist.barrier()
        return path

    # -- the loop --------------------------------------------------------------------------
    def micro_batches(self, batch: Any, model: Any = None, parts: Optional[int] = None) -> Iterator[Tuple[Any, float]]:
        """Gradient accumulation done for you: this worker's ``batch`` (a tensor, or a tuple,
        named tuple, list or mapping of them, e.g. a tokenizer's ``BatchEncoding``, split along
        their first dimension; a list of strings or numbers is a part of its own, a scalar kept
        whole; with one part the batch as it is) as ``parts`` micro-batches
        (default ``DLSCALE_ACCUM_STEPS``: what the server sized so that each fits the GPU) of
        ``ceil(n / parts)`` samples, the last possibly smaller (a batch ``job.loader`` cut before
        a rebatch, fetched ahead of it: in parts of the new ``alloc.micro_batch_size``). Yields
        ``(micro, weight)``; ``weight`` is the micro-batch's share of the batch, so
        ``(loss(micro) * weight).backward()`` for each gives the gradient of the whole batch's
        mean loss, as one pass would. With a
        DistributedDataParallel ``model`` every micro-batch but the last runs in its
        ``no_sync()``: the gradients are all-reduced once per step."""
        k = self.alloc.accum_steps if parts is None else int(parts)
        if k < 1:
            raise ValueError("parts must be >= 1")
        training = self._handed[0] if self._handed else None  # the loader's batch this step trains
        if parts is None and training is not None and training.local_batch_size != self.local_batch_size:
            # Cut before a rebatch (a loop that fetched it ahead): in parts of the new micro-batch
            # size, what the server sized to fit; the new part count would cut a larger old batch
            # into larger micro-batches.
            k = -(-training.local_batch_size // self.alloc.micro_batch_size)
        if k == 1:  # nothing to cut: any batch, as it is
            self._win_micro_steps = max(self._win_micro_steps or 0, 1)
            yield batch, 1.0
            return
        n = _batch_len(batch)
        size = max(1, -(-n // k))
        bounds = [(lo, min(lo + size, n)) for lo in range(0, n, size)]
        # What the step runs, and so what its step time measures (reported).
        self._win_micro_steps = max(self._win_micro_steps or 0, len(bounds))
        no_sync = getattr(model, "no_sync", None)
        for j, (lo, hi) in enumerate(bounds):
            micro, weight = _batch_slice(batch, lo, hi), (hi - lo) / n
            if no_sync is not None and j < len(bounds) - 1:
                with no_sync():
                    yield micro, weight
            else:
                yield micro, weight

    def loader(self, dataset: Any, *, seed: int = 0, shuffle: bool = True, **dataloader_kwargs: Any) -> ElasticLoader:
        """A ``torch.utils.data.DataLoader`` over ``dataset`` (any other of its arguments:
        ``num_workers``, ``pin_memory``, ``collate_fn``, ...) whose batches are this rank's share
        of the job's global batches, in the order ``ElasticSampler(len(dataset), seed, shuffle)``
        gives: one pass per ``for`` loop, to the end of the epoch. A batch changed in place, a
        rescale and a resume start it again at the first sample no step has counted."""
        return ElasticLoader(self, dataset, seed=seed, shuffle=shuffle, **dataloader_kwargs)

    def next_stream_position(self) -> int:
        """The stream position of the first sample not handed out yet: ``samples_seen`` and
        the global batches a loader handed out that no step has counted."""
        return self.samples_seen + sum(h.batch_size for h in self._handed)

    def handed_out(self, position: int, batches: StreamBatches) -> None:
        """Record the batch a loader handed out, at ``position``, cut by ``batches``; the
        ``step_done()`` that counts it takes its size (and, with ``DLSCALE_SAMPLE_LOG``, logs
        its indices)."""
        indices = batches.indices(position) if self._sample_log is not None else None
        self._handed.append(HandedBatch(position, batches.batch_size, batches.local_batch_size, indices))

    def forget_handed(self) -> None:
        """Forget the batches handed out that no step has counted: a new pass starts."""
        self._handed.clear()

    def _reset_window(self) -> None:
        self._win_t0 = time.monotonic()
        self._win_steps = 0
        self._win_samples = 0
        self._win_losses: List[Any] = []  # floats, or tensors left on their device until the window ends
        # The most micro-batches ``micro_batches()`` cut a step into this window (None: it was
        # not used; the step is taken to run the allocation's accumulation steps).
        self._win_micro_steps: Optional[int] = None

    def step_done(self, loss: Any = None, samples: Optional[int] = None) -> bool:
        """The one call per step, after the optimizer step, on every rank. It counts the step and
        its samples (those of the batch a loader handed out, else ``samples``, else the global
        batch) and ends the log window every ``log_every`` steps: a progress line and report.
        ``loss`` may be a tensor: it is summed where it lies and read once per window, so a step
        costs no host sync.

        At sync points it acts on what reached the job: after a SIGTERM (on any rank) it
        checkpoints and exits (``stop()``); at the end of a log window it takes the batch the
        server answered (``batch_in_place`` jobs), rescales the learning rates (``resume(...,
        base_batch=)``) and returns True: ``batch_size``, ``local_batch_size`` and
        ``alloc.accum_steps`` are then the new ones, and ``job.loader`` follows. Alone, a job
        checks its stop flag every step; under torch.distributed the ranks agree on both in one
        all-reduce, at every window and in between every ``STOP_CHECK_S`` or so."""
        if self._grad_probe is not None:
            self._grad_probe.step()
        handed = self._handed.popleft() if self._handed else None
        if handed is not None:
            # What the batch took from the stream: counted otherwise, the loader would go on from
            # another position and serve samples again (or skip them).
            n = handed.batch_size
        elif samples is not None:
            n = int(samples)
        else:
            n = self.batch_size
        if handed is not None and self._sample_log is not None:
            self._sample_log.write(json.dumps({
                "step": self.step + 1, "rank": self.rank, "world_size": self.world_size,
                "offset": handed.position + self.rank * handed.local_batch_size,
                "count": handed.local_batch_size, "indices": handed.indices}) + "\n")
            self._sample_log.flush()
        self.step += 1
        self.samples_seen += n
        self._win_steps += 1
        self._win_samples += n
        if loss is not None:
            # A tensor stays where it lies until the window ends: no host sync per step.
            self._win_losses.append(loss.detach() if hasattr(loss, "detach") else float(loss))
        window = self.step % self.log_every == 0
        if window:
            self._flush_window()
        if self.checkpoint_every and self.step % self.checkpoint_every == 0:
            self.checkpoint()
        self._rebatched = False
        if window or self.step >= self._next_sync_step:
            self._sync(window)
        elif self.stop_flag.is_set() and _dist() is None:
            self.stop()  # alone, a job needs no sync point to stop
        start_timing = getattr(self._grad_probe, "start_timing", None)
        if start_timing is not None:  # the next step's compute starts here, after this call's work
            start_timing()
        return self._rebatched

    def _sync(self, window: bool) -> None:
        """A sync point: one all-reduce (under torch.distributed) of the stop flag, rank 0's next
        sync point and, at the end of a log window, the batch the server answered."""
        answer = self.reporter.batch() if window and self.is_chief else None
        wanted = [int(self.stop_flag.is_set()), self._sync_gap() if self.is_chief else 0,
                  *(answer if answer is not None else (0, 0, 0))]
        if _dist() is not None:
            wanted = _all_reduce_max(wanted)  # only rank 0 has a gap and an answer (the others send 0)
        stop, gap, *batch = wanted
        self._next_sync_step = self.step + max(1, gap)
        if stop:
            self.stop()
        if window:
            self._take_batch(*batch)

    def _sync_gap(self) -> int:
        """Steps to the next sync point: about STOP_CHECK_S of them at the recent step time, at
        least one, at most a log window."""
        now = time.monotonic()
        steps = self.step - self._sync_step0
        per_step_s = (now - self._sync_t0) / steps if steps > 0 else STOP_CHECK_S
        self._sync_t0, self._sync_step0 = now, self.step
        return max(1, min(self.log_every, int(STOP_CHECK_S / max(per_step_s, 1e-9))))

    def _flush_window(self) -> None:
        if self._win_steps == 0:
            return
        elapsed = max(time.monotonic() - self._win_t0, 1e-9)
        sps = self._win_samples / elapsed
        loss = None
        if self._win_losses:
            losses = self._win_losses
            if all(hasattr(v, "detach") for v in losses):
                import torch

                total = float(torch.stack(losses).sum())  # the window's one host sync
            else:
                total = sum(float(v) for v in losses)
            loss = total / len(losses)
            self.last_loss = loss
            if not math.isfinite(loss):
                loss = None
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
                max_local_batch=self.probed_max_local_batch(),
                micro_steps=self._win_micro_steps or self.alloc.accum_steps,
            ))
        self._reset_window()

    def should_stop(self) -> bool:
        """True once SIGTERM reached any rank, for a loop that stops at a step of its own
        choosing (``step_done()`` stops by itself). With torch.distributed initialized this is a
        collective (all-reduce MAX of the flag) on every step, so every rank stops after the
        same step."""
        flag = self.stop_flag.is_set()
        if _dist() is None:
            return flag
        return bool(_all_reduce_max([1 if flag else 0])[0])

    def rebatched(self) -> bool:
        """Whether the last ``step_done()`` changed the batch from the next step on (see there);
        True once per change."""
        changed, self._rebatched = self._rebatched, False
        return changed

    def _take_batch(self, batch: int, local: int, micro: int) -> None:
        """Run ``batch`` (``local`` per worker in ``micro`` micro-steps) from the next step on,
        if it is a change that fits this launch's workers."""
        a = self.alloc
        if batch < 1 or (batch, local, micro) == (a.batch_size, a.local_batch_size, a.accum_steps):
            return
        if local * a.world_size != batch or micro > local:
            # An answer for another world size (torchrun formed fewer workers): kept as is.
            if self.is_chief:
                print(f"dlscale: warning: batch {batch} ({local} per worker, {micro} micro-steps) "
                      f"does not fit {a.world_size} workers; kept {a.batch_size}",
                      file=sys.stderr, flush=True)
            return
        self.alloc = dataclasses.replace(a, batch_size=batch, local_batch_size=local, accum_steps=micro)
        probe = self._grad_probe
        if hasattr(probe, "local_batch_size"):  # DDP: per-worker gradients
            probe.local_batch_size, probe.micro_steps = local, micro
        elif hasattr(probe, "batch_size"):  # one worker: its micro-batches
            probe.batch_size = local
        self._rebatched = True
        self.log(f"rebatched step={self.step} batch_size={batch} local_batch_size={local} "
                 f"accum_steps={micro}")
        if self._lr_scaling is not None:
            self._lr_scaling.scale_to(batch)
            self.log(self._lr_scaling.describe())

    def _close(self) -> None:
        self.reporter.close()
        self.stop_flag.uninstall()
        if self._sample_log is not None:
            self._sample_log.close()

    def stop(self) -> NoReturn:
        """Checkpoint, log ``dlscale: stopped step=N``, leave the process group, exit. A process
        still alive ``DLSCALE_EXIT_WATCHDOG_S`` (default 5) seconds after its checkpoint and last report is ended with
        its stop code (``arm_exit_watchdog``): nothing is lost, and its GPUs are freed.
        With ``exit_on_stop=False`` (a Ray Train worker) it raises ``Stopped`` after the
        checkpoint instead, leaving the process and its group to the framework."""
        self._flush_window()
        self.checkpoint()
        self.log(f"stopped step={self.step} samples_seen={self.samples_seen} exit_code={self.stop_code}")
        self.reporter.close()
        if not self.exit_on_stop:
            self._close()
            raise Stopped(self.stop_code)
        # From here on nothing is left to save: leaving the group and the interpreter's teardown
        # may hang (NCCL, a non-daemon thread), and must not hold the GPUs until the grace ends.
        self.exit_watchdog = arm_exit_watchdog(self.stop_code, self.exit_watchdog_s)
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
        self.finished = True
        self._close()
        dist = _dist()
        if dist is not None:
            # The ranks leave together: without it the others tear the group down while the
            # chief still reports the completion, and the chief's own teardown can then abort
            # (seen as SIGABRT on a loaded machine), failing a job that finished.
            dist.barrier()


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a device's out-of-memory error (CUDA's, or another accelerator's)."""
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    return (oom is not None and isinstance(exc, oom)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc))


def _release_memory() -> None:
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def _fits(step: Callable[[int], Any], batch: int) -> bool:
    try:
        step(batch)
    except Exception as exc:  # only an out-of-memory error is an answer; the rest are bugs
        if not _out_of_memory(exc):
            raise
        del exc
        _release_memory()
        return False
    _release_memory()
    return True


def _device_name() -> str:
    """This rank's accelerator by name (its GPU type: what a probed memory limit holds for),
    ``"cpu"`` without one."""
    try:
        import torch
    except ImportError:
        return "cpu"
    if torch.cuda.is_available():
        return str(torch.cuda.get_device_name(torch.cuda.current_device()))
    return "cpu"


def _largest_fitting(step: Callable[[int], Any], start: int, limit: int) -> int:
    """The largest ``b <= limit`` with ``step(b)`` not out of memory: doubling from ``start``
    (halving while even it does not fit), then bisecting."""
    fit, too_big = 0, None
    b = min(start, limit)
    if _fits(step, b):
        fit = b
        while fit < limit:
            b = min(2 * fit, limit)
            if not _fits(step, b):
                too_big = b
                break
            fit = b
    else:
        too_big = b
        while b > 1:
            b //= 2
            if _fits(step, b):
                fit = b
                break
            too_big = b
        if fit == 0:
            raise RuntimeError("not even one sample per GPU fits in the device's memory")
    while too_big is not None and too_big - fit > 1:
        mid = (fit + too_big) // 2
        if _fits(step, mid):
            fit = mid
        else:
            too_big = mid
    return fit


def _per_sample_list(value: Any) -> bool:
    """Whether ``value`` is a list or tuple of per-sample values (strings, numbers: what a
    ``collate_fn`` passes through), sliced as a whole rather than as a structure of parts."""
    return (isinstance(value, (list, tuple)) and not hasattr(value, "_fields")
            and all(isinstance(v, (str, bytes, int, float, type(None))) for v in value))


def _sample_lengths(batch: Any, out: List[int]) -> List[int]:
    """The first dimension of every part of ``batch`` that has one, in order (a scalar, a
    string or a 0-d tensor has none: it is the whole batch's, not per sample)."""
    if isinstance(batch, collections.abc.Mapping):
        for value in batch.values():
            _sample_lengths(value, out)
    elif isinstance(batch, (tuple, list)) and not _per_sample_list(batch):
        for value in batch:
            _sample_lengths(value, out)
    elif hasattr(batch, "shape"):
        if len(batch.shape) > 0:
            out.append(int(batch.shape[0]))
    elif not isinstance(batch, (str, bytes)) and hasattr(batch, "__len__"):
        out.append(len(batch))
    return out


def _batch_len(batch: Any) -> int:
    """Samples in ``batch``: the first dimension of its parts, which must agree (each is cut
    along it)."""
    lengths = _sample_lengths(batch, [])
    if not lengths:
        raise ValueError(f"micro_batches: a {type(batch).__name__} batch holds no tensor or list to "
                         f"split along its first dimension")
    if len(set(lengths)) > 1:
        raise ValueError(f"micro_batches: the batch's parts differ in their first dimension "
                         f"({sorted(set(lengths))}): each is cut along it into the same samples")
    if lengths[0] < 1:
        raise ValueError("an empty batch has no micro-batches")
    return lengths[0]


def _batch_slice(batch: Any, lo: int, hi: int) -> Any:
    """Samples ``[lo, hi)`` of every part of ``batch``, in the same structure (a mapping as a
    dict); a part without a first dimension (a scalar, a string) as it is."""
    if isinstance(batch, collections.abc.Mapping):
        return {k: _batch_slice(v, lo, hi) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)) and not _per_sample_list(batch):
        parts = [_batch_slice(v, lo, hi) for v in batch]
        return type(batch)(*parts) if hasattr(batch, "_fields") else type(batch)(parts)
    if isinstance(batch, (str, bytes)) or (hasattr(batch, "shape") and len(batch.shape) == 0):
        return batch
    if not hasattr(batch, "__getitem__"):
        return batch
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
