import json
import socket
import time

from conftest import MetricsServer, require
from dlscale import Job, MetricsReporter, metrics_payload

KEYS = {"step", "samples_per_s", "batch_size", "world_size", "loss", "samples_seen"}


def payload(step, loss=0.5):
    return metrics_payload(step=step, samples_per_s=100.0, batch_size=64, world_size=2, loss=loss,
                           samples_seen=step * 64)


def test_posts_json_with_bearer_token(metrics_server):
    r = MetricsReporter(metrics_server.url, "job/1", token="tok", interval=0)
    r.report(payload(7))
    (path, headers, body), = metrics_server.wait_for(1)
    r.close()
    assert path == "/v1/jobs/job%2F1/metrics"
    assert headers["Authorization"] == "Bearer tok"
    assert headers["Content-Type"] == "application/json"
    assert body == {"step": 7, "samples_per_s": 100.0, "batch_size": 64, "world_size": 2, "loss": 0.5,
                    "samples_seen": 448}


def test_no_token_no_header_and_nan_loss_is_null(metrics_server):
    r = MetricsReporter(metrics_server.url + "/", "j", interval=0)
    r.report(payload(1, loss=float("nan")))
    (path, headers, body), = metrics_server.wait_for(1)
    r.close()
    assert path == "/v1/jobs/j/metrics"
    assert "Authorization" not in headers
    assert body["loss"] is None and set(body) == KEYS


def test_rate_limited_and_newest_wins(metrics_server):
    r = MetricsReporter(metrics_server.url, "j", interval=0.5)
    t0 = time.monotonic()
    for step in range(1, 201):  # ~1 s of reports every 5 ms
        r.report(payload(step))
        time.sleep(0.005)
    r.close()  # flushes the newest pending value
    elapsed = time.monotonic() - t0
    steps = [body["step"] for _, _, body in metrics_server.requests]
    assert 2 <= len(steps) <= elapsed / 0.5 + 2, steps
    assert steps == sorted(steps) and steps[-1] == 200


def test_report_does_not_block_on_a_slow_server(capsys):
    # A server that accepts connections but never answers.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        r = MetricsReporter(f"http://127.0.0.1:{sock.getsockname()[1]}", "j", interval=0, timeout=1)
        t0 = time.monotonic()
        for step in range(100):
            r.report(payload(step))
        r.close(timeout=0.1)  # gives up waiting for the stuck POST; the thread is a daemon
        assert time.monotonic() - t0 < 0.5
    finally:
        sock.close()
    r._thread.join(5)  # let it time out here, not during another test
    assert not r._thread.is_alive()
    assert "failed" in capsys.readouterr().err


def test_failures_logged_once_then_recovery(capsys):
    server = MetricsServer(status=500)
    try:
        r = MetricsReporter(server.url, "j", interval=0)
        for step in range(3):
            r.report(payload(step))
            server.wait_for(step + 1)
            time.sleep(0.05)
        deadline = time.monotonic() + 5
        while r.failed < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        err = capsys.readouterr().err
        assert err.count("metrics report to") == 1 and "HTTP 500" in err
        server.status = 200
        r.report(payload(10))
        r.close()
        assert r.sent == 1
        assert "work again" in capsys.readouterr().err
    finally:
        server.close()


def test_unreachable_server_is_ignored(capsys):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    r = MetricsReporter(f"http://127.0.0.1:{port}", "j", interval=0)
    r.report(payload(1))
    r.close()
    r2 = r  # no exception escaped; one warning printed
    assert r2.failed == 1 and r2.sent == 0
    assert capsys.readouterr().err.count("failed") == 1


def test_disabled_without_api():
    r = MetricsReporter(None, "j")
    assert not r.enabled
    r.report(payload(1))
    r.close()


def test_job_reports_each_log_window(metrics_server, capsys):
    env = {"DLSCALE_API": metrics_server.url, "DLSCALE_JOB_ID": "42", "DLSCALE_TOKEN": "t",
           "DLSCALE_WORLD_SIZE": "1", "DLSCALE_LOCAL_BATCH_SIZE": "16", "DLSCALE_METRICS_INTERVAL": "0"}
    job = Job(environ=env, log_every=5, install_signals=False)
    for i in range(10):
        job.step_done(loss=1.0 / (i + 1))
        if i == 4:
            metrics_server.wait_for(1)  # else the step-10 report may supersede the step-5 one
    job.reporter.close()
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dlscale: step=5 loss=0.4567 samples_per_s=")
    assert out[0].endswith(" world_size=1 batch_size=16")
    assert out[1].startswith("dlscale: step=10 loss=0.1291 ")
    bodies = [b for _, _, b in metrics_server.wait_for(2)]
    assert [b["step"] for b in bodies] == [5, 10]
    assert [b["samples_seen"] for b in bodies] == [80, 160]
    assert all(set(b) == KEYS | {"micro_steps"} and b["batch_size"] == 16 and b["world_size"] == 1
               and b["micro_steps"] == 1 for b in bodies)  # the micro-steps it ran: no accumulation
    assert bodies[0]["loss"] == sum(1.0 / (i + 1) for i in range(5)) / 5


