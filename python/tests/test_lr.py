import math

import pytest

from dlscale import scaled_lr


def test_linear():
    assert scaled_lr(0.1, 32, 32) == pytest.approx(0.1)
    assert scaled_lr(0.1, 32, 128) == pytest.approx(0.4)
    assert scaled_lr(0.1, 32, 8, rule="linear") == pytest.approx(0.025)


def test_sqrt():
    assert scaled_lr(0.1, 32, 128, rule="sqrt") == pytest.approx(0.2)
    assert scaled_lr(0.1, 64, 32, rule="sqrt") == pytest.approx(0.1 / math.sqrt(2))


def test_none():
    assert scaled_lr(0.1, 32, 1024, rule="none") == pytest.approx(0.1)


@pytest.mark.parametrize("args", [
    (0.0, 32, 64), (-1.0, 32, 64), (float("nan"), 32, 64), (0.1, 0, 64), (0.1, 32, 0),
    (0.1, 32, 1.5), (0.1, True, 64),
])
def test_rejects_bad_numbers(args):
    with pytest.raises(ValueError):
        scaled_lr(*args)


def test_rejects_unknown_rule():
    with pytest.raises(ValueError, match="unknown LR scaling rule 'cubic'"):
        scaled_lr(0.1, 32, 64, rule="cubic")


def test_set_lr():
    from dlscale import set_lr

    class Opt:
        param_groups = [{"lr": 1.0}, {"lr": 2.0}]

    opt = Opt()
    set_lr(opt, 0.5)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.5]


def _accelerated(scheduler, optimizer):
    scheduler_module = pytest.importorskip("accelerate.scheduler")
    return scheduler_module.AcceleratedScheduler(scheduler, optimizer, step_with_optimizer=False)


def _lrs(make, batch, steps=8):
    """The LRs a schedule gives over ``steps`` steps, its LRs scaled from batch 32 to ``batch``
    before the first."""
    torch = pytest.importorskip("torch")
    from dlscale import LrScaling

    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.1, momentum=0.9)
    sched = make(torch.optim.lr_scheduler, opt)
    LrScaling(opt, 32, "linear", sched).scale_to(batch)
    out = []
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(opt.param_groups[0]["lr"])
    return out


@pytest.mark.parametrize("make", [
    # Warmup then cosine: at its milestone SequentialLR restarts the cosine from its own base LRs.
    lambda s, opt: s.SequentialLR(opt, [s.LinearLR(opt, start_factor=0.5, total_iters=2),
                                        s.CosineAnnealingLR(opt, T_max=10)], milestones=[2]),
    lambda s, opt: s.ChainedScheduler([s.ConstantLR(opt, factor=0.5, total_iters=3),
                                       s.ExponentialLR(opt, gamma=0.9)]),
    lambda s, opt: s.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=3),
    # Cosines to a floor (past T_max they climb back): the floor is a learning rate too.
    lambda s, opt: s.CosineAnnealingLR(opt, T_max=5, eta_min=0.01),
    lambda s, opt: s.CosineAnnealingWarmRestarts(opt, T_0=3, eta_min=0.01),
    # What accelerate's prepare() hands back: a wrapper that shows no base_lrs of its own.
    lambda s, opt: _accelerated(s.LambdaLR(opt, lambda step: 1.0 / (1 + step)), opt),
], ids=["SequentialLR", "ChainedScheduler", "CyclicLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
        "AcceleratedScheduler"])
def test_a_scaled_schedule_is_the_schedule_scaled_at_every_step(make):
    unscaled, doubled = _lrs(make, 32), _lrs(make, 64)
    assert doubled == pytest.approx([2 * lr for lr in unscaled]), (unscaled, doubled)
