"""A batch changed in place reaches every rank at the same step: rank 0 gets the server's
answer, the ranks agree on it in a collective (gloo workers on CPU)."""
import json
import multiprocessing
import time

from conftest import MetricsServer, require

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, Job  # noqa: E402

LOG_EVERY = 4


def worker(rank, world, url, out_dir, answered):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank,
                            world_size=world)
    alloc = Allocation(job_id="r", rank=rank, local_rank=rank, world_size=world, local_batch_size=8,
                       batch_size=8 * world, checkpoint_dir=None, api=url, token=None, attempt=1)
    job = Job(alloc, log_every=LOG_EVERY, report_interval=0, install_signals=False)
    taken = []
    for _ in range(6 * LOG_EVERY):
        job.step_done(loss=1.0)
        if job.step == LOG_EVERY and rank == 0:
            # Rank 0 holds the answer to its first report before the ranks look for one.
            deadline = time.monotonic() + 10
            while job.reporter.batch() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            answered.set()
        if job.step == LOG_EVERY:
            answered.wait(10)
        if job.rebatched():
            taken.append((job.step, job.batch_size, job.local_batch_size, job.alloc.accum_steps))
    job.reporter.close()
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"taken": taken, "samples_seen": job.samples_seen}, f)
    dist.destroy_process_group()


def test_every_rank_takes_the_answered_batch_at_the_same_step(tmp_path):
    server = MetricsServer()
    server.answer = json.dumps({"accepted": True, "batch": {
        "batch_size": 40, "local_batch_size": 20, "micro_steps": 2}}).encode()
    try:
        ctx = multiprocessing.get_context("spawn")
        answered = ctx.Manager().Event()
        mp.start_processes(worker, args=(2, server.url, str(tmp_path), answered), nprocs=2,
                           join=True, start_method="spawn")
        bodies = [b for _, _, b in server.requests]
    finally:
        server.close()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0] == ranks[1], ranks
    # The answer to the first window's report is there by the second window's end: taken there.
    assert ranks[0]["taken"] == [[2 * LOG_EVERY, 40, 20, 2]]
    assert ranks[0]["samples_seen"] == 2 * LOG_EVERY * 16 + 4 * LOG_EVERY * 40
    assert bodies[0]["batch_size"] == 16 and bodies[-1]["batch_size"] == 40
