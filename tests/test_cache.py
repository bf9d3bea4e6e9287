"""A cache that checks itself (issue 32): every entry is written whole with a record of its size and sha256; a
damaged one is one warning, removed and rebuilt, and the work goes on; two processes filling one entry at once
neither corrupt it nor fail; `edgeprune cache` lists, verifies and clears it."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from edgeprune.cache import entry_problem, list_entries, read_entry, record_path, write_entry
from edgeprune.cli import main
from edgeprune.export import export, load_artifact


def test_an_entry_reads_back_whole_and_a_damaged_one_is_removed_with_one_warning(tmp_path, capsys):
    entry = tmp_path / "exports" / "model.pte"
    write_entry(entry, b"x" * 1000, ("torch",))
    record = json.loads(record_path(entry).read_text())
    assert record["size"] == 1000 and len(record["sha256"]) == 64 and record["versions"]["torch"] == torch.__version__
    assert read_entry(entry) == b"x" * 1000 and capsys.readouterr().err == ""

    for damage, says in ((lambda: entry.write_bytes(b"x" * 500), "holds 500 of its 1000 bytes"),
                         (lambda: entry.write_bytes(b"y" * 1000), "sha256 differs"),
                         (lambda: record_path(entry).unlink(), "no record")):
        write_entry(entry, b"x" * 1000)
        damage()
        assert read_entry(entry) is None
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"edgeprune: warning: damaged cache entry {entry}: rebuilt")
        assert says in lines[0]
        assert not entry.exists() and not record_path(entry).exists()


def test_an_entry_another_version_of_its_producer_wrote_is_rebuilt(tmp_path, capsys):
    entry = tmp_path / "model.pte"
    write_entry(entry, b"program", ("torch",))
    record = json.loads(record_path(entry).read_text())
    record["versions"]["torch"] = "1.0.0"
    record_path(entry).write_text(json.dumps(record))
    assert read_entry(entry) == b"program"  # what no caller asked to match does not count
    assert read_entry(entry, producers=("torch",)) is None
    assert f"outdated cache entry {entry}: rebuilt (written by torch 1.0.0, this is {torch.__version__})" in \
        capsys.readouterr().err


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from edgeprune.cache import read_entry, write_entry
    entry, byte, rounds = Path(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3])
    for round in range(rounds):
        write_entry(entry, byte * (200_000 + 1000 * (round % 7)))  # other sizes and contents than the other writer's
        data = read_entry(entry)
        assert data is not None and len(set(data)) == 1, "a read saw a mixed or missing entry"
    print("done")
""")


def test_two_processes_filling_one_entry_at_once_leave_it_whole(tmp_path):
    entry = tmp_path / "exports" / "same-key.pte"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(entry), byte, "60"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for byte in ("a", "b")]
    results = [writer.communicate(timeout=300) for writer in writers]
    for writer, (out, err) in zip(writers, results, strict=True):
        assert writer.returncode == 0 and out.strip() == "done", err[-2000:]
        assert "damaged" not in err  # no reader ever saw one writer's bytes under the other's record
    assert entry_problem(entry) is None
    assert set(entry.read_bytes()) in ({ord("a")}, {ord("b")})
    assert sorted(path.name for path in entry.parent.iterdir()) == [".same-key.pte.lock", ".same-key.pte.record.json",
                                                                   "same-key.pte"]  # no temporary file left


def tiny_module() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval(), (torch.randn(1, 8),)


def test_a_truncated_cached_program_is_exported_again(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache" / "exports"
    module, example = tiny_module()
    first = export(module, example, tmp_path / "first.pte", "fp32", cache, "tiny-key")
    cached = cache / "tiny-key.pte"
    assert not first.cached and entry_problem(cached) is None
    cached.write_bytes(cached.read_bytes()[: cached.stat().st_size // 2])  # what a full disk or a killed copy leaves

    again = export(module, example, tmp_path / "again.pte", "fp32", cache, "tiny-key", verify_on=[example])
    err = capsys.readouterr().err
    assert f"damaged cache entry {cached}: rebuilt" in err and err.count("damaged cache entry") == 1
    assert not again.cached and again.accepted and again.path.read_bytes() == first.path.read_bytes()
    assert entry_problem(cached) is None  # whole again, so the next export reuses it
    torch.testing.assert_close(load_artifact(again.path)(*example)[0], module(*example))
    assert export(module, example, tmp_path / "third.pte", "fp32", cache, "tiny-key").cached


def test_a_teacher_cut_to_100_bytes_is_built_again_and_the_verb_goes_on(tiny_bert_dir, tmp_path, capsys):
    score = ["score", "--model", str(tiny_bert_dir), "--examples", "16", "--max-length", "32", "--quiet"]
    assert main([*score, "--out", str(tmp_path / "first.json")]) == 0
    (teacher,) = (Path(os.environ["EDGEPRUNE_CACHE"]) / "teachers").glob("*.pt")
    whole = teacher.read_bytes()
    teacher.write_bytes(whole[:100])
    capsys.readouterr()

    assert main([*score, "--out", str(tmp_path / "again.json")]) == 0
    err = capsys.readouterr().err
    assert f"damaged cache entry {teacher}: rebuilt (it holds 100 of its {len(whole)} bytes)" in err
    assert "internal error" not in err and entry_problem(teacher) is None
    first, again = (json.loads((tmp_path / name).read_text()) for name in ("first.json", "again.json"))
    for row, first_row in zip(again["scores"], first["scores"], strict=True):  # the same teacher, built again
        assert row == pytest.approx(first_row)


def test_the_cache_verb_lists_verifies_and_clears(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(tmp_path))
    write_entry(tmp_path / "exports" / "a.pte", b"a" * 2_000_000)
    write_entry(tmp_path / "teachers" / "t.pt", b"t" * 3000)
    (tmp_path / "boards" / "root").mkdir(parents=True)  # the emulated board's root: listed, never cleared
    (tmp_path / "boards" / "root" / "file").write_bytes(b"r" * 10)
    assert main(["cache"]) == 0
    listed = capsys.readouterr().out
    assert "2.0 MB\texports/a.pte" in listed and "teachers/t.pt" in listed and "boards/root\t(a folder)" in listed
    assert "in all, 3 entries" in listed and ".record.json" not in listed and ".lock" not in listed

    (tmp_path / "teachers" / "t.pt").write_bytes(b"t" * 10)
    assert main(["cache", "--verify"]) == 1
    captured = capsys.readouterr()
    assert f"damaged cache entry {tmp_path / 'teachers' / 't.pt'}: removed (it holds 10 of its 3000 bytes)" in \
        captured.err
    assert "1 entries whole, 1 removed" in captured.out
    assert main(["cache", "--verify"]) == 0 and main(["cache", "--verify", "--clear"]) == 2
    capsys.readouterr()

    assert main(["cache", "--clear", "--json"]) == 0
    cleared = json.loads(capsys.readouterr().out)
    assert cleared["freed_bytes"] >= 2_000_000 and cleared["left"] == [str(tmp_path / "boards" / "root")]
    assert [entry.kind for entry in list_entries(tmp_path)] == ["boards"]
