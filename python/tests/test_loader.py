"""``job.loader``: a real DataLoader (workers, pinned memory, a collate_fn) whose batches are this
rank's share of the job's sample stream, through in-place rebatches, lookahead, resumes at other
sizes and several ranks; every sample is trained exactly once per epoch."""
import json

import pytest
from conftest import require

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, ElasticSampler, Job, load_latest_checkpoint  # noqa: E402

N = 50  # dataset size: batches straddle the epoch boundaries


class Indexed(torch.utils.data.Dataset):
    """Sample i is (i as a float tensor, i): the batches say which samples they hold."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor([float(i)]), i


def collate(samples):
    """A custom collate_fn: the inputs stacked, the indices as a plain list."""
    return {"x": torch.stack([x for x, _ in samples]), "index": [i for _, i in samples]}


def job_with(tmp_path, world=1, rank=0, local=4, sample_log=None):
    alloc = Allocation(job_id="l", rank=rank, local_rank=rank, world_size=world, local_batch_size=local,
                       batch_size=local * world, checkpoint_dir=str(tmp_path / "ck"), api=None, token=None)
    env = {"DLSCALE_SAMPLE_LOG": sample_log} if sample_log else {}
    return Job(alloc, log_every=5, install_signals=False, report_interval=0, environ=env)


def answer(job, batch, local, micro=1):
    job.reporter._take_answer(json.dumps({"accepted": True, "batch": {
        "batch_size": batch, "local_batch_size": local, "micro_steps": micro}}).encode())


def model_and_optimizer():
    model = torch.nn.Linear(1, 1)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def train(job, loader, steps, seen, lookahead=False):
    """``steps`` steps through ``loader`` (passes end at epochs), the indices of each appended
    to ``seen``. ``lookahead``: fetch the next batch before the step is counted, as Lightning's
    fetcher does; the last one fetched is then handed out and never trained."""
    done = 0
    while done < steps:
        it = iter(loader)
        batch = next(it, None)
        while batch is not None and done < steps:
            ahead = next(it, None) if lookahead else None
            seen.extend(batch["index"])
            job.step_done(loss=torch.tensor(1.0))
            done += 1
            if done < steps:
                batch = ahead if lookahead else next(it, None)


def assert_each_sample_once_per_epoch(seen):
    for lo in range(0, len(seen), N):
        block = seen[lo:lo + N]
        assert len(set(block)) == len(block), f"repeated in epoch {lo // N}: {block}"


def test_batches_follow_the_stream_through_workers_rebatches_and_a_resume(tmp_path):
    job = job_with(tmp_path)
    model, optimizer = model_and_optimizer()
    job.resume(model, optimizer)
    kwargs = dict(num_workers=2, pin_memory=True, collate_fn=collate, persistent_workers=True,
                  prefetch_factor=4)
    loader = job.loader(Indexed(), seed=7, **kwargs)
    assert len(loader) == -(-N // 4)
    seen = []
    train(job, loader, 5, seen)
    answer(job, 6, 6)  # taken at the window's end (step 10), while the workers hold old batches
    train(job, loader, 10, seen)
    assert job.batch_size == 6 and job.step == 15
    job.checkpoint()
    stream = ElasticSampler(N, seed=7).stream(0, len(seen))
    assert seen == stream, "a rebatch must not lose or repeat prefetched samples"
    assert job.samples_seen == 10 * 4 + 5 * 6

    # Resume at another batch: the loader starts at the exact sample.
    job2 = job_with(tmp_path, local=9)
    model2, optimizer2 = model_and_optimizer()
    job2.resume(model2, optimizer2)
    loader2 = job2.loader(Indexed(), seed=7, **kwargs)
    assert loader2.epoch == job.samples_seen // N
    train(job2, loader2, 7, seen)
    assert seen == ElasticSampler(N, seed=7).stream(0, len(seen))
    assert_each_sample_once_per_epoch(seen)


def test_a_batch_fetched_ahead_is_trained_at_its_own_size(tmp_path):
    job = job_with(tmp_path)
    model, optimizer = model_and_optimizer()
    job.resume(model, optimizer)
    loader = job.loader(Indexed(), seed=3, collate_fn=collate)
    seen = []
    answer(job, 8, 8)
    train(job, loader, 12, seen, lookahead=True)
    # The batch fetched ahead of the rebatch at step 5 is counted with its 4 samples.
    assert job.samples_seen == 6 * 4 + 6 * 8
    assert seen == ElasticSampler(N, seed=3).stream(0, job.samples_seen)


def test_each_pass_ends_with_its_epoch(tmp_path):
    job = job_with(tmp_path, local=8)
    model, optimizer = model_and_optimizer()
    job.resume(model, optimizer)
    loader = job.loader(Indexed(), shuffle=False, collate_fn=collate)
    for epoch in range(3):
        assert loader.epoch == epoch
        expected, passes = len(loader), 0
        for batch in loader:
            assert batch["index"] == [(job.samples_seen + i) % N for i in range(8)]
            job.step_done()
            passes += 1
        assert passes == expected
        # The pass's last batch straddles the epoch's end: the next pass starts after it.
        assert job.samples_seen - 8 < (epoch + 1) * N <= job.samples_seen


def test_arguments_the_job_chooses_are_refused(tmp_path):
    job = job_with(tmp_path)
    with pytest.raises(ValueError, match="drop batch_size, drop_last"):
        job.loader(Indexed(), batch_size=4, drop_last=True)


def test_a_dataset_without_samples_to_cut_is_refused_by_name(tmp_path):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(10))

    job = job_with(tmp_path)
    with pytest.raises(TypeError, match="map-style dataset.*Stream has no length"):
        job.loader(Stream())
    with pytest.raises(ValueError, match=r"the dataset \(list\) is empty"):
        job.loader([])


def test_the_sample_log_records_what_each_step_trained(tmp_path):
    log = tmp_path / "samples"
    job = job_with(tmp_path, local=6, sample_log=str(log))
    model, optimizer = model_and_optimizer()
    job.resume(model, optimizer)
    seen = []
    train(job, job.loader(Indexed(), collate_fn=collate), 12, seen)
    job._close()
    rows = [json.loads(line) for line in (tmp_path / "samples.rank0").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [i for r in rows for i in r["indices"]] == seen
    assert [r["offset"] for r in rows] == [6 * k for k in range(12)]


def rank_worker(rank, world, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=world)
    import pathlib

    job = job_with(pathlib.Path(out_dir), world=world, rank=rank, local=3)
    model, optimizer = model_and_optimizer()
    job.resume(model, optimizer)
    if rank == 0:
        answer(job, 10, 5)
    seen = []
    train(job, job.loader(Indexed(), seed=11, collate_fn=collate, num_workers=1), 14, seen)
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump({"seen": seen, "samples_seen": job.samples_seen, "batch": job.batch_size}, f)
    dist.destroy_process_group()


def test_each_rank_takes_its_share_of_every_global_batch(tmp_path):
    mp.start_processes(rank_worker, args=(2, str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["samples_seen"] == ranks[1]["samples_seen"] == 5 * 6 + 9 * 10
    assert ranks[0]["batch"] == 10
    stream = ElasticSampler(N, seed=11).stream(0, ranks[0]["samples_seen"])
    merged, at = [], {0: 0, 1: 0}
    for local in [3] * 5 + [5] * 9:
        for r in range(2):
            merged.extend(ranks[r]["seen"][at[r]:at[r] + local])
            at[r] += local
    assert merged == stream
    assert_each_sample_once_per_epoch(merged)



_WITH_WORKERS = r"""
import sys
import dlscale, torch
job = dlscale.init(log_every=1)
model = torch.nn.Linear(1, 1)
job.resume(model, torch.optim.SGD(model.parameters(), lr=0.1))
loader = job.loader(list(range(1000)), num_workers=2, persistent_workers=True)
while job.step < int(sys.argv[1]):
    for batch in loader:
        job.step_done()
        if job.step == int(sys.argv[1]):
            break
