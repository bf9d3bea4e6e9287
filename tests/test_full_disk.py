"""A full disk loses nothing (issue 32): on a small tmpfs mounted by the test, a write with no room is one line naming
the path and the space it needed (exit 2); no half-written cache entry or journal record is left; a fit whose output
disk fills keeps its partial folder and journal, and `--resume` finishes it once space is freed."""

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from edgeprune.cache import lock_path, read_entry, record_path, write_entry
from edgeprune.cli import main
from edgeprune.errors import DiskFullError
from edgeprune.search.journal import JOURNAL_NAME, Journal, work_dir_for
from tests.conftest import small_vocab_tokenizer_files, tiny_bert

DISK_BYTES = 4 * 1024 * 1024  # the finished fit holds two artifacts and a report of about 0.7 MB


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs at tmp_path/disk (needs root: the test is skipped without it)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    """A file that takes all of `disk`'s free space but about `leave_bytes`."""
    filler = disk / "filler"
    with filler.open("wb") as handle:
        try:
            while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize > leave_bytes + 4096:
                handle.write(b"\0" * 4096)
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


def test_a_cache_entry_with_no_room_leaves_nothing_behind_and_says_what_it_needed(small_disk):
    entry = small_disk / "exports" / "key.pte"
    fill(small_disk, leave_bytes=16 * 1024)
    data = os.urandom(200_000)
    with pytest.raises(DiskFullError) as raised:
        write_entry(entry, data, ("torch",))
    assert raised.value.exit_code == 2 and raised.value.errno == errno.ENOSPC
    assert f"no space left to write {entry} (it needed 200.0 kB, " in str(raised.value)
    left = sorted(p.name for p in entry.parent.iterdir())
    assert left == [lock_path(entry).name]  # no half file, no record, no temporary file

    (small_disk / "filler").unlink()
    write_entry(entry, data, ("torch",))
    assert read_entry(entry, producers=("torch",)) == data and record_path(entry).is_file()


def test_a_journal_record_with_no_room_is_not_left_half_written(small_disk):
    journal = Journal(small_disk / JOURNAL_NAME, {"model": "m"}, resume=False)
    journal.record_scores({"layer 0": [1.0, 2.0]})
    before = journal.path.read_bytes()
    fill(small_disk, leave_bytes=0)
    with pytest.raises(DiskFullError, match=f"no space left to write {journal.path}"):
        journal.record_candidate("int8:h1", {"blob": "x" * 100_000})
    assert journal.path.read_bytes() == before
    journal.record_stop("error")  # best effort: nothing raised, nothing half written
    assert journal.path.read_bytes().startswith(before)
    assert all(json.loads(line) for line in journal.path.read_text().splitlines())  # whole records only

    (small_disk / "filler").unlink()
    journal.record_candidate("int8:h1", {"blob": "x"})
    resumed = Journal(journal.path, {"model": "m"}, resume=True)
    assert resumed.scores == {"layer 0": [1.0, 2.0]} and resumed.candidates == {"int8:h1": {"blob": "x"}}


@pytest.mark.integration
def test_a_fit_whose_output_disk_fills_stops_in_one_line_and_resumes_once_space_is_freed(small_disk, tmp_path,
                                                                                         monkeypatch, capsys):
    model = tmp_path / "model"
    model.mkdir()
    vocab = small_vocab_tokenizer_files(model, words=500)
    tiny_bert(seed=1, vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=64).save_pretrained(model)
    # the cache (the test's own, tests/conftest.py: isolated_cache) has room; the output disk has not
    out = small_disk / "fit"
    flags = ["fit", "--task", "minilm-bbc", "--model", str(model), "--max-length", "32", "--max-mb", "0.13",
             "--recipe", "int8", "--ffn-fractions", "0", "--layer-removals", "0", "--no-trim-vocab",
             "--scoring-examples", "16", "--recover-steps", "0"]
    filler = fill(small_disk, leave_bytes=32 * 1024)  # the journal and the head scores fit, an artifact does not

    assert main([*flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("edgeprune: error:")]
    assert len(errors) == 1 and "Traceback" not in err
    assert f"no space left to write {work_dir_for(out)}/" in errors[0] and " free there); free some space" in errors[0]
    assert f"the finished work is kept in {work_dir_for(out)}: continue with --resume {out}" in err
    records = [json.loads(line) for line in (work_dir_for(out) / JOURNAL_NAME).read_text().splitlines()]
    assert "settings" in records[0] and any("scores" in record for record in records)
    assert not out.exists()

    filler.unlink()
    assert main([*flags, "--resume", str(out)]) == 0
    err = capsys.readouterr().err
    assert "head scores: finished before (resumed)" in err
    assert (out / "result.json").is_file() and (out / "model.pte").is_file() and not work_dir_for(out).exists()
