"""``job.probe_max_local_batch``: the largest per-GPU batch a training step holds, found by
doubling and bisecting on the device's out-of-memory error, kept with a margin, reported to the
server with every report and kept in checkpoints (a relaunch does not probe again). The device
is simulated: a step that raises torch's OutOfMemoryError above a capacity; no GPU here."""
import json
import multiprocessing
import os

import pytest
from conftest import require, slow_backward

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, Job, metrics_payload  # noqa: E402


def job(tmp_path, local=32):
    """A one-worker job of per-GPU batch ``local``, checkpointing into ``tmp_path`` (None: no
    checkpoints)."""
    alloc = Allocation(job_id="p", rank=0, local_rank=0, world_size=1, local_batch_size=local,
                       batch_size=local, checkpoint_dir=tmp_path and str(tmp_path), api=None,
                       token=None)
    return Job(alloc, install_signals=False, report_interval=0)


def device(capacity, calls):
    def step(batch):
        calls.append(batch)
        if batch > capacity:
            raise torch.OutOfMemoryError(f"CUDA out of memory: tried {batch} samples")
    return step


@pytest.mark.parametrize("capacity,local", [(1000, 32), (300, 512), (1, 8), (37, 37), (5000, 1)])
def test_the_probe_finds_the_largest_batch_that_fits(tmp_path, capacity, local):
    calls = []
    j = job(tmp_path, local)
    assert j.probe_max_local_batch(device(capacity, calls), margin=1.0) == capacity
    assert len(calls) <= 2 * capacity.bit_length() + 4, calls  # doubling, then bisecting


def test_the_margin_is_kept_and_the_result_is_reported_and_checkpointed(tmp_path):
    j = job(tmp_path)
    model = torch.nn.Linear(1, 1)
    j.resume(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert j.probe_max_local_batch(device(1000, []), margin=0.9) == 900
    j.step_done()
    j.checkpoint()
    # What the reports carry.
    assert metrics_payload(step=1, samples_per_s=1.0, batch_size=32, world_size=1, loss=None,
                           samples_seen=32, max_local_batch=j.probed_max_local_batch()
                           )["max_local_batch"] == 900
    # A relaunch resumes it: no probe.
    j2 = job(tmp_path)
    j2.resume(torch.nn.Linear(1, 1))
    calls = []
    assert j2.probe_max_local_batch(device(10, calls)) == 900 and calls == []


def test_a_limit_probed_on_another_kind_of_gpu_is_not_this_ones(tmp_path):
    # What a launch on another GPU type of a fleet probed and checkpointed.
    j = job(tmp_path)
    j.extra["dlscale.max_local_batch"] = {"NVIDIA A100-SXM4-80GB": 4000}
    assert j.probed_max_local_batch() is None  # not reported here
    calls = []
    assert j.probe_max_local_batch(device(500, calls), margin=1.0) == 500 and calls
    assert j.probed_max_local_batch() == 500
    assert j.extra["dlscale.max_local_batch"]["NVIDIA A100-SXM4-80GB"] == 4000  # kept for there
    # A checkpoint from before limits were kept by device: its one number is this device's.
    old = job(tmp_path)
    old.extra["dlscale.max_local_batch"] = 700
    assert old.probed_max_local_batch() == 700


def test_only_out_of_memory_is_an_answer(tmp_path):
    def broken(batch):
        raise ValueError("a bug in the step")

    with pytest.raises(ValueError, match="a bug"):
        job(tmp_path).probe_max_local_batch(broken)
    with pytest.raises(RuntimeError, match="not even one sample"):
        job(tmp_path).probe_max_local_batch(device(0, []))


def test_the_probes_passes_are_no_part_of_the_gradient_noise_measured(tmp_path):
    def measured(probe_first):
        torch.manual_seed(0)
        one = job(None)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        x, y = torch.randn(256, 4), torch.randn(256, 1)
        one.grad_noise.min_updates = 1
        one.measure_grad_noise(model, init_batch_size=32)

        def one_pass(b):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x[:b]), y[:b]).backward()

        if probe_first:
            one.probe_max_local_batch(one_pass, limit=256)  # on a CPU: up to the limit
        opt.zero_grad(set_to_none=True)
        for (mx, my), weight in one.micro_batches((x[:32], y[:32]), parts=2):
            (torch.nn.functional.mse_loss(model(mx), my) * weight).backward()
        one.step_done()
        return one.grad_noise.grad_sqr, one.grad_noise.trace_cov

    clean = measured(False)
    assert clean[0] > 0 and clean[1] > 0, clean  # the step measured something
    assert measured(True) == pytest.approx(clean)


