"""Recovery by default (`--recover-steps auto`): a built pruned candidate is distilled when its unrecovered PyTorch
estimate falls short of the dense teacher's by more than the tie tolerance, and only then; `--recover-steps 0`
turns recovery off; the result and the report say what recovery cost and bought."""

import json
import re

import pytest

from edgeprune.search.choice import quality_tolerance
from edgeprune.search.options import AUTO_RECOVER_STEPS, FitOptions
from edgeprune.search.recovering import needs_recovery, pruning_cost
from edgeprune.search.result import FitResult
from edgeprune.search.space import Shape
from edgeprune.tasks.base import Quality
from tests.test_fit_integration import FAST


class Estimates:
    """What `needs_recovery` reads of a builder: the options and the unrecovered PyTorch estimates."""

    def __init__(self, options: FitOptions, values: dict[Shape, float]) -> None:
        self.options, self.values = options, values

    def unrecovered_proxy(self, shape: Shape) -> Quality:
        return Quality("accuracy", self.values[shape.structure], True, "validation", 335)

    def tolerance(self) -> float:
        return quality_tolerance(self.options, self.unrecovered_proxy(Shape()))


@pytest.mark.parametrize(("steps", "tolerance", "distilled"), [
    ("auto", 0.01, {Shape(36), Shape(36, 0.5, 1, True)}),  # costs 0.03 and 0.11: more than a point
    ("auto", 0.05, {Shape(36, 0.5, 1, True)}),
    ("auto", 0.2, set()),
    (150, 0.2, {Shape(12), Shape(36), Shape(36, 0.5, 1, True)}),  # N steps: every pruned structure
    (0, 0.0, set()),
])
def test_a_structure_is_distilled_when_pruning_cost_it_more_than_the_tolerance(steps, tolerance, distilled):
    values = {Shape(): 0.95, Shape(12): 0.945, Shape(36): 0.92, Shape(36, 0.5, 1): 0.84}
    builder = Estimates(FitOptions(recover_steps=steps, quality_tolerance=tolerance), values)
    shapes = [Shape(), Shape(12), Shape(36), Shape(36, 0.5, 1, True)]
    assert {shape for shape in shapes if needs_recovery(builder, shape)} == distilled
    assert pruning_cost(builder, Shape(36)) == pytest.approx(0.03)


def test_the_default_tolerance_is_one_standard_error_of_the_dense_accuracy():
    builder = Estimates(FitOptions(), {Shape(): 0.95, Shape(12): 0.94, Shape(36): 0.93})
    assert builder.tolerance() == pytest.approx((0.95 * 0.05 / 335) ** 0.5)  # 0.0119
    assert not needs_recovery(builder, Shape(12)) and needs_recovery(builder, Shape(36))


def test_the_default_fit_distils_where_pruning_costs_and_steps_zero_turns_it_off(small_bert_dir,
                                                                                  small_bert_int8_bytes, tmp_path,
                                                                                  capsys):
    """The user's run as typed (no recovery flag), then with `--recover-steps 0`, on the same budget."""
    from edgeprune.cli import main

    budget_mb = (small_bert_int8_bytes(2) + small_bert_int8_bytes(3)) / 2e6
    base = ["fit", "--model", str(small_bert_dir), "--max-mb", f"{budget_mb:.6f}", "--recipe", "int8",
            "--ffn-fractions", "0,0.5", "--json", *FAST]
    assert main([*base, "--out", str(tmp_path / "auto")]) == 0
    result = json.loads(capsys.readouterr().out)
    recovery = result["recovery"]
    assert (recovery["mode"], recovery["steps"]) == ("auto", AUTO_RECOVER_STEPS)
    dense_estimate = recovery["reference"]["value"]
    tolerance = result["quality_tolerance"]
    pruned = [c for c in result["candidates"] if c["label"] in ("candidate", "fitted") and c["plan"]["heads"] and (
        c["plan"]["heads"]["heads_removed"] or c["ffn_fraction"] or c["layers_removed"])]
    assert pruned
    recovered_structures = set()
    for candidate in pruned:
        if candidate["recovery"]:  # distilled: its unrecovered estimate fell short by more than the tolerance
            before = float(re.search(r"PyTorch ([\d.]+) before", candidate["recovery"]).group(1))
            assert dense_estimate - before > tolerance - 1e-4
            recovered_structures.add((candidate["plan"]["heads"]["heads_removed"], candidate["ffn_fraction"],
                                      len(candidate["layers_removed"])))
        else:  # not distilled: the search's estimate of it is the unrecovered one, within the tolerance
            trial = next(t for t in result["trials"] if (t["heads_removed"], t["ffn_fraction"],
                         t["layers_removed"]) == (candidate["plan"]["heads"]["heads_removed"],
                                                  candidate["ffn_fraction"], len(candidate["layers_removed"])))
            assert dense_estimate - trial["estimated_quality"] <= tolerance + 1e-4
    assert recovery["structures"] == len(recovered_structures)
    assert (recovery["seconds"] > 0) == bool(recovered_structures)
    report = (tmp_path / "auto" / "report.md").read_text()
    assert FitResult.load(tmp_path / "auto" / "result.json").recovery.describe() in report
    assert f"Recovery (auto, {AUTO_RECOVER_STEPS} steps each)" in report

    assert main([*base, "--recover-steps", "0", "--out", str(tmp_path / "off")]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["recovery"]["mode"] == "off" and off["recovery"]["structures"] == 0
    assert all(c["recovery"] == "" for c in off["candidates"])
    assert "Recovery: off (--recover-steps 0)." in (tmp_path / "off" / "report.md").read_text()
