import subprocess

import pytest

from conftest import EXAMPLE, REPO, clean_env, python_exe
from dlscale import Allocation, EnvError


def alloc(**env):
    return Allocation.from_env({k: str(v) for k, v in env.items()})


def test_defaults_single_process():
    a = alloc()
    assert (a.rank, a.local_rank, a.world_size) == (0, 0, 1)
    assert (a.local_batch_size, a.batch_size) == (32, 32)
    assert a.job_id is None and a.api is None and a.token is None and a.checkpoint_dir is None
    assert a.is_chief


def test_full_allocation():
    a = alloc(DLSCALE_JOB_ID="job-7", DLSCALE_WORLD_SIZE=4, DLSCALE_BATCH_SIZE=256,
              DLSCALE_LOCAL_BATCH_SIZE=64, DLSCALE_CHECKPOINT_DIR="/ck", DLSCALE_API="http://h:8080/",
              DLSCALE_TOKEN="s3cret", RANK=3, LOCAL_RANK=1, WORLD_SIZE=4)
    assert a.job_id == "job-7" and a.rank == 3 and a.local_rank == 1 and a.world_size == 4
    assert a.batch_size == 256 and a.local_batch_size == 64
    assert a.checkpoint_dir == "/ck" and a.api == "http://h:8080" and a.token == "s3cret"
    assert not a.is_chief


def test_local_batch_derived_from_global():
    a = alloc(DLSCALE_WORLD_SIZE=4, DLSCALE_BATCH_SIZE=128)
    assert a.local_batch_size == 32 and a.batch_size == 128


def test_global_batch_derived_from_local():
    a = alloc(WORLD_SIZE=3, DLSCALE_LOCAL_BATCH_SIZE=10)
    assert a.batch_size == 30


def test_torchrun_world_size_wins(capsys):
    a = alloc(WORLD_SIZE=2, DLSCALE_WORLD_SIZE=4, DLSCALE_LOCAL_BATCH_SIZE=16, DLSCALE_BATCH_SIZE=64)
    assert a.world_size == 2 and a.batch_size == 32 and a.requested_world_size == 4
    assert "differs" in capsys.readouterr().err


@pytest.mark.parametrize("env, message", [
    ({"DLSCALE_WORLD_SIZE": "two"}, "DLSCALE_WORLD_SIZE='two' is not an integer"),
    ({"DLSCALE_WORLD_SIZE": "0"}, "DLSCALE_WORLD_SIZE=0 must be >= 1"),
    ({"WORLD_SIZE": "1.5"}, "WORLD_SIZE='1.5' is not an integer"),
    ({"RANK": "-1"}, "RANK=-1 must be >= 0"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 must be < world size 2"),
    ({"DLSCALE_BATCH_SIZE": "64k"}, "DLSCALE_BATCH_SIZE='64k' is not an integer"),
    ({"DLSCALE_LOCAL_BATCH_SIZE": "0"}, "DLSCALE_LOCAL_BATCH_SIZE=0 must be >= 1"),
    ({"DLSCALE_WORLD_SIZE": "3", "DLSCALE_BATCH_SIZE": "64"}, "not divisible by world size 3"),
    ({"DLSCALE_WORLD_SIZE": "2", "DLSCALE_BATCH_SIZE": "64", "DLSCALE_LOCAL_BATCH_SIZE": "16"},
     "DLSCALE_BATCH_SIZE=64 != DLSCALE_LOCAL_BATCH_SIZE=16 x world size 2"),
    ({"DLSCALE_API": "localhost:8080", "DLSCALE_JOB_ID": "j"}, "must be an http:// or https:// base URL"),
    ({"DLSCALE_API": "http://localhost:8080"}, "DLSCALE_JOB_ID is not"),
    ({"DLSCALE_TOKEN": "a\nb"}, "must not contain newlines"),
])
def test_malformed(env, message):
    with pytest.raises(EnvError) as exc:
        Allocation.from_env(env)
    assert message in str(exc.value)


def test_the_token_may_come_from_a_file(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    assert alloc(DLSCALE_TOKEN_FILE=path).token == "s3cret"
    # The variable wins over the file.
    assert alloc(DLSCALE_TOKEN="other", DLSCALE_TOKEN_FILE=path).token == "other"
    path.write_text("a\nb\n")
    with pytest.raises(EnvError, match="must not contain newlines"):
        alloc(DLSCALE_TOKEN_FILE=path)
    with pytest.raises(EnvError, match="DLSCALE_TOKEN_FILE=.*missing.*cannot be read"):
        alloc(DLSCALE_TOKEN_FILE=tmp_path / "missing")


def test_blank_values_count_as_unset():
    a = alloc(DLSCALE_WORLD_SIZE="", DLSCALE_API="  ", DLSCALE_TOKEN="")
    assert a.world_size == 1 and a.api is None and a.token is None


def test_stop_exit_code_env():
    from dlscale import stop_exit_code

    assert stop_exit_code({}) == 75  # EX_TEMPFAIL, as the server sets it
    assert stop_exit_code({"DLSCALE_STOP_EXIT_CODE": "0"}) == 0
    with pytest.raises(EnvError, match="not an integer"):
        stop_exit_code({"DLSCALE_STOP_EXIT_CODE": "x"})
    with pytest.raises(EnvError, match="0..255"):
        stop_exit_code({"DLSCALE_STOP_EXIT_CODE": "300"})


def test_exit_watchdog_env():
    from dlscale.stop import EXIT_WATCHDOG_S, exit_watchdog_s

    assert exit_watchdog_s({}) == EXIT_WATCHDOG_S
    assert exit_watchdog_s({"DLSCALE_EXIT_WATCHDOG_S": " 60 "}) == 60
    with pytest.raises(EnvError, match="DLSCALE_EXIT_WATCHDOG_S='5s' is not a whole number"):
        exit_watchdog_s({"DLSCALE_EXIT_WATCHDOG_S": "5s"})
    with pytest.raises(EnvError, match="1..3600"):
        exit_watchdog_s({"DLSCALE_EXIT_WATCHDOG_S": "0"})


def test_example_exits_2_with_one_line_on_bad_env():
    # Fails in dlscale.init(), before torch is imported: fast, and no traceback.
    r = subprocess.run([python_exe(), str(EXAMPLE)], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env=clean_env(DLSCALE_LOCAL_BATCH_SIZE="lots"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "dlscale: error: DLSCALE_LOCAL_BATCH_SIZE='lots' is not an integer"


def test_accumulation_steps():
    assert alloc().accum_steps == 1
    a = alloc(DLSCALE_LOCAL_BATCH_SIZE=100, DLSCALE_ACCUM_STEPS=3)
    assert (a.accum_steps, a.micro_batch_size, a.local_batch_size) == (3, 34, 100)