job.finish()
"""


def test_a_signal_to_the_process_group_stops_at_a_checkpoint_not_in_a_dead_worker(tmp_path):
    import os
    import signal
    import sys

    from conftest import Proc, clean_env

    # A watchdog far beyond a clean exit, even on a loaded machine: workers left behind would
    # hold the exit until it fires, and the wait below would run out first.
    env = clean_env(DLSCALE_CHECKPOINT_DIR=str(tmp_path), DLSCALE_LOCAL_BATCH_SIZE="4",
                    DLSCALE_EXIT_WATCHDOG_S="300")
    proc = Proc([sys.executable, "-c", _WITH_WORKERS, "1000000"], env)
    proc.wait_for(r"dlscale: step=(\d+)", 60, lambda m: int(m.group(1)) >= 20)
    os.killpg(proc.p.pid, signal.SIGTERM)  # as a launcher does: the workers get it too
    step = int(proc.wait_for(r"dlscale: stopped step=(\d+)", 30).group(1))
    # Its workers were ended at exit, not left for the exit watchdog.
    assert proc.wait(120) == 75, proc.output
    assert "exit watchdog" not in proc.output, proc.output
    assert load_latest_checkpoint(str(tmp_path))[1]["step"] == step
    assert "Traceback" not in proc.output


def test_a_finished_job_with_persistent_workers_exits(tmp_path):
    import subprocess
    import sys

    from conftest import clean_env

    env = clean_env(DLSCALE_CHECKPOINT_DIR=str(tmp_path), DLSCALE_LOCAL_BATCH_SIZE="4")
    done = subprocess.run([sys.executable, "-c", _WITH_WORKERS, "300"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "dlscale: done step=300" in done.stdout


def test_starting_a_pass_draws_nothing_from_the_global_rng(tmp_path):
    # A resumed run restores the RNG, then starts a pass: dropout and augmentation must draw
    # what they drew in a run never stopped.
    job = job_with(tmp_path)
    loader = job.loader(Indexed(), collate_fn=collate)
    torch.manual_seed(5)
    next(iter(loader))
    drawn = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(drawn, torch.rand(3))


def test_a_pass_after_close_with_persistent_workers_starts_new_ones(tmp_path):
    job = job_with(tmp_path)
    loader = job.loader(list(range(40)), shuffle=False, num_workers=1, persistent_workers=True)
    first = next(iter(loader))
    job.step_done()
    loader.close()
    # The next pass: new workers, from the first sample no step counted.
    second = next(iter(loader))
    assert first.tolist() == [0, 1, 2, 3] and second.tolist() == [4, 5, 6, 7]
    loader.close()


class Augmented(torch.utils.data.Dataset):
    """Sample i with a random augmentation drawn in the DataLoader's worker (its torch RNG)."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.rand(())


