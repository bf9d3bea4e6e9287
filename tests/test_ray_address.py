"""Ray at the edges (issue 32): a cluster address where nothing answers is one line within 15 s, exit 5, with
none of Ray's own log lines; addresses are read as Ray reads them."""

import subprocess
import sys
import time

import pytest

from edgeprune.cluster.connect import head_endpoint
from edgeprune.errors import UserInputError

UNREACHABLE = 5  # the README's exit code for a device (here: a cluster) that cannot be reached


def test_an_address_where_nothing_listens_is_one_line_within_15_s(tiny_bert_dir, tmp_path):
    pytest.importorskip("ray")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "edgeprune", "fit", "--model", str(tiny_bert_dir), "--device",
                           "host", "--max-mb", "30", "--max-length", "32", "--ray", "127.0.0.1:1", "--out",
                           str(tmp_path / "fit")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert done.returncode == UNREACHABLE, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgeprune: error: cannot reach the Ray cluster at 127.0.0.1:1: "), \
        done.stderr[-2000:]
    assert "GCS" not in done.stderr and elapsed < 15, elapsed
    assert not (tmp_path / "fit").exists()


@pytest.mark.parametrize(("address", "endpoint"), [("10.0.0.5:6379", ("10.0.0.5", 6379)), ("head", ("head", 6379)),
                                                   ("ray://head:10001", ("head", 10001)),
                                                   ("ray://head", ("head", 10001)), ("[::1]:6380", ("::1", 6380))])
def test_addresses_name_the_head_as_ray_reads_them(address, endpoint):
    assert head_endpoint(address) == endpoint


@pytest.mark.parametrize("address", ["head:port", "head:0", "head:70000", ":6379", "ray://"])
def test_a_malformed_address_is_bad_input(address):
    with pytest.raises(UserInputError, match="expected HOST:PORT of the cluster's head"):
        head_endpoint(address)
