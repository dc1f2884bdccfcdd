import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_digits.py"
SRC = REPO / "python" / "src"

# Test this checkout's package even where the venv has another checkout installed (editable
# installs point at one directory; git worktrees share the venv): here and in subprocesses.
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SRC)])

_STRIP = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
          "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def clean_env(**extra):
    """os.environ without any DLSCALE_* / torchrun variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLSCALE_") and k not in _STRIP}
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Proc:
    """A subprocess whose merged stdout/stderr is collected line by line in the background."""

    def __init__(self, argv, env, cwd=REPO):
        self.argv = argv
        self.p = subprocess.Popen(argv, env=env, cwd=str(cwd), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.p.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def output(self):
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, pattern, timeout, predicate=lambda m: True):
        """First match of ``pattern`` in a line for which ``predicate(match)`` holds."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m and predicate(m):
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(
                        f"no line matching {pattern!r} within {timeout}s (rc={self.p.poll()}); "
                        f"output:\n{self.output}")
                self._cond.wait(min(left, 0.5))

    def signal(self, sig=signal.SIGTERM):
        self.p.send_signal(sig)

    def wait(self, timeout):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.argv} did not exit within {timeout}s; output:\n{self.output}")
        self._reader.join(5)
        return rc

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait(10)


@pytest.fixture
def procs():
    started = []

    def start(argv, env):
        proc = Proc(argv, env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


class MetricsServer:
    """A tiny dlscale-like server on 127.0.0.1 recording POSTs to /v1/jobs/<id>/metrics."""

    def __init__(self, status=200):
        self.requests = []  # (path, headers dict, parsed json)
        self.status = status
        self.answer = b""  # the body of each answer (the server's ReportAnswer, as bytes)
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    payload = json.loads(body)
                except ValueError:
                    payload = None
                with outer._cond:
                    outer.requests.append((self.path, dict(self.headers), payload))
                    outer._cond.notify_all()
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(outer.answer)))
                self.end_headers()
                self.wfile.write(outer.answer)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def wait_for(self, n, timeout=10):
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {n} requests, got {len(self.requests)}")
                self._cond.wait(left)
            return list(self.requests)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def metrics_server():
    server = MetricsServer()
    yield server
    server.close()


def python_exe():
    return sys.executable


def require(module, flag="DLSCALE_REQUIRE_TORCH"):
    """``pytest.importorskip``, except that with ``flag``=1 (DLSCALE_REQUIRE_TORCH=1 is set by
    scripts/test-all.sh, where the venv has torch; DLSCALE_REQUIRE_RAY=1 asks for Ray the same
    way) a missing module fails instead of skipping."""
    if os.environ.get(flag) == "1":
        return __import__(module)
    return pytest.importorskip(module)


def slow_backward(seconds):
    """An autograd identity whose backward pass sleeps ``seconds``: a training step's compute,
    known (the DDP compute-time tests time it)."""
    import torch

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            time.sleep(seconds)
            return grad

    return SlowBackward
