"""End to end with the real example trainer: SIGTERM -> checkpoint -> restart at another world
size and batch -> the step counter and the data position continue exactly.

    plain process, world 1 x 32  --SIGTERM-->  torchrun world 2 x 24 (=48)  --SIGTERM-->
    plain process, world 1 x 64, runs to the end, reporting metrics to a local server.
"""
import json
import re
import signal
from pathlib import Path

import pytest

from conftest import EXAMPLE, clean_env, python_exe, require  # noqa: E402

require("torch")
require("sklearn")

pytestmark = pytest.mark.slow

TOTAL = 150
STEP_LINE = r"dlscale: step=(\d+) loss=([0-9.]+|nan) samples_per_s=(\d+) world_size=(\d+) batch_size=(\d+)$"


def parse_steps(output):
    return [tuple(float(g) if i == 1 else int(g) for i, g in enumerate(m.groups()))
            for m in re.finditer(STEP_LINE, output, re.M)]


def one(pattern, output):
    found = re.findall(pattern, output, re.M)
    assert len(found) == 1, f"{pattern!r} found {len(found)} times in:\n{output}"
    return found[0]


def test_sigterm_checkpoint_and_exact_resume_across_world_sizes(tmp_path, procs, metrics_server):
    ck, trace = tmp_path / "ck", tmp_path / "trace"
    # A long exit watchdog: this test is about the stop and the resume, and a loaded machine's
    # slow interpreter exit must not read as a crash (the watchdog has tests of its own).
    common = dict(DLSCALE_JOB_ID="job-e2e", DLSCALE_CHECKPOINT_DIR=ck, DLSCALE_EXIT_WATCHDOG_S="120")
    args = [str(EXAMPLE), "--total-steps", str(TOTAL), "--log-every", "1", "--trace", str(trace),
            "--checkpoint-every", "25"]

    # 1) one plain process, batch 32; stop it once it has done >= 30 steps.
    a = procs([python_exe(), *args, "--step-sleep", "0.03"],
              clean_env(**common, DLSCALE_WORLD_SIZE=1, DLSCALE_BATCH_SIZE=32))
    a.wait_for(STEP_LINE, 60, lambda m: int(m.group(1)) >= 30)
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 75, a.output  # EXIT_STOPPED
    n1, seen1 = map(int, one(r"^dlscale: stopped step=(\d+) samples_seen=(\d+) exit_code=75$", a.output))
    assert f"dlscale: checkpoint step={n1}" in a.output  # (skipped only if a periodic one had it)
    assert seen1 == 32 * n1 and 30 <= n1 < TOTAL
    assert "dlscale: resumed" not in a.output

    # 2) torchrun with 2 workers x 24; stop it after >= 20 more steps.
    b = procs([python_exe(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *args,
               "--step-sleep", "0.03"],
              clean_env(**common, DLSCALE_WORLD_SIZE=2, DLSCALE_BATCH_SIZE=48, DLSCALE_LOCAL_BATCH_SIZE=24))
    b.wait_for(STEP_LINE, 90, lambda m: int(m.group(1)) >= n1 + 20)
    b.signal(signal.SIGTERM)  # to torchrun, which forwards it to both workers
    b.wait(60)  # torchrun itself exits 1 after a SIGTERM (SignalException), whatever the workers did
    assert one(r"^dlscale: resumed step=(\d+) samples_seen=(\d+) world_size=(\d+) batch_size=(\d+)$",
               b.output) == (str(n1), str(seen1), "2", "48")
    n2, seen2 = map(int, one(r"^dlscale: stopped step=(\d+) samples_seen=(\d+) exit_code=75$", b.output))
    assert seen2 == seen1 + 48 * (n2 - n1)
    steps_b = parse_steps(b.output)
    assert steps_b[0][0] == n1 + 1 and all(s[3:] == (2, 48) for s in steps_b)
    assert b.output.count("dlscale: step=") == len(steps_b)  # rank 0 only logs: no duplicates

    # 3) one plain process, batch 64, to the end; progress goes to the local "server".
    c = procs([python_exe(), *args],
              clean_env(**common, DLSCALE_LOCAL_BATCH_SIZE=64, DLSCALE_API=metrics_server.url,
                        DLSCALE_TOKEN="tok", DLSCALE_METRICS_INTERVAL="0.2"))
    assert c.wait(60) == 0, c.output
    assert one(r"^dlscale: resumed step=(\d+) samples_seen=(\d+) world_size=(\d+) batch_size=(\d+)$",
               c.output) == (str(n2), str(seen2), "1", "64")
    final_seen = seen2 + 64 * (TOTAL - n2)
    assert one(r"^dlscale: done step=(\d+) samples_seen=(\d+)$", c.output) == (str(TOTAL), str(final_seen))
    assert parse_steps(c.output)[0][0] == n2 + 1

    # Started again after the end: nothing to do, no step run, still "done".
    d = procs([python_exe(), *args], clean_env(**common, DLSCALE_LOCAL_BATCH_SIZE=8))
    assert d.wait(60) == 0, d.output
    assert f"dlscale: done step={TOTAL} samples_seen={final_seen}" in d.output
    assert not parse_steps(d.output)

    # Every step 1..TOTAL ran exactly once, by all workers of its group, and the data stream was
    # consumed contiguously from 0 with no gap or overlap, across the three world sizes.
    records = [json.loads(line) for f in sorted(tmp_path.glob("trace.rank*")) for line in f.read_text().splitlines()]
    by_step = {}
    for r in records:
        by_step.setdefault(r["step"], []).append(r)
    assert sorted(by_step) == list(range(1, TOTAL + 1))
    for step, rs in by_step.items():
        assert sorted(r["rank"] for r in rs) == list(range(rs[0]["world_size"])), (step, rs)
        expected_ws = 1 if step <= n1 or step > n2 else 2
        assert rs[0]["world_size"] == expected_ws, (step, rs)
    pos = 0
    for r in sorted(records, key=lambda r: r["offset"]):
        assert r["offset"] == pos, r
        pos += r["count"]
    assert pos == final_seen

    # Loss fell: the first logged loss (fresh model) vs the last ones.
    losses = [s[1] for s in parse_steps(a.output) + steps_b + parse_steps(c.output)]
    assert losses[0] > 2.0 and max(losses[-10:]) < 0.5 * losses[0], losses

    # Checkpoints: only the newest two, complete files, the newest at TOTAL.
    names = sorted(p.name for p in Path(ck).iterdir())
    assert names[-1] == f"step-{TOTAL:010d}.pt" and len(names) <= 2, names

    # Metrics reached the server with the bearer token; the last one is the final step.
    reqs = metrics_server.wait_for(1)
    assert all(path == "/v1/jobs/job-e2e/metrics" and h["Authorization"] == "Bearer tok" for path, h, _ in reqs)
    last = reqs[-1][2]
    assert last["step"] == TOTAL and last["samples_seen"] == final_seen
    assert last["batch_size"] == 64 and last["world_size"] == 1 and last["samples_per_s"] > 0
