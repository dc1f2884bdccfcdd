"""dlscale for Ray Train: a ``TorchTrainer`` run as an elastic dlscale job.

The driver (the Ray job's entrypoint) calls ``fit``; each Train worker calls ``init`` for its
``Job``:

    import dlscale.ray_train as dlray

    def train_func(config):
        job = dlray.init(log_every=10)             # rank/world from Ray Train, its checkpoint API
        model, optimizer = ...                     # the LR tuned for batch 32
        job.resume(model, optimizer, base_batch=32)          # ray.train.get_checkpoint()
        model = ray.train.torch.prepare_model(model)         # DDP over the run's workers
        loader = job.loader(dataset)                         # not prepare_data_loader
        while job.samples_seen < config["total_samples"]:
            for x, y in loader:
                ...                                          # one optimizer step
                job.step_done(loss)                          # a stop: report a checkpoint, return
                if job.samples_seen >= config["total_samples"]:
                    break
        job.finish()

    dlray.fit(train_func, {"total_samples": 32000})   # exits with the stop code after a stop

``fit`` builds the ``TorchTrainer`` from dlscale's allocation: ``scaling_config()``
(``num_workers`` = ``DLSCALE_WORLD_SIZE``, one unit of ``DLSCALE_RAY_RESOURCE`` per worker) and
``run_config()`` (``name`` = ``DLSCALE_RAY_RUN_NAME``, ``storage_path`` =
``DLSCALE_CHECKPOINT_DIR``: a relaunch with the same pair resumes from the run's newest
checkpoint). The per-worker batch is the ``Job``'s, as under torchrun.

A stop: SIGTERM (or SIGINT) reaches the driver only (Ray's job supervisor signals the
entrypoint's processes; Train workers are Ray actors). ``fit`` runs ``trainer.fit()`` on a
thread while the main thread waits for the signal; it then sets a small async actor the driver
created (``_StopSignal``, no CPU). Rank 0 of the run holds one pending ``wait()`` call on it and
looks, without blocking, whether it returned at each of the ``Job``'s sync points; the ranks agree
there in their all-reduce (as under torchrun), every rank checkpoints through
``ray.train.report`` (rank 0's state, the others ``checkpoint=None``) after the same step and
returns; the driver prints ``dlscale: stopped …`` and exits with ``DLSCALE_STOP_EXIT_CODE``.
No file or shared directory is involved, so it works across nodes.

``ray`` is imported only here, and lazily: the rest of the library needs no Ray.
"""
from __future__ import annotations

import inspect
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .checkpoint import FORMAT_VERSION, check_loadable
from .env import Allocation, EnvError
from .job import Job
from .stop import EXIT_BAD_ENV, Stopped, arm_exit_watchdog, exit_watchdog_s, install_stop_handler, stop_exit_code

RESOURCE_ENV = "DLSCALE_RAY_RESOURCE"
RUN_NAME_ENV = "DLSCALE_RAY_RUN_NAME"
CHECKPOINT_FILE = "dlscale.pt"  # the Job's state inside a Ray Train checkpoint directory
KEEP_CHECKPOINTS = 2

# Seconds between two looks of rank 0 at the stop signal when a lone worker asks every step.
_STOP_POLL_S = 0.05


