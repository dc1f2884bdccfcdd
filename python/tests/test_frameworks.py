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
