#!/usr/bin/env python3
"""A training program that does NOT use the dlscale worker library: the contract by hand.

It is what many existing scripts already do, and all dlscale needs (README, "The contract with
a training program"):

* read the allocation from the environment (``DLSCALE_WORLD_SIZE``, ``DLSCALE_BATCH_SIZE``,
  ``DLSCALE_CHECKPOINT_DIR``, ...);
* resume from the newest checkpoint in ``DLSCALE_CHECKPOINT_DIR`` (written atomically:
  a temporary file, fsync, rename);
* on SIGTERM finish the current step, checkpoint and exit (here with code 0: dlscale counts an
  exit after its stop request as a stop, whatever the code);
* exit 0 once training is done.

The "training" is a counter: each step sleeps ``--step-s`` seconds. ``--trace FILE`` appends one
JSON line per finished step (``step``, ``attempt``, ``pid``, ``host``), which the tests and the
fault soak use to check that every step ran exactly once. ``--checkpoint-every N`` also saves a
checkpoint every N steps, so that a worker killed with SIGKILL loses at most N - 1 steps.
``--report-every N`` posts a progress report every N steps (``POST $DLSCALE_API/v1/jobs/<id>/metrics``
with the job's ``DLSCALE_TOKEN``), as the worker library does: the measured samples/s the
dashboard shows beside the prediction.
"""
import argparse
import json
import os
import signal
import socket
import sys
import time
import urllib.request

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--steps", type=int, required=True, help="train until this many steps are done")
p.add_argument("--step-s", type=float, default=0.1, help="seconds one step takes (default 0.1)")
p.add_argument("--checkpoint-every", type=int, default=0, help="periodic checkpoint every N steps")
p.add_argument("--trace", help="append one JSON line per finished step to this file")
p.add_argument("--ignore-sigterm", action="store_true", help="misbehave: never stop on SIGTERM")
p.add_argument("--report-every", type=int, default=0, help="post a progress report every N steps")
args = p.parse_args()

ckpt_dir = os.environ.get("DLSCALE_CHECKPOINT_DIR")
state_path = os.path.join(ckpt_dir, "plain-state.json") if ckpt_dir else None
attempt = int(os.environ.get("DLSCALE_ATTEMPT", "0"))
stop = False


def on_term(signum, frame):
    global stop
    stop = not args.ignore_sigterm


signal.signal(signal.SIGTERM, on_term)


def load():
    """The step and the samples seen of the newest checkpoint."""
    try:
        with open(state_path) as f:
            state = json.load(f)
            return int(state["step"]), int(state.get("samples", 0))
    except (TypeError, FileNotFoundError):
        return 0, 0
    except (ValueError, KeyError) as exc:  # never written half (atomic rename): say so loudly
        sys.exit(f"plain_job: unreadable checkpoint {state_path}: {exc}")


def save(step):
    if not state_path:
        return
    tmp = f"{state_path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"step": step, "samples": samples}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, state_path)


def report(step, samples_per_s):
    """Posts a progress report; a server that cannot take it is not the program's problem."""
    api, token, job = (os.environ.get(k) for k in ("DLSCALE_API", "DLSCALE_TOKEN", "DLSCALE_JOB_ID"))
    if not (api and token and job):
        return
    body = json.dumps({"step": step, "samples_per_s": samples_per_s, "batch_size": batch,
                       "world_size": int(os.environ.get("DLSCALE_WORLD_SIZE", "1")),
                       "samples_seen": samples, "attempt": attempt}).encode()
    request = urllib.request.Request(f"{api}/v1/jobs/{job}/metrics", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=5).close()
    except OSError as exc:
        print(f"plain_job: report not taken: {exc}", flush=True)


step, samples = load()
batch = int(os.environ.get("DLSCALE_BATCH_SIZE", "1"))
print(f"plain_job: start step={step} attempt={attempt} world_size={os.environ.get('DLSCALE_WORLD_SIZE')} "
      f"batch_size={os.environ.get('DLSCALE_BATCH_SIZE')} pid={os.getpid()}", flush=True)
trace = open(args.trace, "a") if args.trace else None
host = socket.gethostname()
last = (step, time.monotonic())
while step < args.steps:
    time.sleep(args.step_s)
    step += 1
    samples += batch
    if args.report_every and step % args.report_every == 0:
        now = time.monotonic()
        report(step, batch * (step - last[0]) / max(now - last[1], 1e-9))
        last = (step, now)
    if trace:
        trace.write(json.dumps({"step": step, "attempt": attempt, "pid": os.getpid(), "host": host}) + "\n")
        trace.flush()
    if args.checkpoint_every and step % args.checkpoint_every == 0:
        save(step)
    if stop:
        save(step)
        print(f"plain_job: stopped step={step}", flush=True)
        sys.exit(0)
save(step)
print(f"plain_job: done step={step}", flush=True)
