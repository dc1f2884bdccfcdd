"""Any state in checkpoints (torch's Stateful protocol): the LR scheduler, a GradScaler and the
user's own objects are saved and restored; the learning rates follow the batch (at a resume at
another batch and at an in-place rebatch) with the schedule going on, scaled."""
import json

import pytest
from conftest import require

torch = require("torch")

from dlscale import Allocation, Job  # noqa: E402

BASE_LR, BASE_BATCH = 0.1, 32


class Counter:
    """A user's object: anything with state_dict() and load_state_dict()."""

    def __init__(self):
        self.seen = 0

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = state["seen"]


def job_with(tmp_path, local):
    alloc = Allocation(job_id="s", rank=0, local_rank=0, world_size=1, local_batch_size=local,
                       batch_size=local, checkpoint_dir=str(tmp_path), api=None, token=None)
    return Job(alloc, log_every=4, install_signals=False, report_interval=0)


def build():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=BASE_LR, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return model, optimizer, scheduler, scaler, Counter()


def train(job, model, optimizer, scheduler, scaler, counter, steps):
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(torch.randn(job.local_batch_size, 3)).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        counter.seen += job.local_batch_size
        job.step_done(loss)


def lr_of(optimizer):
    return optimizer.param_groups[0]["lr"]


def test_every_stateful_object_is_restored_and_the_lr_follows_the_batch(tmp_path):
    job = job_with(tmp_path, local=64)
    model, optimizer, scheduler, scaler, counter = build()
    job.resume(model, optimizer, base_batch=BASE_BATCH, scheduler=scheduler, scaler=scaler, counter=counter)
    assert lr_of(optimizer) == pytest.approx(BASE_LR * 64 / 32)
    train(job, model, optimizer, scheduler, scaler, counter, 7)
    # Two decays of the schedule, at the batch-64 scale.
    assert lr_of(optimizer) == pytest.approx(BASE_LR * 2 * 0.25)
    scaler.update(512.0)  # as after overflows
    job.checkpoint()
    weights = model.weight.detach().clone()

    # Resumed at batch 16 (the linear rule): the schedule goes on where it was, scaled.
    job2 = job_with(tmp_path, local=16)
    model2, optimizer2, scheduler2, scaler2, counter2 = build()
    assert job2.resume(model2, optimizer2, base_batch=BASE_BATCH, scheduler=scheduler2, scaler=scaler2,
                       counter=counter2)
    assert torch.equal(model2.weight, weights)
    assert (scheduler2.last_epoch, counter2.seen, scaler2.get_scale()) == (7, 7 * 64, 512.0)
    assert lr_of(optimizer2) == pytest.approx(BASE_LR * 0.5 * 0.25)
    assert scheduler2.base_lrs == [pytest.approx(BASE_LR * 0.5)]
    train(job2, model2, optimizer2, scheduler2, scaler2, counter2, 2)  # step 9: the third decay
    assert lr_of(optimizer2) == pytest.approx(BASE_LR * 0.5 * 0.125)

    # An in-place rebatch to 48 at the log window's end (step 12) rescales it again.
    job2.reporter._take_answer(json.dumps({"accepted": True, "batch": {
        "batch_size": 48, "local_batch_size": 48, "micro_steps": 1}}).encode())
    train(job2, model2, optimizer2, scheduler2, scaler2, counter2, 3)
    assert job2.batch_size == 48
    assert lr_of(optimizer2) == pytest.approx(BASE_LR * 1.5 * 0.0625)
    job2.checkpoint()

    # A third start, at 48 again: the LRs saved were already scaled for 48.
    job3 = job_with(tmp_path, local=48)
    model3, optimizer3, scheduler3, scaler3, counter3 = build()
    job3.resume(model3, optimizer3, base_batch=BASE_BATCH, scheduler=scheduler3, scaler=scaler3, counter=counter3)
    assert lr_of(optimizer3) == pytest.approx(BASE_LR * 1.5 * 0.0625)


def test_an_object_without_state_is_refused_by_name(tmp_path):
    job = job_with(tmp_path, local=8)
    model, optimizer, *_ = build()
    with pytest.raises(TypeError, match="tokenizer=object has no state_dict"):
        job.resume(model, optimizer, tokenizer=object())
    with pytest.raises(ValueError, match="not both"):
        job.resume(model, optimizer, lr=0.1, base_batch=32)


def test_a_checkpoint_without_a_newer_object_starts_it_afresh(tmp_path, capsys):
    job = job_with(tmp_path, local=8)
    model, optimizer, *_ = build()
    job.resume(model, optimizer)
    job.step_done()
    job.checkpoint()
    job2 = job_with(tmp_path, local=8)
    model2, optimizer2, *_ = build()
    counter = Counter()
    counter.seen = 5
    assert job2.resume(model2, optimizer2, counter=counter) and job2.step == 1
    assert counter.seen == 5
    assert "has no state for counter: it starts afresh" in capsys.readouterr().err
