"""A sharded model (FSDP2's ``fully_shard``, gloo on CPU) is checkpointed with
``torch.distributed.checkpoint``: every rank writes its shards into a directory renamed into place
once all have written; a resume loads them back, at the same world size and resharded to another,
with the optimizer, the scheduler and the job's own state."""
import json

from conftest import require

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, Job, list_checkpoints  # noqa: E402


class History:
    """The user's own state, a dict of keys that grow: a loader of a template's keys would fill
    only the keys a fresh one has (none)."""

    def __init__(self):
        self.losses = {}  # by step

    def state_dict(self):
        return {"losses": dict(self.losses)}

    def load_state_dict(self, state):
        self.losses = dict(state["losses"])


def build(job_id, rank, world, out_dir, phase, sharded):
    """The model (each layer and the whole FSDP2-sharded when ``sharded``), its optimizer and
    scheduler, and the job, with its checkpoints in ``out_dir/ck``."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(phase)  # each phase builds other weights: only a resume makes them equal
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    if sharded:
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    alloc = Allocation(job_id=job_id, rank=rank, local_rank=rank, world_size=world,
                       local_batch_size=4, batch_size=4 * world, checkpoint_dir=f"{out_dir}/ck",
                       api=None, token=None)
    return model, optimizer, scheduler, Job(alloc, install_signals=False, report_interval=0)


def worker(rank, world, out_dir, phase):
    torch.set_num_threads(1)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous-{phase}", rank=rank,
                            world_size=world)
    model, optimizer, scheduler, job = build("s", rank, world, out_dir, phase, sharded=True)
    calls = []

    def step(batch):  # a device whose per-rank state shrinks as more ranks share the model
        calls.append(batch)
        if batch > 64 * world:
            raise torch.OutOfMemoryError(f"out of memory: {batch} samples on {world} ranks")

    if phase == 0:
        job.probe_max_local_batch(step, margin=1.0)  # before the model is known to be sharded
    history = History()
    added = {"added": History()} if phase > 0 else {}  # an object the checkpoint has no state for
    resumed = job.resume(model, optimizer, scheduler=scheduler, history=history, **added)
    known = job.probed_max_local_batch()
    probing_before = len(calls)
    probed = job.probe_max_local_batch(step, margin=1.0)
    probe = {"known": known, "probed": probed, "probed_again": len(calls) > probing_before}
    if phase == 0:
        torch.manual_seed(100 + rank)
        for _ in range(5):
            optimizer.zero_grad()
            model(torch.randn(4, 6)).pow(2).mean().backward()
            optimizer.step()
            scheduler.step()
            history.losses[str(job.step)] = float(job.step)
            job.step_done()
        job.extra["note"] = {"epoch": 3, "seen": torch.arange(3)}  # the user's own state
        job.checkpoint()
    with open(f"{out_dir}/draw{phase}-rank{rank}.json", "w") as f:
        json.dump(float(torch.rand(1)), f)  # what this rank's generator gives next
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    momentum = sorted(float(v["momentum_buffer"].full_tensor().abs().sum())  # collectives: every rank
                      for v in optimizer.state.values())
    if rank == 0:
        with open(f"{out_dir}/phase{phase}.json", "w") as f:
            note = job.extra.get("note")
            json.dump({"resumed": resumed, "probe": probe,
                       "note": note and [note["epoch"], note["seen"].tolist()],
                       "history": history.losses, "step": job.step, "samples_seen": job.samples_seen,
                       "last_epoch": scheduler.last_epoch, "lr": optimizer.param_groups[0]["lr"],
                       "momentum": momentum,
                       "weights": {k: v.flatten().tolist() for k, v in full.items()}}, f)
    # Every rank done with the group before any tears it down: gloo aborts a process (SIGABRT,
    # "terminate called without an active exception") torn down while a peer still talks to it.
    dist.barrier()
    dist.destroy_process_group()


def test_a_sharded_model_resumes_from_its_shards_at_another_world_size(tmp_path):
    for phase, world in ((0, 2), (1, 2), (2, 1)):
        mp.start_processes(worker, args=(world, str(tmp_path), phase), nprocs=world, join=True,
                           start_method="spawn")
    saved, same, resharded = (json.loads((tmp_path / f"phase{p}.json").read_text()) for p in range(3))
    assert [path.rsplit("/", 1)[1] for _, path in list_checkpoints(str(tmp_path / "ck"))] == ["step-0000000005.dcp"]
    assert not saved["resumed"] and same["resumed"] and resharded["resumed"]
    for resumed in (same, resharded):
        assert resumed["weights"] == saved["weights"]
        assert (resumed["step"], resumed["samples_seen"], resumed["last_epoch"], resumed["lr"]) == (
            5, 40, 5, saved["lr"])
        assert resumed["momentum"] == saved["momentum"]
    # Each rank's generator is its own, resumed: rank r draws what it would have drawn.
    drawn = {(p, r): json.loads((tmp_path / f"draw{p}-rank{r}.json").read_text())
             for p, world in ((0, 2), (1, 2), (2, 1)) for r in range(world)}
    assert drawn[(1, 0)] == drawn[(0, 0)] and drawn[(1, 1)] == drawn[(0, 1)] != drawn[(0, 0)]
    assert drawn[(2, 0)] == drawn[(0, 0)]
    # A sharded model's memory limit is its world size's: kept across a relaunch at the same
    # size (and across the resume of a run that probed first), probed again at another.
    assert saved["probe"] == {"known": 128, "probed": 128, "probed_again": False}
    assert same["probe"] == {"known": 128, "probed": 128, "probed_again": False}
    assert resharded["probe"] == {"known": None, "probed": 64, "probed_again": True}
    # The user's own `extra` comes back whatever its keys (the loader fills known keys only).
    assert same["note"] == resharded["note"] == [3, [0, 1, 2]]
    # And so does an object's state of any length; one added since starts afresh.
    assert saved["history"] == same["history"] == resharded["history"] == {
        str(k): float(k) for k in range(5)}


def old_format_worker(rank, world, out_dir):
    from torch.distributed.fsdp import fully_shard

    from dlscale.checkpoint import save_sharded_checkpoint

    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous-old", rank=rank,
                            world_size=world)
    model = torch.nn.Linear(3, 1)
    fully_shard(model)
    alloc = Allocation(job_id="s", rank=rank, local_rank=rank, world_size=world, local_batch_size=4,
                       batch_size=4 * world, checkpoint_dir=f"{out_dir}/ck", api=None, token=None)
    job = Job(alloc, install_signals=False, report_interval=0)
    history = History()
    job.resume(model, history=history)
    job.step, job.samples_seen = 7, 28
    history.losses = {"5": 5.0, "6": 6.0}
    # What the version before per-rank generators and packed `extra` wrote: no `rng_by_rank`,
    # `extra` a dict (of no keys, as its loader could restore no other).
    old = job.state_dict()
    del old["rng_by_rank"]
    old["extra"] = {}
    old["objects"] = {"history": history.state_dict()}  # its values one by one
    save_sharded_checkpoint(f"{out_dir}/ck", 7, old)
    again = Job(alloc, install_signals=False, report_interval=0)
    restored = History()
    restored.losses = {"5": 0.0, "6": 0.0}  # the saved keys: what the older version needed
    resumed = again.resume(model, history=restored)
    if rank == 0:
        with open(f"{out_dir}/old.json", "w") as f:
            json.dump({"resumed": resumed, "step": again.step, "extra": again.extra,
                       "history": restored.losses}, f)
    dist.barrier()
    dist.destroy_process_group()


def test_a_sharded_checkpoint_of_the_older_format_resumes(tmp_path):
    mp.start_processes(old_format_worker, args=(2, str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    assert json.loads((tmp_path / "old.json").read_text()) == {
        "resumed": True, "step": 7, "extra": {}, "history": {"5": 5.0, "6": 6.0}}


def mixed_worker(rank, world, out_dir, phase, steps):
    """A job sharded only when it has more than one rank (FSDP2 when world_size > 1, the plain
    model alone): ``steps`` steps from its newest checkpoint, of either kind, then a checkpoint."""
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous-{phase}", rank=rank,
                                world_size=world)
    model, optimizer, scheduler, job = build("m", rank, world, out_dir, phase, sharded=world > 1)

    def full(value):  # a DTensor's whole value (a collective), a tensor's as it is
        return (value.full_tensor() if hasattr(value, "full_tensor") else value).flatten().tolist()

    def snapshot():  # the state every rank must resume to, by parameter name
        names = {p: n for n, p in model.named_parameters()}
        return {"step": job.step, "samples_seen": job.samples_seen, "extra": job.extra.get("seen"),
                "last_epoch": scheduler.last_epoch, "lr": optimizer.param_groups[0]["lr"],
                "weights": {n: full(p.detach()) for n, p in model.named_parameters()},
                "momentum": {names[p]: full(s["momentum_buffer"]) for p, s in optimizer.state.items()}}

    resumed = job.resume(model, optimizer, scheduler=scheduler)
    at_resume = snapshot()
    torch.manual_seed(100 + rank)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(4, 6)).pow(2).mean().backward()
        optimizer.step()
        scheduler.step()
        job.step_done()
    job.extra["seen"] = job.step
    at_end = snapshot()
    job.checkpoint()
    if rank == 0:
        with open(f"{out_dir}/mixed{phase}.json", "w") as f:
            json.dump({"resumed": resumed, "at_resume": at_resume, "at_end": at_end}, f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run_mixed(tmp_path, phase, world, steps):
    mp.start_processes(mixed_worker, args=(world, str(tmp_path), phase, steps), nprocs=world, join=True,
                       start_method="spawn")
    return json.loads((tmp_path / f"mixed{phase}.json").read_text())


def checkpoint_names(tmp_path):
    return [path.rsplit("/", 1)[1] for _, path in list_checkpoints(str(tmp_path / "ck"))]


def test_a_job_sharded_before_resumes_unsharded_from_its_newer_sharded_checkpoint(tmp_path):
    # An older unsharded checkpoint beside the sharded one: the newest, of either kind, is taken.
    run_mixed(tmp_path, 0, 1, 1)
    sharded = run_mixed(tmp_path, 1, 2, 3)
    assert checkpoint_names(tmp_path) == ["step-0000000004.dcp", "step-0000000001.pt"]
    plain = run_mixed(tmp_path, 2, 1, 2)
    assert plain["resumed"] and plain["at_resume"] == sharded["at_end"]  # no step repeated
    assert plain["at_resume"]["step"] == 4 and plain["at_resume"]["extra"] == 4
    # Its checkpoint's pruning keeps the sharded one it resumed from.
    assert checkpoint_names(tmp_path) == ["step-0000000006.pt", "step-0000000004.dcp"]


def test_a_job_unsharded_before_resumes_sharded_from_its_newer_unsharded_checkpoint(tmp_path):
    run_mixed(tmp_path, 0, 2, 1)
    plain = run_mixed(tmp_path, 1, 1, 3)
    assert checkpoint_names(tmp_path) == ["step-0000000004.pt", "step-0000000001.dcp"]
    sharded = run_mixed(tmp_path, 2, 2, 2)
    assert sharded["resumed"] and sharded["at_resume"] == plain["at_end"]
    assert sharded["at_resume"]["step"] == 4 and sharded["at_resume"]["extra"] == 4
    assert checkpoint_names(tmp_path) == ["step-0000000006.dcp", "step-0000000004.pt"]
