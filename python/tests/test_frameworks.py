"""The Lightning and Hugging Face integrations refuse what they cannot do, by name, before a step:
no max_steps for the Trainer (an elastic batch gives an epoch no fixed number of steps), and
gradient accumulation in either framework. (The end-to-end runs under ``dlscale serve`` are in
crates/dlscale-cli/tests/service_adopt_e2e.rs.)"""
import pytest
from conftest import require

torch = require("torch")

from dlscale import Allocation, Job  # noqa: E402


def job(accum_steps=1):
    alloc = Allocation(job_id="f", rank=0, local_rank=0, world_size=1, local_batch_size=8, batch_size=8,
                       checkpoint_dir=None, api=None, token=None, accum_steps=accum_steps)
    return Job(alloc, install_signals=False, report_interval=0)


class Pairs(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"input_ids": torch.tensor([i % 8, (i + 1) % 8]), "labels": torch.tensor([i % 8, (i + 1) % 8])}


def hf_trainer(tmp_path, **args):
    require("transformers")
    require("accelerate")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=2, n_embd=8, n_layer=1, n_head=1,
                                       bos_token_id=0, eos_token_id=0))
    training_args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **args)
    return Trainer(model=model, args=training_args, train_dataset=Pairs())


def test_the_trainer_needs_max_steps(tmp_path):
    import dlscale.hf

    with pytest.raises(ValueError, match=r"set TrainingArguments\(max_steps=...\)"):
        dlscale.hf.prepare(hf_trainer(tmp_path), base_batch=8, job=job())


def test_the_trainer_refuses_accumulation(tmp_path):
    import dlscale.hf

    with pytest.raises(ValueError, match="gradient accumulation is not supported"):
        dlscale.hf.prepare(hf_trainer(tmp_path, max_steps=4, gradient_accumulation_steps=2), job=job())
    with pytest.raises(ValueError, match="gradient accumulation is not supported"):
        dlscale.hf.prepare(hf_trainer(tmp_path, max_steps=4), job=job(accum_steps=2))


def test_lightning_refuses_accumulation(tmp_path):
    L = require("lightning.pytorch")
    from dlscale.lightning import DlscaleCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    callback = DlscaleCallback(base_batch=8, job=job())
    trainer = L.Trainer(max_steps=2, accelerator="cpu", devices=1, accumulate_grad_batches=2, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[callback], default_root_dir=str(tmp_path))
    with pytest.raises(ValueError, match="gradient accumulation is not supported"):
        trainer.fit(Module(), train_dataloaders=callback.job.loader(torch.randn(32, 2)))


def test_lightning_epochs_end_with_the_data_epochs_through_rebatches(tmp_path):
    # Lightning counts an epoch's batches when it starts (len(loader)) and ends the epoch there:
    # after a batch grown in place the pass ended before that count (the epoch-wise scheduler
    # missed its step, no validation ran), after one shrunk the epoch ended before the data epoch
    # did (it stepped twice in one, and validated in the middle).
    L = require("lightning.pytorch")
    import json

    from dlscale.lightning import DlscaleCallback

    n = 24
    alloc = Allocation(job_id="f", rank=0, local_rank=0, world_size=1, local_batch_size=4, batch_size=4,
                       checkpoint_dir=None, api=None, token=None)
    job = Job(alloc, log_every=2, install_signals=False, report_interval=0)

    def answer(batch):
        job.reporter._take_answer(json.dumps({"batch": {"batch_size": batch, "local_batch_size": batch,
                                                        "micro_steps": 1}}).encode())

    seen = []  # (stream position of the step's batch, its LR, its samples)
    validated = []  # samples_seen at each validation

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(1, 1)

        def training_step(self, batch, batch_idx):
            x, index = batch
            seen.append((job.samples_seen, self.optimizers().param_groups[0]["lr"], index.tolist()))
            if job.samples_seen == n:
                answer(2)  # taken at step 6's window, in the middle of the second epoch
            return self.net(x).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            if batch_idx == 0:
                validated.append(job.samples_seen)

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]

    data = torch.utils.data.TensorDataset(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.arange(n))
    callback = DlscaleCallback(job=job)
    answer(8)  # taken at step 2's window, in the middle of the first epoch
    trainer = L.Trainer(max_steps=12, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback],
                        default_root_dir=str(tmp_path), num_sanity_val_steps=0)
    trainer.fit(Module(), train_dataloaders=job.loader(data, seed=1),
                val_dataloaders=torch.utils.data.DataLoader(data, batch_size=n))
    # The batch sizes went 4, 8, 2: every sample once per epoch, and the LR halved at each
    # data epoch's end, not before or after.
    assert [len(s) for _, _, s in seen] == [4, 4, 8, 8, 8, 8, 2, 2, 2, 2, 2, 2]
    samples = [i for _, _, s in seen for i in s]
    for lo in range(0, len(samples) - n + 1, n):
        assert sorted(samples[lo:lo + n]) == list(range(n))
    assert [lr for _, lr, _ in seen] == [pytest.approx(0.1 * 0.5 ** (p // n)) for p, _, _ in seen]
    assert validated == [n, 2 * n]  # once per epoch, at its end
