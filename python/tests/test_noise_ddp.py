"""The gradient noise measurement end to end, against analytic truth.

Linear regression ``y = x·w* + ε`` with ``x ~ N(0, I_d)`` and ``ε ~ N(0, σ²)``, loss
``½(x·w − y)²``, held at a fixed ``w = w* + δ`` (no optimizer step, so the truth is the same
every step). A sample's gradient is ``x(x·δ − ε)``, so

    G = δ,    |G|² = |δ|²,    tr(Σ) = E|x|²(x·δ)² + σ² E|x|² − |δ|² = (d + 1)|δ|² + d σ²

(Gaussian fourth moments: ``E|x|²(x·δ)² = (d + 2)|δ|²``). Each run trains through ``Job`` with
gloo workers on CPU, the measurement chosen by ``Job.measure_grad_noise`` (DDP hook for several
workers, micro-batches for one), and checks what the estimator holds and what rank 0 reported to
the server against that truth.
"""
import contextlib
import json
import multiprocessing
import os

import pytest

from conftest import require

torch = require("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from dlscale import Allocation, Job  # noqa: E402

D, DELTA_SQR, NOISE_VAR = 10, 1.0, 1.0
TRUE_SQR = DELTA_SQR
TRUE_TRACE = (D + 1) * DELTA_SQR + D * NOISE_VAR  # 21: the noise scale, since |G|² = 1
INIT_BATCH = 8  # B0 of the reports: unlike every batch used, so a wrong normalisation shows
STEPS = 400
TOLERANCE = 0.20


def global_batch(step, batch, w_star):
    """The step's global batch, the same on every rank (each takes its slice)."""
    gen = torch.Generator().manual_seed(1_000_003 * step + 17)
    x = torch.randn(batch, D, generator=gen)
    y = x @ w_star + NOISE_VAR ** 0.5 * torch.randn(batch, generator=gen)
    return x, y


def worker(rank, world, local_batch, micro, url, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank,
                            world_size=world)
    alloc = Allocation(job_id="noise", rank=rank, local_rank=rank, world_size=world,
                       local_batch_size=local_batch, batch_size=local_batch * world,
                       checkpoint_dir=None, api=url, token=None)
    job = Job(alloc, log_every=STEPS // 4, report_interval=0, install_signals=False)

    w_star = torch.linspace(-1.0, 1.0, D)
    delta = torch.zeros(D)
    delta[0] = DELTA_SQR ** 0.5
    model = torch.nn.Linear(D, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_((w_star + delta).unsqueeze(0))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    job.resume(model)
    # A window far longer than the run: a plain average, so the tolerance reflects the estimator.
    est = job.measure_grad_noise(ddp, init_batch_size=INIT_BATCH, window_samples=1e12)

    for step in range(STEPS):
        x, y = global_batch(step, job.batch_size, w_star)
        mine = slice(rank * local_batch, (rank + 1) * local_batch)
        xs, ys = x[mine].chunk(micro), y[mine].chunk(micro)
        ddp.zero_grad(set_to_none=True)
        for k in range(micro):
            # Gradient accumulation: only the last micro-batch all-reduces.
            sync = contextlib.nullcontext() if k == micro - 1 else ddp.no_sync()
            with sync:
                share = len(ys[k]) / local_batch  # the step's mean loss, accumulated
                loss = 0.5 * (ddp(xs[k]).squeeze(1) - ys[k]).square().mean() * share
                loss.backward()
        if step == 0:
            # The measurement leaves the gradient alone: it is the whole global batch's.
            exact = x.T @ (x @ (w_star + delta) - y) / len(y)
            torch.testing.assert_close(model.weight.grad.squeeze(0), exact, rtol=1e-5, atol=1e-6)
        job.step_done(loss=loss.item())
    job.finish()  # the last window (collective) has averaged the estimates over the workers
    if rank == 0:
        with open(os.path.join(out_dir, "result.json"), "w") as f:
            json.dump({"grad_sqr": est.grad_sqr, "trace_cov": est.trace_cov, "updates": est.updates}, f)
    dist.destroy_process_group()


@pytest.mark.parametrize("world,local_batch,micro", [
    (1, 64, 4),   # one worker: 4 micro-batches of 16 against the step's 64
    (1, 63, 4),   # one worker, uneven: 16, 16, 16 and 15 against the step's 63
    (2, 16, 1),   # DDP hook: local 16 against global 32
    (4, 16, 1),   # DDP hook: local 16 against global 64
    (2, 16, 2),   # DDP hook with no_sync accumulation: the local gradient is both micro-batches
], ids=["1-worker-micro", "1-worker-uneven", "2-workers", "4-workers", "2-workers-accumulating"])
def test_estimates_match_analytic_truth(world, local_batch, micro, tmp_path, metrics_server):
    # Workers fork from one server process that imported torch and torch._dynamo (which DDP's
    # constructor imports) once, instead of each importing them: seconds per worker on 2 cores.
    multiprocessing.set_forkserver_preload(["torch._dynamo", __name__])
    mp.start_processes(worker, args=(world, local_batch, micro, metrics_server.url, str(tmp_path)),
                       nprocs=world, join=True, start_method="forkserver")
    with open(tmp_path / "result.json") as f:
        result = json.load(f)
    reports = [body for _, _, body in metrics_server.requests if body and "grad" in body]
    assert result["updates"] == STEPS and reports, metrics_server.requests
    reported = max(reports, key=lambda body: body["step"])["grad"]

    errors = {
        "grad_sqr": result["grad_sqr"] / TRUE_SQR - 1,
        "tr(Σ)": result["trace_cov"] / TRUE_TRACE - 1,
        "reported grad_sqr": reported["grad_sqr"] / TRUE_SQR - 1,
        "reported grad_var": reported["grad_var"] / (TRUE_TRACE / INIT_BATCH) - 1,
    }
    print(f"\nworld={world} local_batch={local_batch} micro={micro}: relative errors "
          + ", ".join(f"{k} {v:+.3f}" for k, v in errors.items()))
    for name, err in errors.items():
        assert abs(err) < TOLERANCE, (name, errors)


def test_one_worker_without_ddp_checkpoints_its_estimate(tmp_path, capsys):
    def job():
        alloc = Allocation(job_id=None, rank=0, local_rank=0, world_size=1, local_batch_size=32,
                           batch_size=32, checkpoint_dir=str(tmp_path), api=None, token=None)
        return Job(alloc, log_every=5, install_signals=False)

    def train(job, model, steps, micro):
        w_star = torch.linspace(-1.0, 1.0, D)
        for _ in range(steps):
            x, y = global_batch(job.step, job.batch_size, w_star)
            model.zero_grad(set_to_none=True)
            for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
                (0.5 * (model(xs).squeeze(1) - ys).square().mean() / micro).backward()
            job.step_done()

    first, model = job(), torch.nn.Linear(D, 1, bias=False)
    first.resume(model)
    est = first.measure_grad_noise(model, init_batch_size=INIT_BATCH)
    train(first, model, 5, micro=1)  # one backward pass per step: nothing to compare
    assert est.updates == 0 and "measured the gradient noise" in capsys.readouterr().err
    train(first, model, 15, micro=2)
    assert est.updates == 15
    first.checkpoint()

    second, model = job(), torch.nn.Linear(D, 1, bias=False)
    assert second.resume(model)
    restored = second.measure_grad_noise(model, init_batch_size=INIT_BATCH)
    assert restored.updates == 15 and restored.report(INIT_BATCH) == est.report(INIT_BATCH)


class RecordingEstimator:
    """Stands in for GradNoiseEstimator to see exactly what one step feeds it."""

    def __init__(self):
        self.updates = []

    def update(self, small_sqr, small_batch, big_sqr, big_batch):
        self.updates.append((float(small_sqr), small_batch, float(big_sqr), big_batch))


@pytest.mark.parametrize("batch,parts", [(6, 2), (5, 2), (7, 3), (10, 4), (13, 4)])
def test_micro_batches_of_unequal_size_are_weighed_exactly(batch, parts):
    # The small estimate must be the mean of the micro-batches' own mean-gradient norms, at
    # their harmonic mean size: with parts of unequal size, b/K would be a biased stand-in.
    from dlscale.noise import micro_batch_sizes, track_micro_batches

    gen = torch.Generator().manual_seed(batch * 31 + parts)
    x, y = torch.randn(batch, D, generator=gen), torch.randn(batch, generator=gen)
    model = torch.nn.Linear(D, 1, bias=False)
    recorder = RecordingEstimator()
    probe = track_micro_batches(model.parameters(), recorder, batch)
    model.zero_grad(set_to_none=True)
    parts_x, parts_y = x.chunk(parts), y.chunk(parts)
    assert [len(p) for p in parts_y] == micro_batch_sizes(batch, parts)
    own_sqr = []
    for xs, ys in zip(parts_x, parts_y):
        (0.5 * (model(xs).squeeze(1) - ys).square().mean() * len(ys) / batch).backward()
        w = model.weight.detach().squeeze(0)
        own_sqr.append(float((xs.T @ (xs @ w - ys) / len(ys)).square().sum()))
    probe.step()
    probe.remove()

    w = model.weight.detach().squeeze(0)
    whole = float((x.T @ (x @ w - y) / batch).square().sum())
    sizes = [len(p) for p in parts_y]
    [(small, small_batch, big, big_batch)] = recorder.updates
    assert small == pytest.approx(sum(own_sqr) / parts, rel=1e-5)
    assert small_batch == pytest.approx(parts / sum(1 / n for n in sizes))
    assert big == pytest.approx(whole, rel=1e-5) and big_batch == batch


def test_a_step_of_one_sample_measures_nothing_and_does_not_fail():
    from dlscale.noise import track_micro_batches

    model = torch.nn.Linear(D, 1, bias=False)
    recorder = RecordingEstimator()
    probe = track_micro_batches(model.parameters(), recorder, 1)
    x, y = torch.randn(1, D), torch.randn(1)
    for part_x, part_y in zip(x.chunk(2), y.chunk(2)):  # chunk(2) of one sample: one part
        (0.5 * (model(part_x).squeeze(1) - part_y).square().mean()).backward()
    probe.step()
    probe.remove()
    assert recorder.updates == []
