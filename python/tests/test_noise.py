"""GradNoiseEstimator on exact inputs (no torch): the estimators, the moving average, the report
convention and its way into the metrics payload. The end-to-end measurement with torch is in
test_noise_ddp.py."""
import math

import pytest

from dlscale import GradNoiseEstimator, metrics_payload


def expected_sqr_norm(grad_sqr, trace, batch):
    """E|g_b|² for a mean gradient over ``batch`` independent samples."""
    return grad_sqr + trace / batch


@pytest.mark.parametrize("small,big", [(16, 32), (16, 64), (1, 2), (12.5, 50)])
def test_unbiased_estimators_recover_exact_expectations(small, big):
    est = GradNoiseEstimator(min_updates=1)
    est.update(expected_sqr_norm(0.7, 30.0, small), small, expected_sqr_norm(0.7, 30.0, big), big)
    assert est.grad_sqr == pytest.approx(0.7, rel=1e-12)
    assert est.trace_cov == pytest.approx(30.0, rel=1e-12)
    assert est.noise_scale == pytest.approx(30.0 / 0.7, rel=1e-12)


def test_report_is_variance_at_the_initial_batch():
    # The server's GradNoise: grad_var = tr(Σ)/B0, so noise_scale(B0) = grad_var/grad_sqr·B0.
    est = GradNoiseEstimator(min_updates=3)
    for _ in range(2):
        est.update(expected_sqr_norm(2.0, 48.0, 8), 8, expected_sqr_norm(2.0, 48.0, 64), 64)
    assert est.report(24) is None  # fewer than min_updates steps
    est.update(expected_sqr_norm(2.0, 48.0, 8), 8, expected_sqr_norm(2.0, 48.0, 64), 64)
    rep = est.report(24)
    assert set(rep) == {"grad_sqr", "grad_var"}
    assert rep["grad_sqr"] == pytest.approx(2.0, rel=1e-12)
    assert rep["grad_var"] == pytest.approx(48.0 / 24, rel=1e-12)
    assert rep["grad_var"] / rep["grad_sqr"] * 24 == pytest.approx(est.noise_scale, rel=1e-12)
    with pytest.raises(ValueError):
        est.report(0)


def test_moving_average_is_bias_corrected_and_forgets_by_samples():
    window = 1000.0
    est = GradNoiseEstimator(window_samples=window, min_updates=1)
    # One step: the estimate is that step's (no bias towards the initial 0).
    est.update(expected_sqr_norm(1.0, 10.0, 10), 10, expected_sqr_norm(1.0, 10.0, 100), 100)
    assert est.grad_sqr == pytest.approx(1.0, rel=1e-12)
    # A second step at big batch 400 decays the first by exp(-400/window); both weigh (1 - that).
    est.update(expected_sqr_norm(3.0, 50.0, 100), 100, expected_sqr_norm(3.0, 50.0, 400), 400)
    theta1, theta2 = math.exp(-100 / window), math.exp(-400 / window)
    w1, w2 = (1 - theta1) * theta2, 1 - theta2
    assert est.grad_sqr == pytest.approx((w1 * 1.0 + w2 * 3.0) / (w1 + w2), rel=1e-12)
    assert est.trace_cov == pytest.approx((w1 * 10.0 + w2 * 50.0) / (w1 + w2), rel=1e-12)


def test_non_finite_steps_are_skipped_and_negative_estimates_clipped():
    est = GradNoiseEstimator(min_updates=1)
    est.update(float("nan"), 8, 1.0, 16)
    assert est.skipped == 1 and est.updates == 0 and est.report(8) is None
    # A big gradient larger than the small one: a negative variance estimate for this step.
    est.update(1.0, 8, 2.0, 16)
    assert est.trace_cov == 0.0 and est.report(8)["grad_var"] == 0.0
    with pytest.raises(ValueError):
        est.update(1.0, 16, 1.0, 16)  # two equal batches say nothing


def test_state_round_trip_and_sync_without_distributed_is_a_no_op():
    est = GradNoiseEstimator(min_updates=1)
    est.update(expected_sqr_norm(1.5, 20.0, 4), 4, expected_sqr_norm(1.5, 20.0, 32), 32)
    est.sync()
    other = GradNoiseEstimator(min_updates=1)
    other.load_state_dict(est.state_dict())
    assert other.report(4) == est.report(4)
    with pytest.raises(ValueError):
        other.load_state_dict({**est.state_dict(), "version": 99})


def test_metrics_payload_carries_valid_grad_only():
    base = dict(step=1, samples_per_s=1.0, batch_size=8, world_size=1, loss=None, samples_seen=8)
    assert metrics_payload(**base, grad={"grad_sqr": 1.0, "grad_var": 0.5})["grad"] == {
        "grad_sqr": 1.0, "grad_var": 0.5}
    for bad in (None, {"grad_sqr": float("inf"), "grad_var": 1.0}, {"grad_sqr": 1.0, "grad_var": -1.0},
                {"grad_sqr": 1.0}):
        assert "grad" not in metrics_payload(**base, grad=bad)
