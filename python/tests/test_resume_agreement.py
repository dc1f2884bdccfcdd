"""Ranks that would resume at different steps (their checkpoint directories differ), or a rank
that fails to load, would leave the others in collectives that never come; `Job.resume` says so
on every rank instead."""
import multiprocessing
import os
import time

from conftest import require

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, Job  # noqa: E402


def _alloc(rank, world, checkpoint_dir):
    return Allocation(job_id="agree", rank=rank, local_rank=rank, world_size=world,
                      local_batch_size=4, batch_size=4 * world, checkpoint_dir=checkpoint_dir,
                      api=None, token=None)


def _worker(rank, world, dirs, out_dir, widths):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank,
                            world_size=world)
    job = Job(_alloc(rank, world, dirs[rank]), install_signals=False)
    try:
        model = torch.nn.Linear(widths[rank], 1)
        outcome = f"resumed at {job.step}" if job.resume(model) else "fresh"
    except RuntimeError as exc:
        outcome = str(exc)
    with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
        f.write(outcome)
    dist.destroy_process_group()


def _run(dirs, out_dir, widths=(2, 2), timeout_s=120.0):
    out_dir.mkdir()
    multiprocessing.set_forkserver_preload([__name__])
    ctx = mp.start_processes(_worker, args=(len(dirs), dirs, str(out_dir), widths),
                             nprocs=len(dirs), join=False, start_method="forkserver")
    deadline = time.monotonic() + timeout_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            raise AssertionError(f"the ranks hung at resume (more than {timeout_s:.0f} s)")
    return [open(out_dir / f"rank{r}").read() for r in range(len(dirs))]


def test_ranks_that_disagree_or_fail_at_resume_are_told_so_and_agreeing_ones_resume(tmp_path):
    shared, empty = tmp_path / "shared", tmp_path / "empty"
    job = Job(_alloc(0, 1, str(shared)), install_signals=False)
    job.resume(torch.nn.Linear(2, 1))
    job.step = 5
    job.checkpoint()
    outcomes = _run([str(shared), str(shared)], tmp_path / "a")
    assert outcomes == ["resumed at 5", "resumed at 5"], outcomes
    outcomes = _run([str(shared), str(empty)], tmp_path / "b")
    for outcome in outcomes:
        assert "ranks resumed at different steps (0 to 5)" in outcome, outcomes
    # A rank whose model does not fit the checkpoint fails with its own error; its peer is told.
    outcomes = _run([str(shared), str(shared)], tmp_path / "c", widths=(2, 3))
    assert outcomes[0] == "another rank failed to load its checkpoint (see its log)", outcomes
    assert "size mismatch" in outcomes[1], outcomes
