#!/usr/bin/env python3
"""A PyTorch Lightning script as people write it: a LightningModule with an optimizer and a
step-wise cosine schedule, a DataLoader with a worker, DDP under torchrun, ``max_steps``.
``lit_dlscale.py`` is the same script as a dlscale job (the diff is in python/README.md)."""
import argparse
import os

import lightning.pytorch as L
import torch
from dlscale.lightning import DlscaleCallback
import torch.nn as nn
from sklearn.datasets import load_digits
from torch.utils.data import TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--max-steps", type=int, default=2000)
p.add_argument("--batch-size", type=int, default=32, help="global batch the LR is tuned for")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--out", default="lightning_runs", help="Lightning's own files")
args = p.parse_args()


class DigitsClassifier(L.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return nn.functional.cross_entropy(self.net(images), labels)

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.max_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
digits = load_digits()
dataset = TensorDataset(torch.tensor(digits.data, dtype=torch.float32) / 16.0, torch.tensor(digits.target))
world, local_world = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
dls = DlscaleCallback(base_batch=args.batch_size)
loader = dls.job.loader(dataset, num_workers=1, persistent_workers=True)
torch.manual_seed(0)
trainer = L.Trainer(max_steps=args.max_steps, accelerator="cpu", devices=local_world, num_nodes=world // local_world,
                    strategy="ddp" if world > 1 else "auto", default_root_dir=args.out, logger=False,
                    enable_progress_bar=False, enable_model_summary=False, callbacks=[dls], enable_checkpointing=False)
trainer.fit(DigitsClassifier(args.lr), train_dataloaders=loader)
