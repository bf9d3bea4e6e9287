"""The bundled default on the real MiniLM: `edgeprune fit --device host --max-mb 30` (the demo job)."""

import json

import pytest

from edgeprune.cli import main
from tests.test_fit_integration import NO_RECOVERY

pytestmark = pytest.mark.integration


def test_minilm_bbc_fits_30_mb_within_two_points_of_the_dense_teacher(tmp_path, capsys, minilm_cache, monkeypatch):
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(minilm_cache))  # the README test's teacher, when it ran first
    out = tmp_path / "minilm"
    # the demo's budget on the int8 rung, heads and vocabulary only, to keep the suite short (the demo's whole
    # space is measured by `make demo` and benchmarks/fit_search.py; the space is tested on a small BERT)
    code = main(["fit", *NO_RECOVERY, "--device", "host", "--max-mb", "30", "--recipe", "int8", "--ffn-fractions", "0",
                 "--layer-removals", "0", "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr()
    result = json.loads((out / "result.json").read_text())
    fitted, dense = result["fitted"], result["dense"]
    assert fitted["file_bytes"] <= 30e6 < dense["file_bytes"]
    assert fitted["verification"]["min_cosine"] >= 0.999
    assert result["task"]["split_sizes"]["test"] >= 600
    assert dense["test_accuracy"] - fitted["test_accuracy"] <= 0.02
    assert abs(dense["test_accuracy"] - result["teacher_test_accuracy"]) <= 0.005  # fp32 export = PyTorch
    # the head scoring was chosen by measurement on MiniLM, and the report says so with both figures
    decision = result["reproduce"]["scoring_decision"]
    assert [trial["criterion"] for trial in decision["trials"]] == ["fluctuation", "taylor"]
    chosen = decision["trials"][decision["chosen"]]
    assert result["reproduce"]["criterion"] == chosen["criterion"] and decision["heads_removed"] == 36
    assert (f"Head scoring chosen by measurement: {chosen['criterion']} ({chosen['normalize']} per layer, "
            f"compensated), validation accuracy {chosen['quality']['value']:.4f} with 36 of 72 heads removed"
            in (out / "report.md").read_text())