def test_a_probe_made_before_the_resume_is_kept_by_it(tmp_path):
    first = job(tmp_path)
    model = torch.nn.Linear(2, 1)
    first.resume(model)
    first.step_done()
    first.checkpoint()  # a checkpoint that holds no probe
    again = job(tmp_path)
    calls = []
    probed = again.probe_max_local_batch(device(100, calls), limit=1024, margin=1.0)
    assert again.resume(torch.nn.Linear(2, 1)) is True
    assert again.probed_max_local_batch() == probed


class _OutOfMemoryInBackward(torch.autograd.Function):
    """The identity, whose backward pass runs out of memory above ``capacity`` samples: after
    the layers behind it have their gradients, as a GPU's backward pass does."""

    @staticmethod
    def forward(ctx, x, capacity):
        ctx.fits = x.shape[0] <= capacity
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.fits:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return grad, None


def test_a_probe_that_runs_out_of_memory_in_a_backward_pass_leaves_the_noise_measured(tmp_path):
    def measured(probe_first):
        torch.manual_seed(0)
        one = job(None)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        x, y = torch.randn(256, 4), torch.randn(256, 1)
        one.grad_noise.min_updates = 1
        one.measure_grad_noise(model, init_batch_size=32)

        def forward(b):
            hidden = _OutOfMemoryInBackward.apply(model[1](model[0](x[:b])), 64)
            return torch.nn.functional.mse_loss(model[2](hidden), y[:b])

        if probe_first:
            model.zero_grad(set_to_none=True)
            assert one.probe_max_local_batch(lambda b: forward(b).backward(), margin=1.0) == 64
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            for micro, weight in one.micro_batches(torch.arange(32), parts=2):
                hidden = model[1](model[0](x[micro]))
                (torch.nn.functional.mse_loss(model[2](hidden), y[micro]) * weight).backward()
            one.step_done()
        return one.grad_noise.grad_sqr, one.grad_noise.trace_cov, one.grad_noise.updates

    clean = measured(False)
    assert clean[2] == 3, clean
    assert measured(True) == pytest.approx(clean)


# -- under DDP: the probe's passes go through the communication hook --------------------------

COMPUTE_S, DDP_STEPS = 0.04, 6


_SlowBackward = slow_backward(COMPUTE_S)


def _ddp_worker(rank, world, url, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank,
                            world_size=world)
    results = {}
    for name in ("clean", "probed"):
        torch.manual_seed(0)
        alloc = Allocation(job_id=name, rank=rank, local_rank=rank, world_size=world,
                           local_batch_size=8, batch_size=8 * world, checkpoint_dir=None, api=url,
                           token=None)
        j = Job(alloc, log_every=DDP_STEPS, report_interval=0, install_signals=False)
        model = torch.nn.Linear(4, 1)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        j.resume(model)
        j.grad_noise.min_updates = 1
        j.measure_grad_noise(ddp, init_batch_size=8)
        gen = torch.Generator().manual_seed(rank)
        x, y = torch.randn(64, 4, generator=gen), torch.randn(64, 1, generator=gen)

        def one_pass(b):  # fast: none of its time is a training step's compute
            ddp.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(ddp(x[:b]), y[:b]).backward()

        if name == "probed":
            assert j.probe_max_local_batch(one_pass, start=16, limit=64, margin=1.0) == 64
        for _ in range(DDP_STEPS):
            ddp.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(_SlowBackward.apply(ddp(x[:8])), y[:8]).backward()
            j.step_done()
        j.finish()  # the last window has averaged the estimates over the workers
        results[name] = [j.grad_noise.grad_sqr, j.grad_noise.trace_cov, j.grad_noise.updates]
    if rank == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def test_under_ddp_the_probes_passes_are_neither_noise_nor_compute_measured(tmp_path, metrics_server):
    multiprocessing.set_forkserver_preload(["torch._dynamo", __name__])
    mp.start_processes(_ddp_worker, args=(2, metrics_server.url, str(tmp_path)), nprocs=2,
                       join=True, start_method="forkserver")
    with open(tmp_path / "result.json") as f:
        results = json.load(f)
    clean, probed = results["clean"], results["probed"]
    assert clean[2] == DDP_STEPS, clean  # one measurement per training step, at its batch
    assert probed == pytest.approx(clean)
    compute = {path.split("/")[3]: body["compute_time_s"] for path, _, body in metrics_server.requests
               if body and body.get("compute_time_s") is not None}
    # Each training step's backward pass sleeps COMPUTE_S; the probe's quick passes are not steps.
    assert set(compute) == {"clean", "probed"}, metrics_server.requests
    assert compute["probed"] >= COMPUTE_S, compute
