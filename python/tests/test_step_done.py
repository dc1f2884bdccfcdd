"""``step_done`` is the one call per step: under torch.distributed the ranks agree on a stop in one
all-reduce at sync points about ``STOP_CHECK_S`` apart (no collective, no host sync in between),
and every rank stops after the same step with a checkpoint."""
import json
import time

from conftest import require

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import dlscale.job  # noqa: E402
from dlscale import STOP_CHECK_S, Allocation, Job, load_latest_checkpoint  # noqa: E402

STEP_S = 0.005
SIGTERM_AT = 30


def worker(rank, world, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=world)
    alloc = Allocation(job_id="d", rank=rank, local_rank=rank, world_size=world, local_batch_size=4,
                       batch_size=4 * world, checkpoint_dir=f"{out_dir}/ck", api=None, token=None)
    job = Job(alloc, log_every=10_000, install_signals=False, report_interval=0)
    model = torch.nn.Linear(2, 1)
    job.resume(model, torch.optim.SGD(model.parameters(), lr=0.1))
    collectives = []
    real = dlscale.job._all_reduce_max
    dlscale.job._all_reduce_max = lambda values: collectives.append(job.step) or real(values)
    signalled_s = None
    try:
        while True:
            time.sleep(STEP_S)
            loss = torch.tensor(float(job.step))
            job.step_done(loss)  # a tensor: summed where it lies
            if rank == 1 and job.step == SIGTERM_AT:
                job.stop_flag.set()  # the SIGTERM reaches one rank only
                signalled_s = time.monotonic()
    except SystemExit as exc:
        job.exit_watchdog.cancel()
        import signal

        signal.alarm(0)
        result = {"code": exc.code, "step": job.step, "collectives": collectives,
                  "stop_latency_s": None if signalled_s is None else time.monotonic() - signalled_s}
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(result, f)


def test_the_ranks_agree_on_a_stop_at_sync_points_without_a_collective_per_step(tmp_path):
    mp.start_processes(worker, args=(2, str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["code"] == ranks[1]["code"] == 75
    step = ranks[0]["step"]
    assert ranks[1]["step"] == step > SIGTERM_AT
    assert load_latest_checkpoint(str(tmp_path / "ck"))[1]["step"] == step
    # The ranks met at the same steps, far fewer than one per step.
    collectives = ranks[0]["collectives"]
    assert collectives == ranks[1]["collectives"]
    assert len(collectives) <= step // 5, collectives
    # The stop came at the first sync point after the signal: about STOP_CHECK_S later at most
    # (the checkpoint and a loaded machine's slower steps on top).
    assert ranks[1]["stop_latency_s"] < 4 * STOP_CHECK_S + 2.0
