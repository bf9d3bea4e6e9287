"""Progress as a user sees it, running `edgeprune` in a real process: timestamped lines and none of the libraries'
chatter when stderr is a file or a pipe, a bar with an ETA on a terminal (a pseudo-terminal here), nothing but
errors with --quiet, and the libraries' own output back with --verbose."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

STAMP = re.compile(r"^\[\d{2}:\d{2}\.\d\] ")
RUN_CLI = "import sys; from edgeprune.cli import main; sys.exit(main())"


def edgeprune(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", RUN_CLI, *args], capture_output=True, text=True, timeout=300,
                          env=env)


def score_args(model_dir, out) -> list[str]:
    return ["score", "--model", str(model_dir), "--criterion", "gate-gradient", "--examples", "16",
            "--max-length", "32", "--out", str(out)]


def test_without_a_terminal_progress_is_timestamped_lines_and_the_libraries_stay_quiet(tiny_bert_dir, tmp_path):
    verbose = edgeprune(*score_args(tiny_bert_dir, tmp_path / "v.json"), "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    foreign = [line for line in verbose.stderr.splitlines() if not STAMP.match(line)]
    assert foreign, "--verbose should let the libraries' own output through"  # e.g. transformers' weight loading

    plain = edgeprune(*score_args(tiny_bert_dir, tmp_path / "p.json"))
    assert plain.returncode == 0, plain.stderr
    lines = plain.stderr.splitlines()
    assert lines and all(STAMP.match(line) for line in lines), plain.stderr
    assert any("scoring heads (gate-gradient): done in" in line for line in lines)
    assert "\x1b[" not in plain.stderr and "\r" not in plain.stderr  # no colour codes, no redrawn bars


def test_exports_to_both_runtimes_keep_the_converters_and_runtimes_native_output_out(tiny_bert_dir, tmp_path):
    """The LiteRT converter's stage lines, TensorFlow's C++ log and ExecuTorch's cpuinfo probes are written by
    native code straight to the file descriptors; without --verbose none of it reaches the user's stderr."""
    base = ["export", "--model", str(tiny_bert_dir), "--max-length", "32"]
    for runtime, recipe, name in (("litert", "litert-int8", "m.tflite"), ("executorch", "int8", "m.pte")):
        plain = edgeprune(*base, "--runtime", runtime, "--recipe", recipe, "--out", str(tmp_path / name))
        assert plain.returncode == 0, plain.stderr
        assert all(STAMP.match(line) for line in plain.stderr.splitlines()), plain.stderr
        assert json.loads(plain.stdout)["runtime"] == runtime  # stdout holds the result alone
    # with --verbose the same output goes through: tests/test_library_output.py


def test_quiet_prints_nothing_but_errors_wherever_it_is_on_the_line(tiny_bert_dir, tmp_path):
    quiet = edgeprune("--quiet", *score_args(tiny_bert_dir, tmp_path / "q.json"))
    assert (quiet.returncode, quiet.stderr) == (0, "") and (tmp_path / "q.json").exists()
    missing = edgeprune(*score_args(tmp_path / "no-such-model", tmp_path / "e.json"), "--quiet")
    (line,) = missing.stderr.splitlines()  # the error alone, on one line
    assert missing.returncode == 2 and line.startswith("edgeprune: error: ") and "no-such-model" in line


def test_on_a_terminal_a_counted_stage_draws_a_bar_with_an_eta(tiny_bert_dir, tmp_path):
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # 40 rows, 120 columns
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-c", RUN_CLI, *score_args(tiny_bert_dir, tmp_path / "t.json")],
                               stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    output, deadline = b"", time.monotonic() + 300
    while time.monotonic() < deadline:
        if select.select([leader], [], [], 1)[0]:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the other end closed: the process is done
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    os.close(leader)
    assert process.wait(timeout=60) == 0, output.decode(errors="replace")
    text = output.decode(errors="replace")
    assert re.search(r"scoring heads \(gate-gradient\):\s+100%\|[^|]*\| 16/16 \[\d\d:\d\d<\d\d:\d\d ETA", text), text
    assert "\r" in text  # redrawn in place
    assert re.search(r"\[\d{2}:\d{2}\.\d\] +scoring heads \(gate-gradient\): done in", text), text
