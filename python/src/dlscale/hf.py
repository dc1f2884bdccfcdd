"""dlscale for the Hugging Face ``transformers.Trainer``: one added line.

    trainer = Trainer(model=model, args=TrainingArguments(..., max_steps=N), train_dataset=ds)
    dlscale.hf.prepare(trainer, base_batch=32)
    trainer.train()

A callback alone cannot do it: the train dataloader is built (and given to accelerate) before any
callback runs, and no callback sees a step's loss. ``prepare`` gives the trainer the job's loader
and a ``training_step`` that keeps each step's loss, turns off the Trainer's own checkpoints
(dlscale's are the ones resumed from) and adds ``DlscaleTrainerCallback`` for the rest.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

from transformers import TrainerCallback
from transformers.trainer_utils import SaveStrategy

import dlscale


class Passes:
    """The job's loader without a length: the Trainer then counts ``max_steps`` (one of its
    epochs per loader pass, however long) instead of fixing its epochs from the first pass's
    length, which a rebatch changes. Yields nothing once the job has ``max_steps`` steps (a
    relaunch of a job that had finished)."""

    def __init__(self, job: Any, loader: Any, max_steps: int) -> None:
        self.job, self.loader, self.max_steps = job, loader, max_steps

    def __iter__(self) -> Iterator[Any]:
        if self.job.step >= self.max_steps:
            return iter(())
        return iter(self.loader)


class DlscaleTrainerCallback(TrainerCallback):
    """Resumes the model, optimizer and scheduler the Trainer built from the job's newest
    checkpoint when training begins (its step counters with them), calls ``job.step_done(loss)``
    after each optimizer step and finishes the job at the end. Added by ``prepare``."""

    def __init__(self, job: Any, trainer: Any, base_batch: int, lr_rule: str,
                 grad_noise_init_batch: Optional[int]) -> None:
        self.job, self.trainer, self.base_batch, self.lr_rule = job, trainer, base_batch, lr_rule
        self.grad_noise_init_batch = grad_noise_init_batch
        self.loss: Any = None  # this step's loss, summed over its micro-steps: a tensor
        self._finished = False

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       lr_scheduler: Any = None, **kwargs: Any) -> None:
        # The scheduler exists now (the Trainer makes it lazily, from the base LR), and the
        # model is wrapped (DDP) already.
        job, trainer = self.job, self.trainer
        job.resume(model, optimizer, base_batch=self.base_batch, lr_rule=self.lr_rule, scheduler=lr_scheduler)
        state.global_step = job.step
        self._set_epoch(state)
        # The logged loss is the sum since the last log over the steps since: both counters
        # must start at the resumed step. (transformers 5 keeps them here.)
        trainer._globalstep_last_logged = trainer._initial_global_step = job.step
        if self.grad_noise_init_batch and job.world_size > 1:
            job.measure_grad_noise(trainer.model_wrapped, init_batch_size=self.grad_noise_init_batch)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # After optimizer.step(), lr_scheduler.step() and global_step += 1.
        loss, self.loss = self.loss, None
        self.job.step_done(loss)
        self._set_epoch(state)
        control.should_save = False

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self._finished:
            self._finished = True
            self.job.finish()

    def _set_epoch(self, state: Any) -> None:
        state.epoch = self.job.samples_seen / len(self.trainer.train_dataset)


def prepare(trainer: Any, base_batch: Optional[int] = None, *, lr_rule: str = "linear", job: Any = None,
            measure_grad_noise: bool = True, grad_noise_init_batch: Optional[int] = None,
            **loader_kwargs: Any) -> Any:
    """Make ``trainer`` a dlscale job; returns the ``dlscale.Job``.

    ``base_batch``: the global batch the script's learning rate was tuned for; by default what
    its arguments give (per-device batch × world size × accumulation), which is only right at the
    world size it was written for. ``grad_noise_init_batch``: the job's initial batch ``B0``
    (default ``base_batch``); the noise scale is measured under DDP. ``loader_kwargs``: more
    DataLoader arguments than the Trainer's own (``data_collator``, ``dataloader_num_workers``,
    ``dataloader_pin_memory``, ...). ``TrainingArguments.max_steps`` must be set: with an
    elastic batch an epoch has no fixed number of steps."""
    job = job if job is not None else dlscale.init()
    args = trainer.args
    if args.max_steps is None or args.max_steps <= 0:
        raise ValueError("dlscale.hf: set TrainingArguments(max_steps=...): with an elastic batch an "
                         "epoch has no fixed number of steps")
    if args.gradient_accumulation_steps != 1 or job.alloc.accum_steps != 1:
        raise ValueError("dlscale.hf: gradient accumulation is not supported yet: use "
                         "gradient_accumulation_steps=1 and submit the job without max_accum_steps")
    if base_batch is None:
        base_batch = args.per_device_train_batch_size * job.world_size * args.gradient_accumulation_steps
    kwargs: dict = dict(collate_fn=trainer.data_collator, num_workers=args.dataloader_num_workers,
                        pin_memory=args.dataloader_pin_memory)
    if args.dataloader_num_workers > 0:
        kwargs.update(persistent_workers=args.dataloader_persistent_workers,
                      prefetch_factor=args.dataloader_prefetch_factor)
    kwargs.update(loader_kwargs)
    # The job's loader, not accelerate's: preparing a DataLoader would shard its batches again;
    # anything else it passes through.
    passes = Passes(job, job.loader(trainer.train_dataset, seed=args.seed, **kwargs), args.max_steps)
    trainer.get_train_dataloader = lambda: passes
    args.save_strategy = SaveStrategy.NO
    callback = DlscaleTrainerCallback(job, trainer, base_batch, lr_rule,
                                      (grad_noise_init_batch or base_batch) if measure_grad_noise else None)
    trainer.add_callback(callback)
    training_step = trainer.training_step

    def training_step_keeping_the_loss(*a: Any, **kw: Any) -> Any:
        loss = training_step(*a, **kw)
        callback.loss = loss if callback.loss is None else callback.loss + loss
        return loss

    trainer.training_step = training_step_keeping_the_loss
    return job
