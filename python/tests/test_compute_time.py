"""The compute time of a step, as the DDP hook measures it, against known compute and sync.

Two gloo workers on CPU train a layer whose backward pass sleeps ``COMPUTE_S`` (the compute) under
a communication hook that sleeps ``SYNC_S`` before its all-reduce (a slow link that compute does
not hide). The reported ``compute_time_s`` must hold the compute and leave the sync out, per
micro-step under ``no_sync`` accumulation, and leave out what ``step_done`` itself does (a
checkpoint that takes ``CHECKPOINT_S``).
"""
import contextlib
import json
import multiprocessing
import os
import time

import pytest

from conftest import require, slow_backward

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, Job  # noqa: E402

COMPUTE_S, SYNC_S, STEPS, D = 0.04, 0.12, 12, 4
CHECKPOINT_S = 0.12


SlowBackward = slow_backward(COMPUTE_S)


def slow_allreduce(_state, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    time.sleep(SYNC_S)
    return allreduce_hook(None, bucket)


class SlowState:
    """A stateful object whose ``state_dict()`` takes ``CHECKPOINT_S``: a slow checkpoint."""

    def state_dict(self):
        time.sleep(CHECKPOINT_S)
        return {}

    def load_state_dict(self, state):
        pass


def worker(rank, world, micro, url, out_dir, checkpoint=False):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank,
                            world_size=world)
    alloc = Allocation(job_id="timing", rank=rank, local_rank=rank, world_size=world,
                       local_batch_size=8, batch_size=8 * world,
                       checkpoint_dir=os.path.join(out_dir, "ckpt") if checkpoint else None,
                       api=url, token=None, accum_steps=micro)
    job = Job(alloc, log_every=STEPS, checkpoint_every=1 if checkpoint else 0, report_interval=0,
              install_signals=False)
    model = torch.nn.Linear(D, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    job.resume(model, slow=SlowState())
    job.measure_grad_noise(ddp, init_batch_size=8, comm_hook=None if checkpoint else slow_allreduce)
    x, y = torch.randn(8, D), torch.randn(8)
    step_s = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        ddp.zero_grad(set_to_none=True)
        for k, (xs, ys) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
            sync = contextlib.nullcontext() if k == micro - 1 else ddp.no_sync()
            with sync:
                loss = (SlowBackward.apply(ddp(xs)).squeeze(1) - ys).square().mean() / micro
                loss.backward()
        job.step_done(loss=loss.item())
        step_s.append(time.perf_counter() - t0)
    job.finish()
    if rank == 0:
        with open(os.path.join(out_dir, "steps.json"), "w") as f:
            json.dump(step_s, f)
    dist.destroy_process_group()


def run(tmp_path, metrics_server, micro, checkpoint=False):
    """Two workers' run: the last reported compute time, and the median step's seconds (warm-up
    and all)."""
    multiprocessing.set_forkserver_preload(["torch._dynamo", __name__])
    mp.start_processes(worker, args=(2, micro, metrics_server.url, str(tmp_path), checkpoint),
                       nprocs=2, join=True, start_method="forkserver")
    reports = [body for _, _, body in metrics_server.requests if body and "compute_time_s" in body]
    assert reports, metrics_server.requests
    with open(tmp_path / "steps.json") as f:
        steps = sorted(json.load(f))
    return reports[-1]["compute_time_s"], steps[len(steps) // 2]


@pytest.mark.parametrize("micro", [1, 2], ids=["one-micro-step", "two-micro-steps"])
def test_reports_carry_the_compute_time_without_the_sync(micro, tmp_path, metrics_server):
    compute_s, step_s = run(tmp_path, metrics_server, micro)
    print(f"\nmicro={micro}: step {step_s:.3f} s, compute per micro-step {compute_s:.3f} s")
    # Each micro-step's backward sleeps COMPUTE_S; the all-reduce's SYNC_S is not compute.
    assert step_s > micro * COMPUTE_S + SYNC_S
    assert COMPUTE_S <= compute_s < COMPUTE_S + SYNC_S / 2


def test_the_compute_time_leaves_out_what_step_done_does(tmp_path, metrics_server):
    # A checkpoint at every step, taking CHECKPOINT_S in step_done: no step's compute.
    compute_s, step_s = run(tmp_path, metrics_server, 1, checkpoint=True)
    assert step_s > COMPUTE_S + CHECKPOINT_S  # step_done did take its time
    assert COMPUTE_S <= compute_s < COMPUTE_S + CHECKPOINT_S / 2
