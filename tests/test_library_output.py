"""`library_output_hidden`: what native code writes to file descriptors 1 and 2 during a library call is hidden,
replayed to stderr when the call fails, and let through with --verbose."""

import os

import pytest

from edgeprune.progress import VERBOSITY, library_output_hidden


def native_write(text: str) -> None:
    """As C++ writes: to the descriptors, past Python's sys.stdout and sys.stderr."""
    os.write(1, f"{text} (stdout)\n".encode())
    os.write(2, f"{text} (stderr)\n".encode())


def test_a_library_call_that_succeeds_prints_nothing(capfd):
    with library_output_hidden():
        native_write("cpuinfo probe")
    native_write("after")
    out, err = capfd.readouterr()
    assert "cpuinfo" not in out + err
    assert out == "after (stdout)\n" and err == "after (stderr)\n"  # the descriptors are back afterwards


def test_a_library_call_that_fails_replays_what_it_said_before_the_error(capfd):
    with pytest.raises(RuntimeError, match="lowering failed"), library_output_hidden():
        native_write("unsupported op aten::foo")
        raise RuntimeError("lowering failed")
    _, err = capfd.readouterr()
    assert "unsupported op aten::foo (stdout)" in err and "unsupported op aten::foo (stderr)" in err


def test_verbose_lets_the_library_through(capfd, monkeypatch):
    monkeypatch.setattr(VERBOSITY, "verbose", True)
    with library_output_hidden():
        native_write("converter stage")
    out, err = capfd.readouterr()
    assert "converter stage (stdout)" in out and "converter stage (stderr)" in err
