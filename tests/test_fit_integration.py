"""`edgeprune fit` end to end through the real ExecuTorch runtime, on a small random BERT."""

import json

import pytest
import torch

from edgeprune.cli import main
from edgeprune.export import load_artifact
from edgeprune.search.latency import BASES

pytestmark = pytest.mark.integration

FAST = ["--max-length", "32", "--scoring-examples", "32", "--quiet"]
HEADS_ONLY = ["--ffn-fractions", "0", "--layer-removals", "0", "--no-trim-vocab"]
# fits about something else than recovery turn its default (distil a candidate that lost quality) off: it is tested
# in tests/test_fit_auto_recovery.py, and 150 steps per candidate would double the suite
NO_RECOVERY = ["--recover-steps", "0"]


def assert_fit_chose_right(result):
    """The winner meets the budget and is within the tie tolerance of the best validation quality that does;
    of those within it, none keeps more of the network (parameters outside the embedding tables)."""
    meeting = [c for c in result["candidates"] if all(check["passed"] for check in c["checks"])]
    fitted, tolerance = result["fitted"], result["quality_tolerance"]
    top = max(c["validation_quality"]["value"] for c in meeting)
    assert 0 < tolerance < 0.1 and fitted["validation_quality"]["value"] >= top - tolerance
    tied = [c for c in meeting if c["validation_quality"]["value"] >= top - tolerance]
    assert fitted["core_parameters"] == max(c["core_parameters"] for c in tied)


def result_labels(out):
    return json.loads((out / "result.json").read_text())["task"]["labels"]


def test_fit_removes_heads_until_the_artifact_fits(small_bert_dir, small_bert_int8_bytes, tmp_path, capsys):
    # exactly the size with 4 of 8 heads gone (head sizes are equal): int8 alone is not enough
    budget_mb = small_bert_int8_bytes(2) / 1e6
    out = tmp_path / "fit"
    code = main(["fit", *NO_RECOVERY,
                 "--model", str(small_bert_dir), "--device", "host", "--max-mb", f"{budget_mb:.7f}",
                 "--recipe", "int8", "--recipe", "int4", "--out", str(out), "--json", *HEADS_ONLY, *FAST])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0, printed["message"]
    names = {p.name for p in out.iterdir()}
    assert {"baseline", "model.pte", "report.md", "report.html", "result.json", "model.json", "labels.json",
            "vocab.txt", "USAGE.md"} <= names and (out / "baseline" / "dense-fp32.pte").is_file()
    assert not [n for n in names if n.startswith("candidate-") or n == "journal.json"]
    assert not list(tmp_path.glob(".fit.partial*"))
    signature = json.loads((out / "model.json").read_text())
    assert [{k: spec[k] for k in ("name", "shape", "dtype")} for spec in signature["inputs"]] == [
        {"name": "input_ids", "shape": [1, 32], "dtype": "int64"},
        {"name": "attention_mask", "shape": [1, 32], "dtype": "int64"}]
    assert json.loads((out / "labels.json").read_text())["labels"] == result_labels(out)
    result = json.loads((out / "result.json").read_text())
    assert result == printed and result["status"] == "fit"
    fitted = result["fitted"]
    assert fitted["file_bytes"] == (out / "model.pte").stat().st_size <= budget_mb * 1e6
    assert all(len(kept) >= 1 for kept in fitted["plan"]["heads"]["kept_heads"])
    # int8 fits only with at least 4 heads gone (the size physics); anything built with fewer was over budget
    int8 = {c["plan"]["heads"]["heads_removed"]: c for c in result["candidates"] if c["recipe"]["name"] == "int8"}
    assert all(n >= 4 for n, c in int8.items() if all(check["passed"] for check in c["checks"]))
    fewer = [t for t in result["trials"] if t["recipe"] == "int8" and t["heads_removed"] < 4 and t["file_bytes"]]
    assert all(t["file_bytes"] > budget_mb * 1e6 and t["fits"] is False for t in fewer)
    assert_fit_chose_right(result)
    # every benchmarked candidate keeps the latency model's prediction, made before its benchmark, and its basis
    benchmarked = [c for c in result["candidates"] if c["benchmark"] is not None]
    assert benchmarked and all(c["latency_basis"] in BASES for c in benchmarked)
    assert all(c["predicted_latency_ms"] > 0 for c in benchmarked if c["latency_basis"] != "none")
    assert fitted["label"] == "fitted"
    # on the front, unless a smaller, faster candidate tied with it on quality: ties go to the least compressed
    by_path = {c["path"]: c for c in result["candidates"]}
    assert "model.pte" in result["pareto"] or all(
        by_path[path]["validation_quality"]["value"] - fitted["validation_quality"]["value"]
        <= result["quality_tolerance"] for path in result["pareto"])
    for artifact in (result["dense"], fitted):
        bench = artifact["benchmark"]
        assert bench["timed_runs"] >= 20 and len(bench["latency_ms"]) == bench["timed_runs"]
        assert 0 < bench["p50_ms"] <= bench["p90_ms"] and bench["peak_rss_mb"] > 0 and bench["threads"] == 2
        assert 0.0 <= artifact["test_accuracy"] <= 1.0
    assert result["reproduce"]["kept_heads"] == fitted["plan"]["heads"]["kept_heads"]
    report = (out / "report.md").read_text()
    assert "latency p50" in report and "test accuracy through executorch" in report
    # the artifact on disk runs and gives the logits and the embedding
    logits, embedding = load_artifact(out / "model.pte")(torch.ones(1, 32, dtype=torch.long) * 2000,
                                                              torch.ones(1, 32, dtype=torch.long))
    assert logits.shape == (1, 5) and embedding.shape == (1, 128)


