"""Each rank's random generators (Python's, numpy's, torch's) are checkpointed and restored per
rank: a resume at the same world size draws on every rank what the run before it would have
drawn, and no two ranks draw alike after a resume at another world size (a rank the checkpoint's
run did not have gets streams of its own). With rank 0's state restored on every rank, every
rank's dropout masks and augmentations would be the same after each rescale."""
import json
import random

from conftest import require

torch = require("torch")
np = require("numpy")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, Job  # noqa: E402


def draws():
    """What this rank's generators give next."""
    return [random.random(), float(np.random.random()), float(torch.rand(1))]


def worker(rank, world, out_dir, phase):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous-{phase}", rank=rank,
                            world_size=world)
    # Each rank seeded apart, as data-parallel training code does; each phase seeded anew so
    # that only a resume can give back the draws of phase 0.
    random.seed(1000 * phase + rank)
    np.random.seed(1000 * phase + rank)
    torch.manual_seed(1000 * phase + rank)
    model = torch.nn.Linear(3, 1)
    alloc = Allocation(job_id="r", rank=rank, local_rank=rank, world_size=world, local_batch_size=2,
                       batch_size=2 * world, checkpoint_dir=f"{out_dir}/ck", api=None, token=None)
    job = Job(alloc, install_signals=False, report_interval=0)
    job.resume(model)
    if phase == 0:
        draws()  # the generators moved on from their seeds before the checkpoint
        job.step_done()
        job.checkpoint()
    with open(f"{out_dir}/phase{phase}-rank{rank}.json", "w") as f:
        json.dump(draws(), f)
    dist.destroy_process_group()


def test_each_rank_resumes_its_own_random_streams(tmp_path):
    worlds = {0: 2, 1: 2, 2: 3}
    for phase, world in worlds.items():
        mp.start_processes(worker, args=(world, str(tmp_path), phase), nprocs=world, join=True,
                           start_method="spawn")
    drawn = {(p, r): json.loads((tmp_path / f"phase{p}-rank{r}.json").read_text())
             for p, world in worlds.items() for r in range(world)}
    for rank in range(2):
        # Same world size: every rank goes on exactly where it was.
        assert drawn[(1, rank)] == drawn[(0, rank)]
        # A larger world: the ranks the run had go on where they were too.
        assert drawn[(2, rank)] == drawn[(0, rank)]
    # Every generator of every rank draws apart from every other rank's, after either resume.
    for phase, world in ((1, 2), (2, 3)):
        for g in range(3):
            values = [drawn[(phase, r)][g] for r in range(world)]
            assert len(set(values)) == world, (phase, g, values)