def _env(environ: Optional[Mapping[str, str]]) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def worker_env(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The driver's ``DLSCALE_*`` variables, which ``fit`` hands to its workers: under Ray's Jobs
    API the job's ``runtime_env`` gives workers the same, but a driver started by hand on a
    cluster would otherwise leave them with the cluster's environment."""
    return {k: v for k, v in _env(environ).items() if k.startswith("DLSCALE_")}


# -- the driver ------------------------------------------------------------------------------
def scaling_config(*, cpus_per_worker: Optional[float] = None, environ: Optional[Mapping[str, str]] = None,
                   **overrides: Any) -> Any:
    """``ray.train.ScalingConfig`` for dlscale's allocation: ``num_workers`` = the world size
    (``DLSCALE_WORLD_SIZE``), each worker one unit of ``DLSCALE_RAY_RESOURCE`` (``GPU``:
    ``use_gpu=True``; a custom resource such as ``fake_gpu``; unset: Ray's default, one CPU) and
    ``cpus_per_worker`` CPUs if given. ``overrides`` are ``ScalingConfig``'s own arguments."""
    from ray.train import ScalingConfig

    env = _env(environ)
    alloc = Allocation.from_env(env)
    resource = env.get(RESOURCE_ENV, "").strip()
    kwargs: Dict[str, Any] = {"num_workers": alloc.world_size}
    per_worker: Dict[str, float] = {}
    if resource == "GPU":
        kwargs["use_gpu"] = True
        per_worker["GPU"] = 1
    elif resource:
        per_worker[resource] = 1
    if cpus_per_worker is not None:
        per_worker["CPU"] = cpus_per_worker
    if per_worker:
        kwargs["resources_per_worker"] = per_worker
    kwargs.update(overrides)
    return ScalingConfig(**kwargs)


def run_config(*, environ: Optional[Mapping[str, str]] = None, **overrides: Any) -> Any:
    """``ray.train.RunConfig`` for the job: ``name`` = ``DLSCALE_RAY_RUN_NAME`` (else
    ``DLSCALE_JOB_ID``), ``storage_path`` = ``DLSCALE_CHECKPOINT_DIR`` made absolute (shared
    storage on a multi-node cluster), the newest two checkpoints kept. The same pair again resumes
    the run. ``overrides`` are ``RunConfig``'s own arguments."""
    from ray.train import CheckpointConfig, RunConfig

    env = _env(environ)
    kwargs: Dict[str, Any] = {"checkpoint_config": CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS)}
    name = env.get(RUN_NAME_ENV, "").strip() or env.get("DLSCALE_JOB_ID", "").strip()
    if name:
        kwargs["name"] = name
    storage = env.get("DLSCALE_CHECKPOINT_DIR", "").strip()
    if storage:
        kwargs["storage_path"] = storage if "://" in storage else os.path.abspath(storage)
    kwargs.update(overrides)
    return RunConfig(**kwargs)


def _stop_signal_actor() -> Any:
    """An async actor (no CPU) the driver sets at a stop; ``wait()`` returns once it is set."""
    import asyncio

    import ray

    @ray.remote(num_cpus=0)
    class _StopSignal:
        def __init__(self) -> None:
            self._event = asyncio.Event()

        async def set(self) -> None:
            self._event.set()

        async def wait(self) -> bool:
            await self._event.wait()
            return True

    return _StopSignal.remote()


