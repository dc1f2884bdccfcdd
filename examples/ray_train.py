#!/usr/bin/env python3
"""A real (small) Ray Train job run by dlscale: an MLP on scikit-learn's handwritten digits, a
TorchTrainer with gloo on CPU (NCCL on GPUs), DistributedDataParallel over its workers.

    DLSCALE_WORLD_SIZE=2 DLSCALE_BATCH_SIZE=64 DLSCALE_CHECKPOINT_DIR=/tmp/ck \\
      DLSCALE_RAY_RUN_NAME=digits DLSCALE_RAY_RESOURCE=fake_gpu RAY_ADDRESS=127.0.0.1:6379 \\
      python examples/ray_train.py --total-samples 20000

The allocation comes from the environment (python/README.md, "Ray Train"): the number of Train
workers (DLSCALE_WORLD_SIZE), the per-worker batch, the Ray resource each worker takes one unit
of (DLSCALE_RAY_RESOURCE), the run name and storage (DLSCALE_RAY_RUN_NAME,
DLSCALE_CHECKPOINT_DIR). SIGTERM to this driver (what Ray's job supervisor sends on a stop): every
worker checkpoints after the same step, the driver exits with 75. Started again with the same run
name and storage, at any worker count and batch, it resumes at the exact step and sample.
"""
import argparse
import os

import dlscale.ray_train as dlray

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--total-samples", type=int, default=int(os.environ.get("DLSCALE_TOTAL_SAMPLES", "19200")),
               help="train until this many samples were seen, at whatever batches (env "
                    "DLSCALE_TOTAL_SAMPLES, default 19200: 300 steps at batch 64)")
p.add_argument("--step-sleep", type=float, default=float(os.environ.get("DLSCALE_STEP_SLEEP", "0")),
               help="extra seconds per step, to make a run last long enough to rescale (env DLSCALE_STEP_SLEEP)")
p.add_argument("--base-lr", type=float, default=0.05, help="LR tuned for --base-batch (default 0.05)")
p.add_argument("--base-batch", type=int, default=32, help="global batch --base-lr was tuned for (default 32)")
p.add_argument("--log-every", type=int, default=int(os.environ.get("DLSCALE_LOG_EVERY", "10")),
               help="steps per 'dlscale: step=' line / metrics report (env DLSCALE_LOG_EVERY, default 10)")
p.add_argument("--checkpoint-every", type=int, default=int(os.environ.get("DLSCALE_CHECKPOINT_EVERY", "0")),
               help="periodic checkpoint every N steps, 0 = only on stop/finish (env DLSCALE_CHECKPOINT_EVERY)")
p.add_argument("--measure-noise", action="store_true", default=os.environ.get("DLSCALE_MEASURE_NOISE", "0") == "1",
               help="measure the gradient noise scale and report it (env DLSCALE_MEASURE_NOISE=1)")
p.add_argument("--init-batch", type=int, default=int(os.environ.get("DLSCALE_TEST_INIT_BATCH", "32")),
               help="the batch the server counts progress in (the submission's batch_size, else min_batch)")
p.add_argument("--cpus-per-worker", type=float,
               default=float(os.environ["DLSCALE_RAY_CPUS_PER_WORKER"]) if os.environ.get("DLSCALE_RAY_CPUS_PER_WORKER") else None,
               help="CPUs each Train worker reserves besides its DLSCALE_RAY_RESOURCE (env "
                    "DLSCALE_RAY_CPUS_PER_WORKER; default: none with a resource, else Ray's one)")
args = p.parse_args()
if args.total_samples < 0 or args.step_sleep < 0 or args.init_batch < 1:
    p.error("--total-samples and --step-sleep must be >= 0, --init-batch >= 1")


def train_func(config):
    # Each Train worker: the allocation, Ray Train's rank and checkpoints, the driver's stop.
    job = dlray.init(log_every=config["log_every"], checkpoint_every=config["checkpoint_every"])

    import time

    import ray.train.torch
    import torch
    import torch.nn as nn
    from sklearn.datasets import load_digits
    from torch.utils.data import TensorDataset

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    digits = load_digits()
    X = torch.tensor(digits.data[:1500], dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target[:1500], dtype=torch.long)
    dataset = TensorDataset(X, y)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["base_lr"], momentum=0.9)
    # The newest checkpoint of the run (ray.train.get_checkpoint()), if any; the LR scaled for the
    # job's batch from here on.
    job.resume(model, optimizer, base_batch=config["base_batch"])
    ddp = ray.train.torch.prepare_model(model)  # DistributedDataParallel with more than one worker
    distributed = job.world_size > 1
    if config["measure_noise"]:
        job.measure_grad_noise(ddp, init_batch_size=config["init_batch"])
    loss_fn = nn.CrossEntropyLoss()
    # This worker's share of each global batch (not ray.train.torch.prepare_data_loader: the
    # loader already splits the batch among the workers).
    loader = job.loader(dataset)

    def parts():  # one worker measures the noise from two micro-batches per step
        noise = 2 if config["measure_noise"] and not distributed and job.local_batch_size >= 2 else 1
        return max(job.alloc.accum_steps, noise)

    total = config["total_samples"]
    while job.samples_seen < total:
        for batch in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for (inputs, targets), weight in job.micro_batches(batch, ddp, parts=parts()):
                part = loss_fn(ddp(inputs), targets) * weight
                part.backward()
                loss = loss + part.detach()
            optimizer.step()
            if config["step_sleep"]:
                time.sleep(config["step_sleep"])
            job.step_done(loss)  # after a stop: checkpoint (ray.train.report) and leave the loop
            if job.samples_seen >= total:
                break
    job.finish()


if __name__ == "__main__":
    dlray.fit(train_func, {
        "total_samples": args.total_samples, "step_sleep": args.step_sleep, "base_lr": args.base_lr,
        "base_batch": args.base_batch, "log_every": args.log_every, "checkpoint_every": args.checkpoint_every,
        "measure_noise": args.measure_noise, "init_batch": args.init_batch,
    }, cpus_per_worker=args.cpus_per_worker)
