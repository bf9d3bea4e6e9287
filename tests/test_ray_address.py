"""Ray at the edges (issue 32): a cluster address where nothing answers, or where something that is not Ray
answers, is one line within 15 s, exit 5, with none of Ray's own log lines; addresses are read as Ray reads them."""

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from edgeprune.cluster.connect import head_endpoint
from edgeprune.errors import UserInputError

pytestmark = pytest.mark.usefixtures("one_ray_cluster_at_a_time")  # tests/conftest.py

UNREACHABLE = 5  # the README's exit code for a device (here: a cluster) that cannot be reached


def fit_on_ray(address: str, model: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "edgeprune", "fit", "--model", str(model), "--device",
                           "host", "--max-mb", "30", "--max-length", "32", "--ray", address, "--out",
                           str(tmp_path / "fit")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return done, time.monotonic() - started


def assert_one_line_within_15_s(done: subprocess.CompletedProcess, elapsed: float, address: str, reason: str,
                                tmp_path: Path) -> None:
    assert done.returncode == UNREACHABLE, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"edgeprune: error: cannot reach the Ray cluster at {address}: "), \
        done.stderr[-2000:]
    assert reason in lines[0], lines[0]
    assert "GCS" not in done.stderr and elapsed < 15, elapsed
    assert not (tmp_path / "fit").exists()


def test_an_address_where_nothing_listens_is_one_line_within_15_s(tiny_bert_dir, tmp_path):
    pytest.importorskip("ray")
    done, elapsed = fit_on_ray("127.0.0.1:1", tiny_bert_dir, tmp_path)
    assert_one_line_within_15_s(done, elapsed, "127.0.0.1:1", "Connection refused", tmp_path)


@contextmanager
def listening(reply: bytes | None) -> Iterator[str]:
    """A loopback port that accepts connections and sends `reply` to each (None: never a byte), as a port that
    belongs to another service, or to a process that hangs, does: Ray alone would wait on it without end."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            held.append(connection)
            if reply is not None:
                connection.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for connection in held:
            connection.close()


@pytest.mark.parametrize(("reply", "reason"), [
    (None, "accepts connections but sent nothing within 3 s"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "answers, but not as a Ray head"),
    (b"SSH-2.0-OpenSSH_9.2p1\r\n", "answers, but not as a Ray head"),
])
def test_a_port_that_answers_but_is_not_ray_is_one_line_within_15_s(reply, reason, tiny_bert_dir, tmp_path):
    pytest.importorskip("ray")
    with listening(reply) as address:
        done, elapsed = fit_on_ray(address, tiny_bert_dir, tmp_path)
    assert_one_line_within_15_s(done, elapsed, address, reason, tmp_path)


@pytest.mark.integration
def test_a_head_that_goes_away_mid_fit_is_one_line_exit_5_and_the_fit_resumes_without_ray(tmp_path):
    """A real head on this machine, a real fit on it from another process; the head is killed once the fit has
    journaled its head scores. The fit ends in seconds with edgeprune's line (not Ray's, a minute later), and
    `--resume` without --ray finishes it."""
    pytest.importorskip("ray")
    import json
    import os

    from ray.cluster_utils import Cluster

    from edgeprune.search.journal import JOURNAL_NAME, work_dir_for
    from tests.conftest import small_vocab_tokenizer_files, tiny_bert

    model = tmp_path / "model"
    model.mkdir()
    vocab = small_vocab_tokenizer_files(model, words=500)
    tiny_bert(seed=1, vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=64).save_pretrained(model)
    out = tmp_path / "fit"
    flags = [sys.executable, "-m", "edgeprune", "fit", "--task", "minilm-bbc", "--model", str(model), "--max-length",
             "32", "--max-mb", "0.13", "--recipe", "int8", "--ffn-fractions", "0,0.5", "--layer-removals", "0",
             "--no-trim-vocab", "--scoring-examples", "16", "--recover-steps", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # the test's own cache (tests/conftest.py: isolated_cache)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    journal = work_dir_for(out) / JOURNAL_NAME
    log = tmp_path / "fit.log"  # a file, not a pipe: nothing reads a pipe while the test waits, and a full one blocks
    try:
        with log.open("w") as sink, subprocess.Popen([*flags, "--ray", cluster.address, "--out", str(out)], env=env,
                                                     cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=sink) as fitting:
            try:
                deadline = time.monotonic() + 240
                while not (journal.is_file() and '"scores"' in journal.read_text()):
                    assert fitting.poll() is None, log.read_text()[-2000:]
                    assert time.monotonic() < deadline, log.read_text()[-2000:]
                    time.sleep(0.2)
                killed = time.monotonic()
                cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False)
                fitting.wait(timeout=60)
                elapsed = time.monotonic() - killed
            finally:
                if fitting.poll() is None:
                    fitting.kill()
    finally:
        cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False)
    err = log.read_text()
    assert fitting.returncode == UNREACHABLE, err[-2000:]
    assert elapsed < 20, elapsed  # Ray alone would end it after 60 s
    lines = [line for line in err.splitlines() if line.startswith("edgeprune:")]
    assert len(lines) == 1 and lines[0].startswith(f"edgeprune: error: lost the Ray cluster at {cluster.address} "
                                                   "mid-fit (no answer for 8 s: "), err[-2000:]
    assert f"continue with `edgeprune fit ... --resume {out}` without --ray" in lines[0]
    assert "Traceback" not in err and not out.exists()
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert any("scores" in record for record in records)

    resumed = subprocess.run([*flags, "--resume", str(out)], env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "head scores: finished before (resumed)" in resumed.stderr and (out / "result.json").is_file()


@pytest.mark.parametrize(("address", "endpoint"), [("10.0.0.5:6379", ("10.0.0.5", 6379)), ("head", ("head", 6379)),
                                                   ("ray://head:10001", ("head", 10001)),
                                                   ("ray://head", ("head", 10001)), ("[::1]:6380", ("::1", 6380))])
def test_addresses_name_the_head_as_ray_reads_them(address, endpoint):
    assert head_endpoint(address) == endpoint


@pytest.mark.parametrize("address", ["head:port", "head:0", "head:70000", ":6379", "ray://"])
def test_a_malformed_address_is_bad_input(address):
    with pytest.raises(UserInputError, match="expected HOST:PORT of the cluster's head"):
        head_endpoint(address)
