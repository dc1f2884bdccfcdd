import os
import random


from conftest import require  # noqa: E402

torch = require("torch")

from dlscale import Job, list_checkpoints, load_latest_checkpoint, save_checkpoint  # noqa: E402
from dlscale.checkpoint import FORMAT_VERSION  # noqa: E402


def make(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt


def train_steps(job, model, opt, n):
    for _ in range(n):
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        job.step_done(loss=loss.item())


def test_atomic_save_prunes_and_skips_damaged(tmp_path):
    d = str(tmp_path / "ck")
    for step in (1, 2, 3):
        save_checkpoint(d, step, {"format": FORMAT_VERSION, "step": step}, keep=2)
    assert [s for s, _ in list_checkpoints(d)] == [3, 2]
    assert not [n for n in os.listdir(d) if n.startswith(".")]  # no temp files left
    # A damaged newest file (not something our writer can produce, but disks fail): fall back.
    with open(os.path.join(d, "step-0000000004.pt"), "wb") as f:
        f.write(b"garbage")
    path, state = load_latest_checkpoint(d)
    assert state["step"] == 3 and path.endswith("step-0000000003.pt")
    assert load_latest_checkpoint(str(tmp_path / "missing")) is None
    assert load_latest_checkpoint(None) is None


def test_job_resume_restores_everything(tmp_path, capsys):
    env = {"DLSCALE_CHECKPOINT_DIR": str(tmp_path), "DLSCALE_LOCAL_BATCH_SIZE": "8"}
    job = Job(environ=env, install_signals=False, log_every=100)
    model, opt = make()
    assert job.resume(model, opt, lr=0.1) is False
    train_steps(job, model, opt, 5)
    job.extra["epoch_note"] = "five"
    job.checkpoint()
    expected_next = (random.random(), torch.rand(3), random.random())  # what a resumed run must draw
    assert "dlscale: checkpoint step=5" in capsys.readouterr().out

    # A "new process" with another batch size: resume into fresh objects.
    env2 = dict(env, DLSCALE_LOCAL_BATCH_SIZE="24")
    job2 = Job(environ=env2, install_signals=False, log_every=100)
    model2, opt2 = make(seed=123)
    assert job2.resume(model2, opt2, lr=0.3) is True
    assert (job2.step, job2.samples_seen, job2.extra) == (5, 40, {"epoch_note": "five"})
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    m1 = opt.state_dict()["state"][0]["momentum_buffer"]
    m2 = opt2.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(m1, m2)
    assert opt2.param_groups[0]["lr"] == 0.3  # the new allocation's LR, not the saved one
    r1, t, r2 = random.random(), torch.rand(3), random.random()
    assert r1 == expected_next[0] and torch.equal(t, expected_next[1]) and r2 == expected_next[2]
    out = capsys.readouterr().out
    assert "dlscale: resumed step=5 samples_seen=40 world_size=1 batch_size=24" in out

    train_steps(job2, model2, opt2, 2)
    assert (job2.step, job2.samples_seen) == (7, 88)
    job2.finish()
    out = capsys.readouterr().out
    assert "dlscale: checkpoint step=7" in out and "dlscale: done step=7 samples_seen=88" in out
    state = load_latest_checkpoint(str(tmp_path))[1]
    assert (state["step"], state["samples_seen"], state["batch_size"]) == (7, 88, 24)


def test_no_checkpoint_dir_warns_once(capsys):
    job = Job(environ={}, install_signals=False)
    model, opt = make()
    job.resume(model, opt)
    train_steps(job, model, opt, 1)
    assert job.checkpoint() is None
    train_steps(job, model, opt, 1)
    assert job.checkpoint() is None
    assert capsys.readouterr().err.count("DLSCALE_CHECKPOINT_DIR is not set") == 1


def test_sigterm_stop_checkpoints_and_exits_with_configured_code(tmp_path, capsys):
    import os
    import signal

    import pytest

    env = {"DLSCALE_CHECKPOINT_DIR": str(tmp_path), "DLSCALE_STOP_EXIT_CODE": "75"}
    before = signal.getsignal(signal.SIGTERM)
    job = Job(environ=env, log_every=100)  # installs the SIGTERM handler
    model, opt = make()
    job.resume(model, opt)
    train_steps(job, model, opt, 3)
    assert not job.should_stop()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as exc:
        train_steps(job, model, opt, 1)  # the step in flight completes; its step_done() stops
    assert exc.value.code == 75
    # Its exit is bounded: the watchdog would end it. Disarmed here, where the exit is caught.
    job.exit_watchdog.cancel()
    assert 0 < signal.alarm(0) <= 10
    assert signal.getsignal(signal.SIGTERM) is before  # handler removed again
    out = capsys.readouterr().out
    assert "dlscale: step=4 " in out  # the partial log window is flushed
    assert "dlscale: checkpoint step=4" in out and "dlscale: stopped step=4 samples_seen=128 exit_code=75" in out
    assert load_latest_checkpoint(str(tmp_path))[1]["step"] == 4


# A stopped worker whose exit hangs: a non-daemon thread the interpreter waits for at exit.
_HANGS_AT_EXIT = r"""
import threading, time
import dlscale
job = dlscale.init()
import torch
model = torch.nn.Linear(4, 2)
job.resume(model, torch.optim.SGD(model.parameters(), lr=0.1))
threading.Thread(target=time.sleep, args=(600,)).start()
job.stop()
"""


def test_a_stopped_process_whose_exit_hangs_is_ended_after_its_checkpoint(tmp_path):
    import subprocess
    import sys
    import time

    from conftest import clean_env
    from dlscale.stop import EXIT_WATCHDOG_S

    start = time.monotonic()
    r = subprocess.run([sys.executable, "-c", _HANGS_AT_EXIT], capture_output=True, text=True,
                       timeout=120, env=clean_env(DLSCALE_CHECKPOINT_DIR=tmp_path))
    elapsed = time.monotonic() - start
    assert r.returncode == 75, (r.returncode, r.stdout, r.stderr)  # its stop code
    assert "dlscale: stopped step=0 samples_seen=0 exit_code=75" in r.stdout, r.stdout
    assert load_latest_checkpoint(str(tmp_path))[1]["step"] == 0
    # Ended by the watchdog, not after the thread's ten minutes (importing torch takes a while).
    assert EXIT_WATCHDOG_S <= elapsed < EXIT_WATCHDOG_S + 60, elapsed
    assert f"dlscale: exit watchdog: still running {EXIT_WATCHDOG_S} s after the checkpoint" in r.stderr, r.stderr


class MemoryStore:
    """A store of the shape Job takes (dlscale.ray_train's is Ray Train's checkpoint API)."""

    sharded = False

    def __init__(self):
        self.saved = []  # (step, state, chief)

    def load_latest(self):
        return ("memory", self.saved[-1][1]) if self.saved else None

    def save(self, step, state, *, chief, sharded=False):
        assert not sharded
        self.saved.append((step, state() if chief else None, chief))
        return f"memory:{step}"


def test_a_job_checkpoints_to_its_store_and_raises_stopped_where_it_must_not_exit(capsys):
    import pytest

    from dlscale import StopFlag, Stopped

    store, flag = MemoryStore(), StopFlag()
    env = {"DLSCALE_LOCAL_BATCH_SIZE": "8", "DLSCALE_STOP_EXIT_CODE": "75"}
    job = Job(environ=env, store=store, stop_flag=flag, exit_on_stop=False, log_every=100)
    model, opt = make()
    assert job.resume(model, opt) is False
    train_steps(job, model, opt, 3)
    flag.set()
    with pytest.raises(Stopped) as exc:
        train_steps(job, model, opt, 1)  # checkpoints to the store, then raises: no exit
    assert exc.value.code == 75 and isinstance(exc.value, SystemExit)
    assert [(step, chief) for step, _, chief in store.saved] == [(4, True)]
    assert store.saved[0][1]["samples_seen"] == 32
    out = capsys.readouterr().out
    assert "dlscale: checkpoint step=4" in out and "dlscale: stopped step=4 samples_seen=32 exit_code=75" in out

    # The next launch resumes from the store, at another batch, and finishes there.
    job2 = Job(environ=dict(env, DLSCALE_LOCAL_BATCH_SIZE="16"), store=store, stop_flag=StopFlag(),
               exit_on_stop=False, log_every=100)
    model2, opt2 = make(seed=1)
    assert job2.resume(model2, opt2) is True and (job2.step, job2.samples_seen) == (4, 32)
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    train_steps(job2, model2, opt2, 2)
    job2.finish()
    assert job2.finished and store.saved[-1][0] == 6 and store.saved[-1][1]["samples_seen"] == 64


def test_a_state_a_resume_cannot_load_is_refused_when_saved(tmp_path):
    import pytest
    from dlscale.checkpoint import UnloadableCheckpoint

    np = require("numpy")

    class Tracker:  # e.g. early stopping that keeps a numpy metric
        def __init__(self):
            self.best = np.float64(0.5)

        def state_dict(self):
            return {"best": self.best}

        def load_state_dict(self, state):
            self.best = state["best"]

    job = Job(environ={"DLSCALE_CHECKPOINT_DIR": str(tmp_path), "DLSCALE_LOCAL_BATCH_SIZE": "8"},
              install_signals=False, log_every=100)
    model, opt = make()
    job.resume(model, opt, tracker=Tracker())
    train_steps(job, model, opt, 3)
    with pytest.raises(UnloadableCheckpoint, match="numpy"):
        job.checkpoint()
    # Nothing unloadable was left behind to be found at a relaunch.
    assert list_checkpoints(str(tmp_path)) == []


def test_checkpoint_files_none_of_which_loads_are_an_error_not_a_fresh_start(tmp_path):
    import pytest
    from dlscale.checkpoint import UnloadableCheckpoint

    d = str(tmp_path / "ck")
    os.makedirs(d)
    with open(os.path.join(d, "step-0000000100.pt"), "wb") as f:
        f.write(b"garbage")
    with pytest.raises(UnloadableCheckpoint, match="step-0000000100.pt"):
        load_latest_checkpoint(d)


def test_a_save_after_resuming_an_older_step_drops_the_later_unloadable_ones(tmp_path):
    d = str(tmp_path / "ck")
    for step in (10, 20):
        save_checkpoint(d, step, {"format": FORMAT_VERSION, "step": step}, keep=1)
    assert [s for s, _ in list_checkpoints(d)] == [20]
    with open(os.path.join(d, "step-0000000100.pt"), "wb") as f:  # damaged, newest
        f.write(b"garbage")
    _, state = load_latest_checkpoint(d)
    assert state["step"] == 20
    # Resumed at 20 (100 could not be loaded), trained to 30: 30 is kept, not the dead 100.
    save_checkpoint(d, 30, {"format": FORMAT_VERSION, "step": 30}, keep=1)
    assert [s for s, _ in list_checkpoints(d)] == [30]


def test_a_newer_sharded_checkpoint_is_never_passed_over_for_an_older_file(tmp_path):
    import pytest
    from dlscale import DirectoryStore
    from dlscale.checkpoint import UnloadableCheckpoint

    d = str(tmp_path / "ck")
    save_checkpoint(d, 10, {"format": FORMAT_VERSION, "step": 10})
    os.makedirs(os.path.join(d, "step-0000000020.dcp"))  # a sharded run's, newer
    with open(os.path.join(d, "step-0000000030.pt"), "wb") as f:  # damaged, newest
        f.write(b"garbage")
    # The store hands the sharded one to Job.resume (only it can fill its objects' state) ...
    assert DirectoryStore(d).load_latest() == (os.path.join(d, "step-0000000020.dcp"), None)
    # ... and the plain loader names it rather than falling back to step 10.
    with pytest.raises(UnloadableCheckpoint, match="step-0000000020.dcp.*step-0000000030.pt"):
        load_latest_checkpoint(d)
