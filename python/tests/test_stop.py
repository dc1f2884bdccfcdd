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
