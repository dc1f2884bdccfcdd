#!/usr/bin/env python3
"""The worker library's per-step overhead against a bare loop (issue 28: at most 1 %).

Trains the ``examples/adopt`` model (an MLP on scikit-learn's digits, a DataLoader with the
example's collate_fn, SGD, in one process) twice over the same steps: a bare loop (a plain
DataLoader, nothing else) and the same loop as a dlscale job (``job.loader`` and
``job.step_done(loss)`` each step, with a log window and a report every ``--log-every`` steps
to nowhere). The two alternate ``--rounds`` times; the overhead is the median over rounds of
(dlscale - bare) / bare step time. Every number printed is measured in this run. Exits 1 when the
overhead is above ``--target-pct``.

    OMP_NUM_THREADS=1 python python/bench/step_overhead.py
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
import dlscale  # noqa: E402

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--steps", type=int, default=1000, help="steps per loop and round (default 1000)")
p.add_argument("--rounds", type=int, default=15, help="alternating rounds (default 15)")
p.add_argument("--batch", type=int, default=32, help="batch (default 32)")
p.add_argument("--hidden", type=int, default=512, help="the MLP's hidden width (default 512)")
p.add_argument("--log-every", type=int, default=10, help="the job's log window, steps (default 10)")
p.add_argument("--target-pct", type=float, default=1.0, help="fail above this overhead (default 1)")
args = p.parse_args()
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one CPU: no migrations between loops

digits = load_digits()
dataset = TensorDataset(torch.tensor(digits.data, dtype=torch.float32) / 16.0,
                        torch.tensor(digits.target, dtype=torch.long))
loss_fn = nn.CrossEntropyLoss()


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def step(model, optimizer, images, labels):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss


def bare() -> float:
    model, optimizer = build()
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, drop_last=True)
    done, t0 = 0, time.perf_counter()
    while done < args.steps:
        for images, labels in loader:
            step(model, optimizer, images, labels)
            done += 1
            if done == args.steps:
                break
    return (time.perf_counter() - t0) / args.steps


def with_dlscale(checkpoints: str) -> float:
    env = {"DLSCALE_LOCAL_BATCH_SIZE": str(args.batch), "DLSCALE_CHECKPOINT_DIR": checkpoints}
    job = dlscale.Job(environ=env, log_every=args.log_every, install_signals=False, report_interval=0)
    model, optimizer = build()
    job.resume(model, optimizer, base_batch=args.batch)
    loader = job.loader(dataset)
    t0 = time.perf_counter()
    while job.step < args.steps:
        for images, labels in loader:
            job.step_done(step(model, optimizer, images, labels))
            if job.step == args.steps:
                break
    return (time.perf_counter() - t0) / args.steps


overheads, bare_s, job_s = [], [], []
with tempfile.TemporaryDirectory() as checkpoints, open(os.devnull, "w") as devnull:
    for _ in range(args.rounds):
        b = bare()
        stdout, sys.stdout = sys.stdout, devnull  # the job's progress lines
        try:
            j = with_dlscale(checkpoints)
        finally:
            sys.stdout = stdout
        bare_s.append(b)
        job_s.append(j)
        overheads.append(100.0 * (j - b) / b)
median = statistics.median(overheads)
print(f"step_overhead: {args.rounds} rounds of {args.steps} steps, batch {args.batch}, hidden {args.hidden}, "
      f"log every {args.log_every}")
print(f"bare loop: median {1e6 * statistics.median(bare_s):.0f} us/step; with dlscale: median "
      f"{1e6 * statistics.median(job_s):.0f} us/step")
print(f"overhead: median {median:+.2f} % (rounds: {', '.join(f'{o:+.2f}' for o in overheads)}); "
      f"target <= {args.target_pct} %: {'met' if median <= args.target_pct else 'NOT met'}")
sys.exit(0 if median <= args.target_pct else 1)