def test_job_reports_the_micro_steps_its_steps_ran(metrics_server):
    torch = require("torch")
    env = {"DLSCALE_API": metrics_server.url, "DLSCALE_JOB_ID": "42", "DLSCALE_TOKEN": "t",
           "DLSCALE_WORLD_SIZE": "1", "DLSCALE_LOCAL_BATCH_SIZE": "8", "DLSCALE_METRICS_INTERVAL": "0"}
    job = Job(environ=env, log_every=2, install_signals=False)
    assert job.alloc.accum_steps == 1
    # Two parts a step where the allocation says one (a lone worker measuring its gradient
    # noise, as examples/train_digits.py does): its step time is that of two micro-steps.
    for _ in range(2):
        for micro, weight in job.micro_batches(torch.randn(8, 4), parts=2):
            pass
        job.step_done()
    metrics_server.wait_for(1)  # else the next window's report may supersede this one
    # A window that cuts no batch itself: the allocation's.
    for _ in range(2):
        job.step_done()
    job.reporter.close()
    bodies = [b for _, _, b in metrics_server.wait_for(2)]
    assert [b["micro_steps"] for b in bodies] == [2, 1]


def test_job_without_api_posts_nothing(capsys):
    job = Job(environ={}, log_every=1, install_signals=False)
    job.step_done(loss=0.3)
    assert not job.reporter.enabled
    assert capsys.readouterr().out.startswith("dlscale: step=1 loss=0.3000 ")


def test_reports_carry_the_attempt(metrics_server):
    env = {"DLSCALE_API": metrics_server.url, "DLSCALE_JOB_ID": "j", "DLSCALE_ATTEMPT": "3",
           "DLSCALE_WORLD_SIZE": "1", "DLSCALE_LOCAL_BATCH_SIZE": "8", "DLSCALE_METRICS_INTERVAL": "0"}
    job = Job(environ=env, log_every=1, install_signals=False)
    job.step_done(loss=1.0)
    job.reporter.close()
    (_, _, body), = metrics_server.wait_for(1)
    assert body["attempt"] == 3 and set(body) == KEYS | {"attempt", "micro_steps"}


def test_completion_is_reported_synchronously_after_the_last_progress(metrics_server):
    r = MetricsReporter(metrics_server.url, "j", token="tok", interval=0)
    r.report(payload(7))
    r.close()
    assert r.complete({"attempt": 2, "step": 7, "samples_seen": 448})
    paths = [p for p, _, _ in metrics_server.wait_for(2)]
    assert paths == ["/v1/jobs/j/metrics", "/v1/jobs/j/complete"]
    _, headers, body = metrics_server.requests[1]
    assert headers["Authorization"] == "Bearer tok"
    assert body == {"attempt": 2, "step": 7, "samples_seen": 448}


def test_a_refused_completion_is_not_retried(capsys):
    server = MetricsServer(status=409)
    try:
        r = MetricsReporter(server.url, "j", interval=0)
        assert not r.complete({"attempt": 1, "step": 1, "samples_seen": 1}, backoff=0)
        assert len(server.requests) == 1
        assert "refused (HTTP 409)" in capsys.readouterr().err
    finally:
        server.close()


def test_an_unreachable_server_gets_a_few_tries(capsys):
    server = MetricsServer(status=503)
    try:
        r = MetricsReporter(server.url, "j", interval=0)
        assert not r.complete({"attempt": 1, "step": 1, "samples_seen": 1}, attempts=3, backoff=0)
        assert len(server.requests) == 3
        assert "completion report" in capsys.readouterr().err
    finally:
        server.close()


def test_finish_reports_completion_of_its_attempt(metrics_server, capsys):
    env = {"DLSCALE_API": metrics_server.url, "DLSCALE_JOB_ID": "j", "DLSCALE_ATTEMPT": "4",
           "DLSCALE_WORLD_SIZE": "1", "DLSCALE_LOCAL_BATCH_SIZE": "8", "DLSCALE_METRICS_INTERVAL": "0"}
    job = Job(environ=env, log_every=100, install_signals=False)
    job.resume(object())  # no checkpoint dir: nothing to load or save
    for _ in range(3):
        job.step_done()
    job.finish()
    requests = metrics_server.wait_for(2)
    assert [p for p, _, _ in requests] == ["/v1/jobs/j/metrics", "/v1/jobs/j/complete"]
    assert requests[1][2] == {"attempt": 4, "step": 3, "samples_seen": 24}
    assert "dlscale: done step=3" in capsys.readouterr().out


