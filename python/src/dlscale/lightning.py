"""dlscale for PyTorch Lightning: a callback that makes a ``Trainer.fit`` a dlscale job.

    from dlscale.lightning import DlscaleCallback
    dls = DlscaleCallback(base_batch=32)          # dlscale.init(): the allocation, the SIGTERM handler
    trainer = L.Trainer(..., callbacks=[dls])
    trainer.fit(model, train_dataloaders=dls.job.loader(dataset, num_workers=2))

The loader is not a ``torch.utils.data.DataLoader``: Lightning passes it through as it is (no
``DistributedSampler`` put in, whatever ``use_distributed_sampler`` says), and it has a length, so
Lightning fetches no batch ahead; after a batch changed in place, Lightning's count of the epoch's
batches is set to what the pass has left, so its epochs still end with the data's (epoch-wise
schedulers, validation). ``max_steps`` counts the job's steps, whatever their batch;
Lightning's epochs are the loader's passes (``current_epoch`` starts again at 0 after a resume).
"""
from __future__ import annotations

import signal
from typing import Any, Optional

import lightning.pytorch as pl

import dlscale
from dlscale.loader import ElasticLoader


class DlscaleCallback(pl.Callback):
    """Resumes the model, optimizers, schedulers and ``objects`` from the job's newest checkpoint
    when ``fit`` starts (and Lightning's step counters with them, so ``max_steps`` and step-wise
    schedules go on), keeps the learning rates scaled for the job's batch from ``base_batch`` by
    ``lr_rule``, calls ``job.step_done(loss)`` after each optimizer step (a stop at SIGTERM
    checkpoints and exits there; a batch changed in place is taken there, and the loader
    follows), measures the gradient noise scale under DDP (``grad_noise_init_batch``: the
    job's initial batch ``B0``, default ``base_batch``) and finishes the job when ``fit`` ends.

    ``job``: a ``dlscale.Job`` (default ``dlscale.init(**init_kwargs)``). ``objects``: more
    stateful things to checkpoint (``state_dict``/``load_state_dict``)."""

    def __init__(self, base_batch: Optional[int] = None, *, lr_rule: str = "linear", job: Any = None,
                 measure_grad_noise: bool = True, grad_noise_init_batch: Optional[int] = None,
                 objects: Optional[dict] = None, **init_kwargs: Any) -> None:
        self.job = job if job is not None else dlscale.init(**init_kwargs)
        self.base_batch, self.lr_rule = base_batch, lr_rule
        self.measure_grad_noise = measure_grad_noise
        self.grad_noise_init_batch = grad_noise_init_batch or base_batch
        self.objects = dict(objects or {})
        self._stop_handler: Any = None
        self._finished = False

    def setup(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", stage: str) -> None:
        if stage != "fit":
            return
        if trainer.accumulate_grad_batches != 1 or self.job.alloc.accum_steps != 1:
            # Each loader batch would be one micro-batch while step_done() counts one of the k
            # batches handed out per optimizer step.
            raise ValueError("dlscale.lightning: gradient accumulation is not supported yet: use "
                             "accumulate_grad_batches=1 and submit the job without max_accum_steps")
        # A resume or a rebatch changes the loader's length: without this Lightning caps every
        # epoch at the first pass's length.
        trainer.reload_dataloaders_every_n_epochs = 1
        self._stop_handler = signal.getsignal(signal.SIGTERM)

    def on_fit_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        # The optimizers and schedulers exist, the model is wrapped, no batch is fetched yet.
        optimizers = list(trainer.optimizers)
        schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        objects = dict(self.objects)
        objects.update({f"optimizer{i}": o for i, o in enumerate(optimizers[1:], 1)})
        objects.update({f"scheduler{i}": s for i, s in enumerate(schedulers[1:], 1)})
        self.job.resume(pl_module, optimizers[0] if optimizers else None,
                        base_batch=self.base_batch if optimizers else None, lr_rule=self.lr_rule,
                        scheduler=schedulers[0] if schedulers else None, **objects)
        _set_global_step(trainer, self.job.step)
        if self.measure_grad_noise and self.grad_noise_init_batch and trainer.world_size > 1:
            # trainer.strategy.model: the DistributedDataParallel under strategy="ddp"
            self.job.measure_grad_noise(trainer.strategy.model, init_batch_size=self.grad_noise_init_batch)

    def on_train_start(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        # Lightning installed its own SIGTERM handler after on_fit_start: it broadcasts inside the
        # handler and makes the next batch raise without a checkpoint (under DDP a SIGTERM on one
        # rank deadlocked). dlscale's stop must be the one that runs.
        if self._stop_handler is not None:
            signal.signal(signal.SIGTERM, self._stop_handler)

    def on_train_batch_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule", outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        # After optimizer.step() and the step-wise scheduler: a checkpoint here is consistent.
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if self.job.step_done(loss):
            _count_the_rest_of_the_pass(trainer)

    def on_train_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._finish()

    def on_fit_end(self, trainer: "pl.Trainer", pl_module: "pl.LightningModule") -> None:
        self._finish()  # resumed at max_steps, fit skips training and on_train_end never runs

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.job.finish()


def _count_the_rest_of_the_pass(trainer: "pl.Trainer") -> None:
    """After a rebatch: Lightning ends an epoch at the batch count it took from ``len(loader)``
    when the epoch started, steps epoch-wise schedulers at that batch only and validates at a
    share of it (``val_check_interval``). The pass now has another number of batches left: a
    larger batch would end it before the count (no scheduler step, no validation that epoch), a
    smaller one the epoch before the data epoch (two steps in one, a validation in between).
    Lightning's counts (2.6: its fit loop's, data fetcher's and validation batch) follow the
    pass."""
    loop = trainer.fit_loop
    # Lightning's own attributes: where a version lacks one, its counts are left as they are.
    fetcher = getattr(loop, "_data_fetcher", None)
    combined = getattr(loop, "_combined_loader", None)
    loaders = getattr(combined, "flattened", None) or []
    if (fetcher is None or not hasattr(fetcher, "fetched") or not hasattr(loop, "max_batches")
            or len(loaders) != 1 or not isinstance(loaders[0], ElasticLoader)):
        return
    limit = trainer.limit_train_batches
    if not (isinstance(limit, float) and limit == 1.0):
        return  # epochs cut short on purpose: Lightning's count stays the user's
    left = loaders[0].batches_left()
    fetcher.length = fetcher.fetched + left
    loop.max_batches = loop.epoch_loop.batch_progress.current.ready + left
    if (isinstance(trainer.val_check_interval, float) and trainer.val_check_batch not in (None, float("inf"))
            and getattr(trainer, "_val_check_time_interval", None) is None):
        # As Lightning sets it from the epoch's batches (an int interval counts batches as given).
        trainer.val_check_batch = max(1, int(loop.max_batches * trainer.val_check_interval))


def _set_global_step(trainer: "pl.Trainer", step: int) -> None:
    """``trainer.global_step`` (``max_steps``, step-wise schedules, loggers) goes on from the
    checkpoint's step. Lightning keeps it in its fit loop's progress counters (2.6)."""
    loop = trainer.fit_loop.epoch_loop
    for total in (loop.automatic_optimization.optim_progress.optimizer.step.total,
                  loop.manual_optimization.optim_step_progress.total):
        total.ready = total.completed = step
    loop._batches_that_stepped = step