def fit(train_func: Callable[..., Any], train_loop_config: Optional[Dict[str, Any]] = None, *,
        cpus_per_worker: Optional[float] = None, **trainer_kwargs: Any) -> Any:
    """Run ``train_func`` on a ``ray.train.torch.TorchTrainer`` as a dlscale job; call it from the
    driver's main thread. ``trainer_kwargs`` go to ``TorchTrainer``; its ``scaling_config`` and
    ``run_config`` default to this module's (``cpus_per_worker`` goes to the former).

    Returns the run's ``ray.train.Result`` when training ended (after ``dlscale: done step=N
    samples_seen=M``, printed here too, unprefixed). After a stop (SIGTERM or SIGINT: every
    worker checkpointed after the same step) it prints ``dlscale: stopped step=N samples_seen=M
    exit_code=C`` and exits with ``DLSCALE_STOP_EXIT_CODE`` (default 75; a stop while it
    connects to Ray exits so before starting the run: ``dlscale: stopped before training
    started exit_code=C``); a malformed
    environment exits with 2; a failed run raises Ray's error. Connects to the cluster of
    ``RAY_ADDRESS`` (set by Ray's job supervisor) unless Ray is initialized already."""
    env = os.environ
    flag = install_stop_handler()  # first: a SIGTERM during the slow start below is a stop too
    try:
        code = stop_exit_code(env)
        watchdog_s = exit_watchdog_s(env)
        Allocation.from_env(env)
        if trainer_kwargs.get("scaling_config") is None:
            trainer_kwargs["scaling_config"] = scaling_config(cpus_per_worker=cpus_per_worker)
        if trainer_kwargs.get("run_config") is None:
            trainer_kwargs["run_config"] = run_config()
    except EnvError as exc:
        print(f"dlscale: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_ENV)

    import ray
    from ray.train.torch import TorchTrainer

    # ray.init() installs Ray's own SIGTERM handlers (the core worker's crash report; a Python one
    # that exits 15): the signals wait, blocked, until dlscale's handler is back (Ray's threads,
    # started meanwhile, keep them blocked and leave them to the main thread).
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        if not ray.is_initialized():
            ray.init()
        flag.reinstall()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if flag.is_set():  # stopped while connecting: no Train run to start (its checkpoint stands)
        print(f"dlscale: stopped before training started exit_code={code}", flush=True)
        arm_exit_watchdog(code, watchdog_s)
        flag.uninstall()
        sys.exit(code)
    stopper = _stop_signal_actor()
    trainer = TorchTrainer(_worker_main(train_func, worker_env(env), stopper),
                           train_loop_config=train_loop_config, **trainer_kwargs)
    outcome: Dict[str, Any] = {}

    def run_fit() -> None:
        try:
            outcome["result"] = trainer.fit()
        except BaseException as exc:  # re-raised on the main thread
            outcome["error"] = exc

    # trainer.fit() blocks in ray.get; on its own thread, the main thread stays free to run the
    # signal handler at once and to pass the stop on (off the handler: it takes no lock).
    thread = threading.Thread(target=run_fit, name="dlscale-ray-fit", daemon=True)
    thread.start()
    told = False
    while thread.is_alive():
        thread.join(0.1)
        if flag.is_set() and not told:
            told = True
            stopper.set.remote()
    if "error" in outcome:
        flag.uninstall()
        raise outcome["error"]
    result = outcome["result"]
    end = getattr(result, "return_value", None) or {}
    state = end.get("state") if isinstance(end, dict) else None
    if state == "stopped":
        print(f"dlscale: stopped step={end['step']} samples_seen={end['samples_seen']} exit_code={code}",
              flush=True)
        # Leaving Ray (its atexit shutdown) must not hold the slot past the checkpoint.
        arm_exit_watchdog(code, watchdog_s)
        flag.uninstall()
        sys.exit(code)
    if state == "done":
        print(f"dlscale: done step={end['step']} samples_seen={end['samples_seen']}", flush=True)
    flag.uninstall()
    return result


# -- the workers ------------------------------------------------------------------------------
class _Launch:
    """What ``fit`` hands to its workers: the driver's ``DLSCALE_*`` and the stop signal; and
    the ``Job`` that ``init`` made in this worker."""

    env: Dict[str, str] = {}
    stopper: Any = None
    job: Optional[Job] = None


def _worker_main(train_func: Callable[..., Any], env: Dict[str, str], stopper: Any) -> Callable[[Any], Any]:
    takes_config = len(inspect.signature(train_func).parameters) > 0

    def dlscale_train_loop_per_worker(config: Any) -> Dict[str, Any]:
        _Launch.env, _Launch.stopper, _Launch.job = env, stopper, None
        state = "returned"  # train_func returned without job.finish()
        try:
            train_func(config) if takes_config else train_func()
            if _Launch.job is not None and _Launch.job.finished:
                state = "done"
        except Stopped:  # the job checkpointed through ray.train.report and left its loop
            state = "stopped"
        job = _Launch.job
        _Launch.job = None
        # Rank 0's return value is the driver's Result.return_value.
        return {"state": state, "step": job.step if job else None,
                "samples_seen": job.samples_seen if job else None}

    return dlscale_train_loop_per_worker


class RayStopFlag:
    """A ``Job``'s stop flag in a Train worker: set once the driver's stop signal actor is set.
    Rank 0 keeps one pending ``wait()`` call on it and looks whether it returned, without
    blocking (a local check); the other ranks learn of the stop in the ``Job``'s all-reduce."""

    def __init__(self, stopper: Any, chief: bool) -> None:
        self._pending = stopper.wait.remote() if stopper is not None and chief else None
        self._set = False
        self._next_look = 0.0

    def is_set(self) -> bool:
        if self._set or self._pending is None:
            return self._set
        now = time.monotonic()
        if now < self._next_look:
            return False
        self._next_look = now + _STOP_POLL_S
        import ray

        ready, _ = ray.wait([self._pending], timeout=0)
        if ready:
            # Returned (stop), or the actor is gone with its driver (the run ends anyway): a
            # checkpoint now loses nothing.
            self._set = True
        return self._set

    def set(self, signum: Optional[int] = None) -> None:
        self._set = True

    def uninstall(self) -> None:
        pass


class RayTrainStore:
    """A ``Job``'s checkpoints through Ray Train's API: ``save`` is ``ray.train.report`` on every
    rank (rank 0 with a ``Checkpoint`` holding the job's state as ``dlscale.pt``; Ray copies it
    to ``storage_path/name/checkpoint-step-<10 digits>`` and keeps the newest two);
    ``load_latest`` reads ``ray.train.get_checkpoint()``, the run's newest, on every rank."""

    sharded = False

    def __str__(self) -> str:
        return "Ray Train's checkpoints of the run"

    def load_latest(self) -> Optional[Tuple[str, Dict[str, Any]]]:
        import ray.train
        import torch

        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as directory:
            path = os.path.join(directory, CHECKPOINT_FILE)
            state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
            raise RuntimeError(f"{checkpoint.path} holds no dlscale checkpoint ({CHECKPOINT_FILE})")
        return checkpoint.path, state

    def save(self, step: int, state: Callable[[], Dict[str, Any]], *, chief: bool,
             sharded: bool = False) -> Optional[str]:
        import ray.train

        if sharded:
            raise NotImplementedError("sharded models are not checkpointed through Ray Train yet")
        metrics: Dict[str, Any] = {"step": step}
        if not chief:
            ray.train.report(metrics, checkpoint=None)  # a barrier: every rank reports
            return None
        import torch

        saved = state()
        metrics.update(samples_seen=saved["samples_seen"], batch_size=saved["batch_size"],
                       world_size=saved["world_size"])
        name = f"checkpoint-step-{step:010d}"
        tmp = tempfile.mkdtemp(prefix="dlscale-ckpt-")
        try:
            path = os.path.join(tmp, CHECKPOINT_FILE)
            torch.save(saved, path)
            check_loadable(path)  # refused now, not found unloadable by the relaunch
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
                             checkpoint_dir_name=name)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return name


def init(**job_kwargs: Any) -> Job:
    """This Train worker's ``dlscale.Job`` (call it in ``train_func``, on every worker): the
    allocation from the driver's ``DLSCALE_*`` with rank, local rank and world size from
    ``ray.train.get_context()``; checkpoints through Ray Train (``RayTrainStore``); the stop from
    the driver (``RayStopFlag``), after which ``job.step_done()`` raises ``dlscale.Stopped`` once
    every rank has checkpointed, and ``fit``'s wrapper returns. ``job_kwargs`` are ``Job``'s
    (``log_every``, ``checkpoint_every``, ...). A malformed allocation raises ``EnvError``."""
    import ray.train

    context = ray.train.get_context()
    env = dict(os.environ)
    env.update(_Launch.env)
    env.update(RANK=str(context.get_world_rank()), LOCAL_RANK=str(context.get_local_rank()),
               WORLD_SIZE=str(context.get_world_size()))
    chief = context.get_world_rank() == 0
    job = Job(environ=env, store=RayTrainStore(), stop_flag=RayStopFlag(_Launch.stopper, chief),
              exit_on_stop=False, **job_kwargs)
    _Launch.job = job
    return job
