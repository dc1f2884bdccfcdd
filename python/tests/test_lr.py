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