def test_fit_that_cannot_fit_exits_3_with_the_closest_result(small_bert_dir, tmp_path, capsys):
    out = tmp_path / "tight"
    code = main(["fit", *NO_RECOVERY, "--model", str(small_bert_dir), "--max-mb", "0.05", "--out", str(out), *FAST])
    captured = capsys.readouterr()
    assert code == 3
    assert "cannot meet size" in captured.out and "--max-mb" in captured.out
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "budget_not_met" and result["fitted"]["label"] == "closest"
    assert result["binding_budgets"] == ["size"] and result["suggestions"]
    closest = result["fitted"]  # the most compressed candidate of the space, measured in full
    assert closest["recipe"]["name"] == "int4" and closest["ffn_fraction"] == 0.5
    assert len(closest["layers_removed"]) == 1
    assert closest["plan"]["heads"]["heads_removed"] == 3
    assert len(closest["plan"]["vocabulary"]["kept_ids"]) == closest["vocabulary_size"]
    assert closest["plan"]["layers_removed"] == closest["layers_removed"] and all(
        len(kept) == 128 // 2 for kept in closest["plan"]["ffn_kept"])  # half of every layer's 128 neurons
    assert closest["benchmark"] is not None and closest["validation_quality"] is not None


def test_a_scored_ffn_allocation_gives_each_layer_its_width(small_bert_dir, tmp_path, capsys):
    """`--ffn-allocation scored`: the fraction is of all FFN neurons, taken in groups of 32 of least fluctuation
    wherever they are, each layer keeping one group at least; the plan, the reproduction and the journal say so."""
    out = tmp_path / "scored"
    code = main(["fit", *NO_RECOVERY, "--model", str(small_bert_dir), "--max-mb", "0.05", "--layer-removals", "0",
                 "--ffn-fractions", "0,0.5", "--ffn-allocation", "scored", "--out", str(out), *FAST])
    capsys.readouterr()
    assert code == 3  # the closest: the most compressed candidate, FFN −50 %
    result = json.loads((out / "result.json").read_text())
    closest = result["fitted"]
    assert closest["ffn_fraction"] == 0.5
    widths = [len(kept) for kept in closest["plan"]["ffn_kept"]]
    assert sum(widths) == 128 and all(w % 32 == 0 and w >= 32 for w in widths)  # half of 2 × 128, on the groups
    assert result["reproduce"]["options"]["ffn_allocation"] == "scored"


# a fit with a trimmed vocabulary and the folder it ships: tests/test_app_handoff.py


def test_the_search_spans_ffn_width_layers_and_vocabulary(small_bert_dir, small_bert_int8_bytes, tmp_path, capsys):
    # between the int8 sizes with 2 and with 3 of 4 heads gone per layer: reachable by heads, FFN width,
    # a removed layer or a trimmed vocabulary; the search weighs them all and builds only a few
    budget_mb = (small_bert_int8_bytes(2) + small_bert_int8_bytes(3)) / 2e6
    out = tmp_path / "space"
    code = main(["fit", *NO_RECOVERY,
                 "--model", str(small_bert_dir), "--max-mb", f"{budget_mb:.6f}", "--recipe", "int8",
                 "--ffn-fractions", "0,0.5", "--out", str(out), "--json", *FAST])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["message"]
    trials = result["trials"]
    assert {t["ffn_fraction"] for t in trials} == {0.0, 0.5} and {t["layers_removed"] for t in trials} == {0, 1}
    assert {t["trim_vocabulary"] for t in trials} == {False, True}
    built = [t for t in trials if t["file_bytes"] is not None]
    assert len(built) == len(result["candidates"]) < 8  # of 2 FFN × 2 layer counts × 2 vocabularies × 3–7 counts
    fitted = result["fitted"]
    assert fitted["file_bytes"] <= budget_mb * 1e6 and fitted["benchmark"]["measured"]
    assert_fit_chose_right(result)
    report = (out / "report.md").read_text()
    assert "| structure |" in report and "PyTorch estimate" in report


def test_an_unreachable_device_is_fitted_on_labelled_estimates(small_bert_dir, tmp_path, capsys):
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    profile = tmp_path / "board.toml"
    profile.write_text(f"""name = "board"
description = "a board on a loopback port nothing listens on"
[hardware]
arch = "aarch64"
cores = 4
ram_mb = 4096
peak_gflops = 50.0
[runtime]
name = "executorch"
threads = 4
[budgets]
max_mb = 100.0
[power]
idle_w = 2.0
active_w = 6.0
[connection]
kind = "ssh"
host = "127.0.0.1"
port = {port}
user = "nobody"
""")
    common = ["fit", *NO_RECOVERY, "--model", str(small_bert_dir), "--device", str(profile), "--recipe", "int8",
              *HEADS_ONLY, *FAST]
    assert main([*common, "--require-device", "--out", str(tmp_path / "strict")]) == 5
    assert "board" in capsys.readouterr().err and not (tmp_path / "strict").exists()

    out = tmp_path / "estimated"
    code = main([*common, "--max-latency-ms", "1000", "--out", str(out), "--json"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 0 and "ESTIMATED, not measured" in captured.err
    # said at the top: the first line on stderr, result.json's status, report.md's first line, the page's banner
    assert captured.err.splitlines()[0].startswith("edgeprune: warning: fit (estimated): board is not reachable")
    assert result["status"] == "fit (estimated)" and result["message"].startswith("fits every budget as ESTIMATED")
    assert (out / "report.md").read_text().splitlines()[0].endswith(" — fit (estimated)")
    assert '<div class="status fit estimated" id="status"><p><strong>fit (estimated)</strong>' in \
        (out / "report.html").read_text()
    for artifact in (result["dense"], result["fitted"]):
        bench = artifact["benchmark"]
        assert bench["measured"] is False and bench["device"] == "board" and bench["threads"] == 4
        assert any(note.startswith("estimated for board") for note in bench["notes"])
        assert bench["energy_source"] == "estimated:power-model" and bench["energy_mj_per_inference"] > 0
    latency = next(c for c in result["fitted"]["checks"] if c["name"] == "latency p50")
    assert latency["source"] == "estimated"
    assert "ESTIMATED, board not connected" in (out / "report.md").read_text()
