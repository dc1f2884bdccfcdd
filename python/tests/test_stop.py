import os
import signal

from dlscale import install_stop_handler


def test_sigterm_sets_flag_and_does_not_kill(capfd):
    before = signal.getsignal(signal.SIGTERM)
    flag = install_stop_handler()
    try:
        assert not flag.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one is harmless
        assert flag.is_set() and flag.signum == signal.SIGTERM
    finally:
        flag.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before
    assert capfd.readouterr().err.count("got SIGTERM") == 1


# A second SIGTERM fired at every line the first handler runs (itself and whatever it calls), each
# running a nested handler right there, as Python does between bytecodes. A handler that takes a
# lock (threading.Event.set) hangs on the lock its own thread holds; run in a child with a timeout.
_NESTED = r"""
import os, signal, sys
from dlscale.stop import StopFlag

flag = StopFlag().install()
handler = StopFlag._handler.__code__
depth = 0
fired = 0

def tracer(frame, event, arg):
    global depth, fired
    if frame.f_code is handler and event == "call":
        depth += 1
    elif frame.f_code is handler and event == "return":
        depth -= 1
    elif event == "line" and depth == 1:
        fired += 1
        os.kill(os.getpid(), signal.SIGTERM)
    return tracer

sys.settrace(tracer)
os.kill(os.getpid(), signal.SIGTERM)
sys.settrace(None)
assert flag.is_set() and flag.signum == signal.SIGTERM
print(f"ok fired={fired}")
"""


def test_a_sigterm_landing_inside_the_handler_neither_hangs_nor_kills():
    import subprocess
    import sys

    src = os.path.join(os.path.dirname(__file__), "..", "src")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    try:
        out = subprocess.run([sys.executable, "-c", _NESTED], env=env, capture_output=True,
                             text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the stop handler hung on a SIGTERM that landed inside it") from None
    assert out.returncode == 0, out.stderr
    ok, fired = out.stdout.split()
    assert ok == "ok" and int(fired.split("=")[1]) >= 3, out.stdout
    assert out.stderr.count("got SIGTERM") >= 1, out.stderr
