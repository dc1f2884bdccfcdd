#!/usr/bin/env python3
"""A plain PyTorch training loop as people write it: a Dataset, a DataLoader with a worker and a
collate_fn, DistributedDataParallel under torchrun, SGD with a cosine schedule, epochs.
``loop_dlscale.py`` is the same script as a dlscale job (the diff is in python/README.md)."""
import argparse
import os

import dlscale
import torch
import torch.distributed as dist
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import Dataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=20)
p.add_argument("--batch-size", type=int, default=32, help="global batch the LR is tuned for")
p.add_argument("--lr", type=float, default=0.05)
args = p.parse_args()


class Digits(Dataset):
    """scikit-learn's 8x8 handwritten digits as (image, label) tensors."""

    def __init__(self):
        digits = load_digits()
        self.x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
        self.y = torch.tensor(digits.target, dtype=torch.long)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def collate(samples):
    images, labels = zip(*samples)
    return torch.stack(images), torch.stack(labels)


job = dlscale.init()
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    dist.init_process_group("gloo")
world, rank = (dist.get_world_size(), dist.get_rank()) if distributed else (1, 0)

dataset = Digits()
loader = job.loader(dataset, num_workers=1, persistent_workers=True, collate_fn=collate)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
job.resume(model, optimizer, base_batch=args.batch_size, scheduler=scheduler)
ddp = nn.parallel.DistributedDataParallel(model) if distributed else model
job.measure_grad_noise(ddp, init_batch_size=args.batch_size)
loss_fn = nn.CrossEntropyLoss()

for epoch in range(loader.epoch, args.epochs):
    for images, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(images), labels)
        loss.backward()
        optimizer.step()
        scheduler.step()
        job.step_done(loss)
    if rank == 0:
        print(f"epoch={epoch} loss={loss.item():.4f}", flush=True)
job.finish()
if distributed:
    dist.destroy_process_group()
