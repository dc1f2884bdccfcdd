"""Graceful stop on SIGTERM: a signal only sets a flag; the training loop checks it after
each step, checkpoints, and exits.

Exit codes (see README):
  0   finished all its steps (``EXIT_DONE``)
  75  stopped on SIGTERM after writing a checkpoint (``EXIT_STOPPED``, EX_TEMPFAIL: "not done,
      run me again"; the dlscale server sets the same in ``DLSCALE_STOP_EXIT_CODE``, which
      overrides it)
  2   malformed allocation environment (``EXIT_BAD_ENV``)

A stopped process whose exit hangs after its checkpoint (a non-daemon thread, a destructor stuck
in a GPU library, or only a loaded machine) is ended ``EXIT_WATCHDOG_S`` seconds later with its
stop code, and where no thread can run any more by SIGALRM as long again after that
(``arm_exit_watchdog``): its GPUs must not sit idle until the launcher's grace period runs out.
``DLSCALE_EXIT_WATCHDOG_S`` sets it for code whose teardown is known to be slow.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Iterable, Optional

from .env import EnvError

EXIT_DONE = 0
EXIT_STOPPED = 75  # default (the server's DLSCALE_STOP_EXIT_CODE too); the variable overrides it
EXIT_BAD_ENV = 2

# Seconds a stopped process may take to exit once its checkpoint is written (the default of
# ``DLSCALE_EXIT_WATCHDOG_S``).
EXIT_WATCHDOG_S = 5


class Stopped(SystemExit):
    """What ``Job.stop()`` raises, once its checkpoint is written, where the process must not end
    itself (``Job(exit_on_stop=False)``: a Ray Train worker, whose driver exits instead). ``code``
    is the stop exit code. A subclass of ``SystemExit``: left uncaught, it ends a plain program
    with that code."""


def stop_exit_code(environ=None) -> int:
    env = os.environ if environ is None else environ
    raw = env.get("DLSCALE_STOP_EXIT_CODE", "").strip()
    if not raw:
        return EXIT_STOPPED
    try:
        code = int(raw)
    except ValueError:
        raise EnvError(f"DLSCALE_STOP_EXIT_CODE={raw!r} is not an integer") from None
    if not 0 <= code <= 255:
        raise EnvError(f"DLSCALE_STOP_EXIT_CODE={code} must be in 0..255")
    return code


def exit_watchdog_s(environ=None) -> int:
    """Seconds a stopped process may take to exit after its checkpoint: ``DLSCALE_EXIT_WATCHDOG_S``
    (whole seconds, 1..3600), else ``EXIT_WATCHDOG_S``."""
    env = os.environ if environ is None else environ
    raw = env.get("DLSCALE_EXIT_WATCHDOG_S", "").strip()
    if not raw:
        return EXIT_WATCHDOG_S
    try:
        seconds = int(raw)
    except ValueError:
        raise EnvError(f"DLSCALE_EXIT_WATCHDOG_S={raw!r} is not a whole number of seconds") from None
    if not 1 <= seconds <= 3600:
        raise EnvError(f"DLSCALE_EXIT_WATCHDOG_S={seconds} must be in 1..3600")
    return seconds


def _exit_now(code: int, seconds: int) -> None:
    # Said, so that a stop that took the watchdog is told apart from a clean exit in the log.
    print(f"dlscale: exit watchdog: still running {seconds} s after the checkpoint; exiting with "
          f"{code}", file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def arm_exit_watchdog(code: int, seconds: int = EXIT_WATCHDOG_S) -> threading.Timer:
    """Ends this process with ``code`` in ``seconds`` unless it has exited by then: a daemon
    thread calls ``os._exit`` (the checkpoint is written: the stop code is the truth, and a slow
    teardown on a loaded machine must not turn it into a crash). Where no thread runs any more
    (stuck in a C++ destructor during interpreter teardown, or holding the GIL), SIGALRM, whose
    default action the kernel takes, ends it ``seconds`` later still. Main thread only (as
    ``signal.alarm``). The timer is returned so that a caller that catches the exit can cancel
    it (with ``signal.alarm(0)``)."""
    timer = threading.Timer(seconds, _exit_now, args=(code, seconds))
    timer.daemon = True
    timer.start()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(2 * seconds)
    return timer


class StopFlag:
    """Set by SIGTERM (and SIGINT); read by the training loop.

    Lock-free on purpose: Python runs a signal handler on the main thread between bytecodes, so
    a second signal can run the handler again inside the first. A launch gets SIGTERM twice
    (Slurm signals every process of a step, then torchrun forwards its own), and a handler that
    takes a lock (``threading.Event.set`` does) would block on the lock its own thread holds:
    the worker hangs, its peers wait in the next collective, and the grace period ends in a
    kill that loses every step since the last checkpoint."""

    def __init__(self) -> None:
        self._set = False
        self.signum: Optional[int] = None
        self._previous = {}

    def is_set(self) -> bool:
        return self._set

    def set(self, signum: Optional[int] = None) -> None:
        if self.signum is None:
            self.signum = signum
        self._set = True

    def _handler(self, signum, frame) -> None:
        if signum == signal.SIGINT and self._set:
            # Second Ctrl-C: the user really wants out.
            raise KeyboardInterrupt
        first = not self._set
        self.set(signum)
        if first:
            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = str(signum)
            # Written with os.write: print() is not safe inside a signal handler that may
            # interrupt another print on the same stream.
            try:
                os.write(2, f"dlscale: got {name}, will checkpoint and stop after this step\n".encode())
            except OSError:
                pass

    def install(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> "StopFlag":
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("install the stop handler from the main thread")
        for s in signals:
            self._previous[s] = signal.signal(s, self._handler)
        return self

    def reinstall(self) -> None:
        """Put the handler back for the signals it was installed for, after native code replaced
        it at the C level (``ray.init()`` installs Ray's crash handler for SIGTERM, which dies)."""
        for s in self._previous:
            signal.signal(s, self._handler)

    def uninstall(self) -> None:
        for s, prev in self._previous.items():
            signal.signal(s, prev)
        self._previous.clear()


def install_stop_handler(signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> StopFlag:
    return StopFlag().install(signals)
