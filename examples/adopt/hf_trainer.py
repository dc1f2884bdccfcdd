#!/usr/bin/env python3
"""A Hugging Face Trainer script as people write it: a small GPT-2 built from a config (no
download) learning a toy language (each token follows the previous one), TrainingArguments with a
warmup and a linear schedule, DDP under torchrun. ``hf_trainer_dlscale.py`` is the same script as
a dlscale job (the diff is in python/README.md)."""
import argparse
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--max-steps", type=int, default=1000)
p.add_argument("--batch-size", type=int, default=32, help="global batch the LR is tuned for")
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--out", default="hf_runs", help="the Trainer's own files")
args = p.parse_args()


class CountingSequences(torch.utils.data.Dataset):
    """Sequences of 16 tokens counting up from a random start, modulo the vocabulary."""

    def __init__(self, n=2048, length=16, vocab=64):
        starts = torch.randint(0, vocab, (n, 1), generator=torch.Generator().manual_seed(0))
        self.ids = (starts + torch.arange(length)) % vocab

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                   bos_token_id=0, eos_token_id=0))
training_args = TrainingArguments(
    output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size // world,
    learning_rate=args.lr, lr_scheduler_type="linear", warmup_steps=20, logging_steps=50, seed=0,
    use_cpu=True, ddp_backend="gloo" if world > 1 else None, ddp_find_unused_parameters=False,
    report_to="none", disable_tqdm=True)
trainer = Trainer(model=model, args=training_args, train_dataset=CountingSequences())
trainer.train()
