"""Gradient accumulation done by the library: ``job.micro_batches`` splits this worker's batch
into ``DLSCALE_ACCUM_STEPS`` micro-batches, none larger than ``ceil(b / K)`` (what the server
sized to fit the GPU), and the update equals the one-pass update; with DDP every micro-batch but
the last runs in ``no_sync()``."""
import contextlib

import pytest

from conftest import require

torch = require("torch")

from dlscale import Allocation, Job  # noqa: E402


def job_with(local_batch, accum_steps):
    alloc = Allocation(job_id="a", rank=0, local_rank=0, world_size=1, local_batch_size=local_batch,
                       batch_size=local_batch, checkpoint_dir=None, api=None, token=None,
                       accum_steps=accum_steps)
    return Job(alloc, install_signals=False)


def gradient(model, batches):
    model.zero_grad(set_to_none=True)
    for (x, y), weight in batches:
        (torch.nn.functional.mse_loss(model(x), y) * weight).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_micro_batches_fit_and_their_update_is_the_one_pass_update():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    for local_batch, accum in [(12, 4), (10, 4), (7, 3), (5, 1), (3, 5)]:
        job = job_with(local_batch, accum)
        x, y = torch.randn(local_batch, 5), torch.randn(local_batch, 2)
        micro = list(job.micro_batches((x, y)))
        sizes = [len(m[0]) for m, _ in micro]
        assert max(sizes) <= job.alloc.micro_batch_size, (local_batch, accum, sizes)
        assert sum(sizes) == local_batch and len(micro) == min(accum, local_batch)
        assert abs(sum(w for _, w in micro) - 1.0) < 1e-12
        one_pass = gradient(model, [((x, y), 1.0)])
        accumulated = gradient(model, micro)
        for a, b in zip(one_pass, accumulated):
            assert torch.allclose(a, b, atol=1e-6), (local_batch, accum)


def test_structures_keep_their_shape_and_parts_can_be_asked_for():
    job = job_with(6, 2)
    batch = {"input_ids": torch.arange(12).reshape(6, 2), "labels": [torch.arange(6), torch.ones(6)]}
    parts = list(job.micro_batches(batch))
    assert [p["input_ids"].shape[0] for p, _ in parts] == [3, 3]
    assert isinstance(parts[0][0]["labels"], list)
    assert torch.equal(parts[1][0]["labels"][0], torch.tensor([3, 4, 5]))
    assert len(list(job.micro_batches(torch.zeros(6, 1), parts=3))) == 3


def test_with_ddp_only_the_last_micro_batch_all_reduces():
    class Wrapped:
        def __init__(self):
            self.inside = False
            self.seen = []

        @contextlib.contextmanager
        def no_sync(self):
            self.inside = True
            yield
            self.inside = False

    model = Wrapped()
    for _ in job_with(8, 4).micro_batches(torch.zeros(8, 1), model):
        model.seen.append(model.inside)  # the backward pass would run here
    assert model.seen == [True, True, True, False]


def test_every_sample_of_a_mapping_or_nested_batch_is_trained_once():
    # A tokenizer's BatchEncoding is a Mapping, not a dict; a first part that is itself a
    # structure; a named tuple (default_collate keeps them); strings passed through by a
    # collate_fn; a scalar of the whole batch.
    import collections

    Pair = collections.namedtuple("Pair", "x y")

    class Encoding(collections.UserDict):
        pass

    x = torch.arange(6)
    cases = [
        (Encoding(input_ids=x, attention_mask=x + 10), lambda m: m["input_ids"]),
        ({"labels": [x, x + 10], "x": x}, lambda m: m["x"]),
        (((x, x + 10), x + 20), lambda m: m[1] - 20),
        (Pair(x, x + 10), lambda m: m.x),
        ({"x": x, "text": list("abcdef"), "scale": 2.0}, lambda m: m["x"]),
    ]
    for batch, samples in cases:
        parts = list(job_with(6, 2).micro_batches(batch))
        assert [w for _, w in parts] == [0.5, 0.5], batch
        assert torch.equal(torch.cat([samples(m) for m, _ in parts]), x), (batch, parts)
    pair = list(job_with(6, 2).micro_batches(Pair(x, x + 10)))[1][0]
    assert isinstance(pair, Pair) and torch.equal(pair.y, x[3:] + 10)
    text = [m for m, _ in job_with(6, 2).micro_batches(cases[-1][0])]
    assert [m["text"] for m in text] == [list("abc"), list("def")] and text[1]["scale"] == 2.0


def test_a_batch_whose_parts_differ_in_length_is_refused_by_name():
    batch = {"x": torch.zeros(6, 2), "class_weights": torch.ones(10)}
    with pytest.raises(ValueError, match=r"differ in their first dimension \(\[6, 10\]\)"):
        list(job_with(6, 2).micro_batches(batch))
    # One part: nothing is cut, whatever the batch holds.
    assert list(job_with(6, 1).micro_batches(batch)) == [(batch, 1.0)]


def test_a_batch_fetched_ahead_of_a_rebatch_is_cut_to_fit_the_new_micro_batches():
    # A loop that fetches a batch ahead (a prefetcher) trains one batch cut before the rebatch:
    # 32 samples of the old 4 x 8. Cut into the new allocation's one part, they would make a
    # 32-sample micro-step where the server sized 16 to fit the GPU.
    import json

    job = job_with(32, 4)
    job.resume(torch.nn.Linear(1, 1))
    job.log_every = 1
    job.reporter._take_answer(json.dumps({"batch": {"batch_size": 16, "local_batch_size": 16,
                                                    "micro_steps": 1}}).encode())
    it = iter(job.loader(torch.arange(100.0).unsqueeze(1)))
    batch = next(it)
    ahead = next(it)  # fetched before the step that takes the rebatch
    assert [len(m) for m, _ in job.micro_batches(batch)] == [8, 8, 8, 8]
    assert job.step_done() and job.alloc.micro_batch_size == 16
    parts = list(job.micro_batches(ahead))
    assert [len(m) for m, _ in parts] == [16, 16] and [w for _, w in parts] == [0.5, 0.5]
    job.step_done()
    # The next batch is cut at the new size: one micro-step.
    assert [len(m) for m, _ in job.micro_batches(next(it))] == [16]
    assert job.step_done() is False and job.samples_seen == 32 + 32 + 16
