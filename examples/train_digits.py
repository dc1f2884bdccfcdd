#!/usr/bin/env python3
"""A real (small) elastic training job: an MLP on scikit-learn's handwritten digits.

Runs as one plain process or under torchrun (gloo, DistributedDataParallel):

    python examples/train_digits.py --total-steps 300
    torchrun --standalone --nproc-per-node=2 examples/train_digits.py

Allocation from the environment (see python/README.md): DLSCALE_LOCAL_BATCH_SIZE is the
per-worker batch, DLSCALE_CHECKPOINT_DIR enables checkpoint/resume, DLSCALE_API/DLSCALE_JOB_ID
enable progress reports. On SIGTERM it checkpoints after the current step and exits; started
again (with any world size / batch) it resumes at the exact step and sample position.
"""
import argparse
import datetime
import json
import os
import sys

import dlscale

# Flags default to env so a launcher that can only set env (dlscale, Slurm) can drive them.
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--total-steps", type=int, default=int(os.environ.get("DLSCALE_TOTAL_STEPS", "300")),
               help="train until the global step counter reaches this (env DLSCALE_TOTAL_STEPS, default 300)")
p.add_argument("--step-sleep", type=float, default=float(os.environ.get("DLSCALE_STEP_SLEEP", "0")),
               help="extra seconds per step, to make a run last long enough to rescale (env DLSCALE_STEP_SLEEP)")
p.add_argument("--base-lr", type=float, default=0.05, help="LR tuned for --base-batch (default 0.05)")
p.add_argument("--base-batch", type=int, default=32, help="global batch --base-lr was tuned for (default 32)")
p.add_argument("--lr-rule", choices=["linear", "sqrt", "none"], default=os.environ.get("DLSCALE_LR_RULE", "linear"),
               help="how the LR follows the global batch (env DLSCALE_LR_RULE, default linear)")
p.add_argument("--seed", type=int, default=0, help="model init and data order seed")
p.add_argument("--log-every", type=int, default=int(os.environ.get("DLSCALE_LOG_EVERY", "10")),
               help="steps per 'dlscale: step=' line / metrics report (env DLSCALE_LOG_EVERY, default 10)")
p.add_argument("--checkpoint-every", type=int, default=int(os.environ.get("DLSCALE_CHECKPOINT_EVERY", "100")),
               help="periodic checkpoint every N steps, 0 = only on stop/finish (env DLSCALE_CHECKPOINT_EVERY)")
p.add_argument("--measure-noise", action="store_true",
               default=os.environ.get("DLSCALE_MEASURE_NOISE", "0") == "1",
               help="measure the gradient noise scale and report it (env DLSCALE_MEASURE_NOISE=1); on one "
                    "worker each step is then two micro-batches")
p.add_argument("--init-batch", type=int, default=int(os.environ.get("DLSCALE_TEST_INIT_BATCH", "32")),
               help="the batch the server counts progress in: the submission's batch_size, else min_batch "
                    "(default 32)")
p.add_argument("--noise-window-samples", type=float, default=None,
               help="smoothing time constant of the noise estimate, samples (default: the library's)")
p.add_argument("--trace", default=os.environ.get("DLSCALE_TRACE"),
               help="append one JSON line per step and rank (step, stream offset, count) to TRACE.rank<R> (tests)")
args = p.parse_args()
if args.total_steps < 0 or args.step_sleep < 0 or args.init_batch < 1:
    p.error("--total-steps and --step-sleep must be >= 0, --init-batch >= 1")

# Env first: installs the SIGTERM handler before the (slow) torch import.
job = dlscale.init(log_every=args.log_every, checkpoint_every=args.checkpoint_every)

import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
distributed = job.world_size > 1
if distributed:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    assert dist.get_rank() == job.rank and dist.get_world_size() == job.world_size

# Data: 1797 8x8 images, 10 classes. Last 297 held out for a final accuracy check.
digits = load_digits()
X_all = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y_all = torch.tensor(digits.target, dtype=torch.long)
X, y, X_test, y_test = X_all[:1500], y_all[:1500], X_all[1500:], y_all[1500:]
sampler = dlscale.ElasticSampler(len(X), seed=args.seed)

torch.manual_seed(args.seed)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr, momentum=0.9)
# Loads the newest checkpoint, if any; keeps the LR scaled for the job's batch from now on.
job.resume(model, optimizer, base_batch=args.base_batch, lr_rule=args.lr_rule)
if job.is_chief:
    print(f"train_digits: world_size={job.world_size} local_batch={job.local_batch_size} "
          f"batch_size={job.batch_size} lr={optimizer.param_groups[0]['lr']:.4g} rule={args.lr_rule} "
          f"start_step={job.step} total_steps={args.total_steps}", flush=True)
ddp = nn.parallel.DistributedDataParallel(model) if distributed else model
loss_fn = nn.CrossEntropyLoss()
# Each step runs in DLSCALE_ACCUM_STEPS micro-batches (what fits a GPU). One worker measures
# noise from at least two micro-batches per step, several from DDP's all-reduce. The two halves
# of an odd batch differ by one sample; the probe weighs them exactly. A batch of one sample is
# one backward pass, which measures nothing (the probe skips such steps).
def micro_batches_for(local_batch: int) -> int:
    noise = 2 if args.measure_noise and not distributed and local_batch >= 2 else 1
    return max(job.alloc.accum_steps, noise)


micro_batches = micro_batches_for(job.local_batch_size)
if args.measure_noise:
    job.measure_grad_noise(ddp, init_batch_size=args.init_batch, window_samples=args.noise_window_samples)

trace = open(f"{args.trace}.rank{job.rank}", "a") if args.trace else None
while job.step < args.total_steps:
    offset = job.samples_seen + job.rank * job.local_batch_size
    idx = torch.tensor(sampler.local_indices(job.samples_seen, job.local_batch_size, job.rank))
    optimizer.zero_grad(set_to_none=True)
    loss = 0.0
    for (inputs, targets), weight in job.micro_batches((X[idx], y[idx]), ddp, parts=micro_batches):
        part_loss = loss_fn(ddp(inputs), targets) * weight
        part_loss.backward()
        loss = loss + part_loss.detach()
    optimizer.step()
    if trace:
        trace.write(json.dumps({"step": job.step + 1, "rank": job.rank, "world_size": job.world_size,
                                "offset": offset, "count": job.local_batch_size}) + "\n")
        trace.flush()
    if args.step_sleep:
        time.sleep(args.step_sleep)
    # Counts the step; after a SIGTERM it checkpoints and exits (a restart resumes right after
    # this step); True when the server changed the batch in place (batch_in_place jobs).
    if job.step_done(loss):
        micro_batches = micro_batches_for(job.local_batch_size)

if job.is_chief:
    with torch.no_grad():
        acc = (model(X_test).argmax(1) == y_test).float().mean().item()
    print(f"train_digits: test_accuracy={acc:.3f}", flush=True)
job.finish()
if distributed:
    dist.destroy_process_group()
sys.exit(dlscale.EXIT_DONE)