def test_payload_carries_a_valid_compute_time_only():
    base = dict(step=1, samples_per_s=1.0, batch_size=8, world_size=2, loss=None, samples_seen=8)
    assert metrics_payload(**base, compute_time_s=0.25)["compute_time_s"] == 0.25
    for bad in (None, 0.0, -1.0, float("nan"), float("inf")):
        assert "compute_time_s" not in metrics_payload(**base, compute_time_s=bad)


def test_payload_carries_the_micro_steps_run_when_valid():
    base = dict(step=1, samples_per_s=1.0, batch_size=8, world_size=2, loss=None, samples_seen=8)
    assert metrics_payload(**base, micro_steps=4)["micro_steps"] == 4
    for bad in (None, 0, -2):
        assert "micro_steps" not in metrics_payload(**base, micro_steps=bad)


def batch_answer(batch_size, local_batch_size, micro_steps=1):
    return json.dumps({"accepted": True, "batch": {"batch_size": batch_size,
                       "local_batch_size": local_batch_size, "micro_steps": micro_steps}}).encode()


def test_the_batch_a_report_is_answered_with_is_kept(metrics_server):
    r = MetricsReporter(metrics_server.url, "j", interval=0)
    assert r.batch() is None
    metrics_server.answer = b'{"accepted": true}'
    r.report(payload(1))
    metrics_server.wait_for(1)
    r.close()
    assert r.batch() is None, "an answer without a batch changes nothing"
    for bad in [b"not json", b'{"batch": {"batch_size": 0, "local_batch_size": 8, "micro_steps": 1}}',
                b'{"batch": {"batch_size": true, "local_batch_size": 8, "micro_steps": 1}}',
                b'{"batch": [64, 64, 1]}', b'[1]']:
        r._take_answer(bad)
        assert r.batch() is None, bad
    r._take_answer(batch_answer(64, 64, 2))
    assert r.batch() == (64, 64, 2)


def test_a_job_takes_the_answered_batch_at_the_end_of_a_log_window(metrics_server, capsys):
    env = {"DLSCALE_API": metrics_server.url, "DLSCALE_JOB_ID": "j", "DLSCALE_ATTEMPT": "1",
           "DLSCALE_WORLD_SIZE": "1", "DLSCALE_LOCAL_BATCH_SIZE": "16", "DLSCALE_METRICS_INTERVAL": "0"}
    metrics_server.answer = batch_answer(48, 48, 3)
    job = Job(environ=env, log_every=5, install_signals=False)
    changed = []
    for i in range(15):
        job.step_done(loss=1.0)
        if i == 4:
            metrics_server.wait_for(1)
            deadline = time.monotonic() + 10
            while job.reporter.batch() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        if i == 9:
            metrics_server.wait_for(2)  # else the step-15 report may supersede the step-10 one
        changed.append(job.rebatched())
        if job.step == 10:
            assert job.rebatched() is False, "once per change"
    job.reporter.close()
    # The answer to the step-5 report is taken at the next window's end, then never again (it is
    # the batch it runs).
    assert changed == [False] * 9 + [True] + [False] * 5
    assert (job.batch_size, job.local_batch_size, job.alloc.accum_steps) == (48, 48, 3)
    assert job.samples_seen == 10 * 16 + 5 * 48
    bodies = [b for _, _, b in metrics_server.wait_for(3)]
    assert [b["batch_size"] for b in bodies] == [16, 16, 48], "each report covers one batch"
    assert "dlscale: rebatched step=10 batch_size=48 local_batch_size=48 accum_steps=3" in capsys.readouterr().out


def test_a_batch_that_does_not_fit_the_workers_is_refused(metrics_server, capsys):
    env = {"DLSCALE_API": metrics_server.url, "DLSCALE_JOB_ID": "j", "DLSCALE_WORLD_SIZE": "1",
           "DLSCALE_LOCAL_BATCH_SIZE": "16", "DLSCALE_METRICS_INTERVAL": "0"}
    job = Job(environ=env, log_every=1, install_signals=False)
    job.reporter._take_answer(batch_answer(64, 32))  # 32 per worker: two workers' batch
    job.step_done(loss=1.0)
    assert job.rebatched() is False and job.batch_size == 16
    # Shares that overlap (10 as 12 on one worker): each sample would be trained twice.
    job.reporter._take_answer(batch_answer(10, 12))
    job.step_done(loss=1.0)
    assert job.rebatched() is False and job.batch_size == 16
    job.reporter.close()
    err = capsys.readouterr().err
    assert "does not fit 1 workers; kept 16" in err and "batch 10 (12 per worker" in err