def test_workers_draw_apart_on_every_rank_and_after_a_resume(tmp_path):
    # The workers' RNGs are seeded from the DataLoader's generator: seeded alike on every rank
    # and at every launch, each rank's workers would draw the same augmentations as every other
    # rank's, and a relaunch the same as the launch before it drew from its start.
    def first_draws(job):
        return next(iter(job.loader(Augmented(), seed=7, num_workers=1))).tolist()

    ranks = [first_draws(job_with(tmp_path / f"r{r}", world=2, rank=r)) for r in range(2)]
    assert ranks[0] != ranks[1], "two ranks' workers drew the same augmentations"

    job = job_with(tmp_path)
    model, optimizer = model_and_optimizer()
    job.resume(model, optimizer)
    loader = job.loader(Augmented(), seed=7, num_workers=1)
    first = next(iter(loader)).tolist()
    job.step_done()
    job.checkpoint()
    job2 = job_with(tmp_path)
    job2.resume(*model_and_optimizer())
    resumed = first_draws(job2)
    assert resumed != first, "a resumed run's workers drew again what the first launch drew"
    # Where the workers start decides their seeds: a resume from the same checkpoint draws alike.
    job3 = job_with(tmp_path)
    job3.resume(*model_and_optimizer())
    assert first_draws(job3) == resumed


def test_a_step_counts_the_batch_the_loader_handed_out_whatever_samples_it_is_given(tmp_path):
    # step_done(samples=...) counts a step's samples for a loop that cuts its own batches; a
    # batch from job.loader is counted as what it took from the stream, else the stream position
    # moves off it (here the loop counts its own rank's samples) and samples are served again.
    job = job_with(tmp_path, world=2, rank=0, local=4)
    loader = job.loader(Indexed(), seed=5, collate_fn=collate)
    seen = []
    for _ in range(2):
        for batch in loader:
            seen.extend(batch["index"])
            job.step_done(samples=len(batch["index"]))
    assert job.samples_seen == 8 * len(seen) // 4
    stream = ElasticSampler(N, seed=5).stream(0, job.samples_seen)
    assert seen == [i for lo in range(0, len(stream), 8) for i in stream[lo:lo + 4]]


def test_batches_out_of_order_are_refused_by_name(tmp_path):
    # in_order=False hands out whichever batch a worker finished first, while the job counts the
    # batches in stream order: a slow first batch made the next pass serve the second again and
    # never the first.
    job = job_with(tmp_path)
    with pytest.raises(ValueError, match="in_order=False"):
        job.loader(Indexed(), num_workers=2, in_order=False)
    job.loader(Indexed(), num_workers=2, in_order=True)  # the DataLoader's default
