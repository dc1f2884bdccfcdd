"""Ray Train end to end, on a real local Ray cluster (one head, 2 CPUs, 4 ``fake_gpu``):
``examples/ray_train.py`` stopped at a checkpoint and resumed exactly at another size and batch.

    driver by hand, 2 workers x 16  --SIGTERM to the driver-->  exit 75
    Jobs API (as dlscale's Ray executor submits it), 3 workers x 12, the server answering with
    batch 48 in place  -->  resumed at the checkpointed step, rebatched, done, SUCCEEDED

Each run's sample log (``DLSCALE_SAMPLE_LOG``) shows every sample trained once, in stream order,
across both runs and the batch change. Skips without Ray (``ray[default,train]``: the Jobs API
needs the dashboard) unless ``DLSCALE_REQUIRE_RAY=1``. A Ray start and each Train run cost tens of
seconds on a small machine (mostly process starts and imports): the whole file takes 2-3 min.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, SRC, clean_env, python_exe, require  # noqa: E402

require("torch")
require("sklearn")
require("ray", flag="DLSCALE_REQUIRE_RAY")
require("aiohttp", flag="DLSCALE_REQUIRE_RAY")  # ray[default]: the dashboard and its Jobs API

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "ray_train.py"
TOTAL = 4000  # samples
# A worker's line reaches the driver's output prefixed (``(RayTrainWorker pid=…) ``, in colour
# unless RAY_COLOR_PREFIX=0); the driver's own lines are not.
WORKER = r"\(RayTrainWorker pid=\d+[^)]*\)\S* "
STEP = r"dlscale: step=(\d+) loss=\S+ samples_per_s=\d+ world_size=(\d+) batch_size=(\d+)$"


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


class RayHead:
    """``ray start --head --block`` on loopback with ports of its own (another Ray on the machine
    keeps its defaults), in a session of its own; stopped by its PID, never by ``ray stop``."""

    def __init__(self, log_path):
        gcs, dash, *more = _free_ports(9)
        self.address = f"127.0.0.1:{gcs}"
        self.dashboard = f"http://127.0.0.1:{dash}"
        # Short: Ray's socket paths live under it.
        self.temp_dir = tempfile.mkdtemp(prefix="dlr", dir="/tmp")
        ray = Path(sys.executable).with_name("ray")
        argv = [str(ray)] if ray.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
        argv += ["start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
                 "--num-cpus=2", '--resources={"fake_gpu": 4}', "--include-dashboard=true",
                 "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--temp-dir={self.temp_dir}",
                 "--disable-usage-stats", f"--ray-client-server-port={more[0]}",
                 f"--dashboard-agent-listen-port={more[1]}", f"--dashboard-agent-grpc-port={more[2]}",
                 f"--metrics-export-port={more[3]}", f"--runtime-env-agent-port={more[4]}",
                 f"--node-manager-port={more[5]}", f"--object-manager-port={more[6]}"]
        # RAY_ADDRESS for every process of the cluster: Ray Train's helper actors find the GCS
        # by it, else by /tmp/ray's "current cluster" (another Ray's, or none: they then time
        # out for seconds at the end of each run). Also how the leftovers are found at the end.
        self.env = clean_env(RAY_ADDRESS=self.address, RAY_USAGE_STATS_ENABLED="0")
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 120
        while True:
            try:
                _get(f"{self.dashboard}/api/version", timeout=5)
                return
            except (OSError, ValueError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"ray start failed; see {log_path}:\n{Path(log_path).read_text()[-3000:]}")
                time.sleep(1)

    def submit(self, body, timeout=120):
        """POST /api/jobs/, retried while the job agent is not up yet."""
        deadline = time.monotonic() + timeout
        while True:
            req = urllib.request.Request(f"{self.dashboard}/api/jobs/", data=json.dumps(body).encode(),
                                         method="POST", headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"submit: HTTP {exc.code}: {exc.read()[:500]!r}")
                time.sleep(2)

    def job(self, submission_id):
        return _get(f"{self.dashboard}/api/jobs/{submission_id}")

    def logs(self, submission_id):
        return _get(f"{self.dashboard}/api/jobs/{submission_id}/logs")["logs"]

    def stop(self):
        if self.proc.poll() is None:
            # It drains its node (up to 30 s while Ray Train's detached helpers live), then
            # stops what it started; a test cluster need not wait for that.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # Ray's workers run in process groups of their own: whatever of this cluster is left
        # (found by the RAY_ADDRESS it was started with) is ended by PID.
        marker = f"RAY_ADDRESS={self.address}".encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        os.kill(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    head = RayHead(tmp_path_factory.mktemp("ray") / "head.log")
    yield head
    head.stop()


def _records(prefix):
    return [json.loads(line) for f in sorted(prefix.parent.glob(prefix.name + ".rank*"))
            for line in f.read_text().splitlines()]


def test_a_ray_train_run_stops_at_a_checkpoint_and_resumes_exactly_at_another_size(
        tmp_path, ray_head, procs, metrics_server):
    samples = tmp_path / "samples"
    common = dict(DLSCALE_JOB_ID="job-ray", DLSCALE_CHECKPOINT_DIR=str(tmp_path / "ck"),
                  DLSCALE_RAY_RUN_NAME="digits", DLSCALE_RAY_RESOURCE="fake_gpu",
                  DLSCALE_SAMPLE_LOG=str(samples), DLSCALE_STEP_SLEEP="0.05")

    # 1) The driver by hand, 2 workers x 16; SIGTERM to it once its workers logged step 20.
    a = procs([python_exe(), str(EXAMPLE), "--total-samples", str(TOTAL)],
              clean_env(**common, RAY_ADDRESS=ray_head.address, DLSCALE_WORLD_SIZE=2,
                        DLSCALE_BATCH_SIZE=32, DLSCALE_ATTEMPT=1))
    a.wait_for(WORKER + STEP, 300, lambda m: int(m.group(1)) >= 20)
    a.signal(signal.SIGTERM)
    assert a.wait(120) == 75, a.output
    # The driver's own line (unprefixed), after the workers' checkpoint.
    stopped = re.findall(r"^dlscale: stopped step=(\d+) samples_seen=(\d+) exit_code=75$", a.output, re.M)
    assert len(stopped) == 1, a.output
    n1, seen1 = map(int, stopped[0])
    assert seen1 == 32 * n1 and 20 <= n1 < TOTAL // 32, a.output
    assert re.search(WORKER + f"dlscale: checkpoint step={n1}$", a.output, re.M), a.output
    steps_a = [tuple(map(int, m)) for m in re.findall(WORKER + STEP, a.output, re.M)]
    assert steps_a and all(s[1:] == (2, 32) for s in steps_a), steps_a
    assert len({s[0] for s in steps_a}) == len(steps_a), "each step line once (rank 0 only, no echo)"

    # 2) Through the Jobs API, as the Ray executor submits it: 3 workers x 12, the allocation in
    # runtime_env; the "server" answers every report with batch 48 (16 per worker) in place.
    metrics_server.answer = json.dumps({"accepted": True, "batch": {
        "batch_size": 48, "local_batch_size": 16, "micro_steps": 1}}).encode()
    env_vars = {**common, "DLSCALE_WORLD_SIZE": "3", "DLSCALE_BATCH_SIZE": "36", "DLSCALE_ATTEMPT": "2",
                "DLSCALE_API": metrics_server.url, "DLSCALE_METRICS_INTERVAL": "0.2",
                "DLSCALE_STOP_EXIT_CODE": "75", "RAY_JOB_STOP_WAIT_TIME_S": "30",
                "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "RAY_COLOR_PREFIX": "0"}
    ray_head.submit({"entrypoint": f"{python_exe()} {EXAMPLE} --total-samples {TOTAL}",
                     "submission_id": "job-ray-2", "runtime_env": {"env_vars": env_vars},
                     "metadata": {"dlscale_job": "job-ray"}})
    deadline = time.monotonic() + 300
    while (job := ray_head.job("job-ray-2"))["status"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, ray_head.logs("job-ray-2")
        time.sleep(1)
    logs = ray_head.logs("job-ray-2")
    assert job["status"] == "SUCCEEDED" and job["driver_exit_code"] == 0, (job, logs)
    assert re.findall(WORKER + r"dlscale: resumed step=(\d+) samples_seen=(\d+) world_size=(\d+) batch_size=(\d+)$",
                      logs, re.M) == [(str(n1), str(seen1), "3", "36")], logs
    rebatched = re.findall(WORKER + r"dlscale: rebatched step=(\d+) batch_size=48 local_batch_size=16 accum_steps=1$",
                           logs, re.M)
    assert len(rebatched) == 1, logs
    k = int(rebatched[0])
    done = re.findall(r"^dlscale: done step=(\d+) samples_seen=(\d+)$", logs, re.M)  # the driver's
    assert len(done) == 1, logs
    n2, seen2 = map(int, done[0])
    assert seen2 == seen1 + 36 * (k - n1) + 48 * (n2 - k) and TOTAL <= seen2 < TOTAL + 48, (n1, k, n2, seen2)
    steps_b = [tuple(map(int, m)) for m in re.findall(WORKER + STEP, logs, re.M)]
    assert all(s[1:] == ((3, 36) if s[0] <= k else (3, 48)) for s in steps_b), steps_b

    # The workers reported as under torchrun: rank 0 only, this launch's attempt, then the end.
    reports = [(path, body) for path, _, body in metrics_server.requests]
    progress = [body for path, body in reports if path == "/v1/jobs/job-ray/metrics"]
    assert progress and all(b["attempt"] == 2 and b["world_size"] == 3 for b in progress), progress
    assert progress[-1]["samples_seen"] == seen2
    assert ("/v1/jobs/job-ray/complete", {"attempt": 2, "step": n2, "samples_seen": seen2}) in reports

    # Every step 1..n2 ran once, by every worker of its run; the sample stream was consumed from 0
    # without a gap or an overlap, across 2 workers, 3 workers and the batch change.
    records = _records(samples)
    by_step = {}
    for r in records:
        by_step.setdefault(r["step"], []).append(r)
    assert sorted(by_step) == list(range(1, n2 + 1))
    for step, rs in by_step.items():
        world = 2 if step <= n1 else 3
        assert sorted(r["rank"] for r in rs) == list(range(world)) and rs[0]["world_size"] == world, (step, rs)
    stream, pos = [], 0
    for r in sorted(records, key=lambda r: r["offset"]):
        assert r["offset"] == pos and len(r["indices"]) == r["count"], r
        pos += r["count"]
        stream += r["indices"]
    assert pos == seen2
    assert sorted(stream[:1500]) == list(range(1500)), "the first epoch: each sample once"
