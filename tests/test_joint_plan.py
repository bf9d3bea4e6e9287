"""Joint planning of heads and FFN neurons: exact parameter counts, widths on the recipe's multiple, the cheapest
fluctuation per parameter first, and the cut model equal to the dense one with the same units silenced."""

import numpy as np
import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.importance import HeadScores
from edgeprune.importance.fluctuation import Fluctuation
from edgeprune.models import adapter_for
from edgeprune.pruning import apply_structure
from edgeprune.pruning.ffn import intermediate_sizes, neuron_statistics, zero_neurons
from edgeprune.pruning.joint import plan_joint
from tests.conftest import tiny_bert


def batches(count: int = 4, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, 30522, (2, 12), generator=generator),
             "attention_mask": torch.ones(2, 12, dtype=torch.long)} for _ in range(count)]


def parameters_of(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.fixture(scope="module")
def measured():
    model = tiny_bert(seed=3)
    heads = Fluctuation("projected").score(model, batches())
    return model, heads, neuron_statistics(model, batches())


@pytest.mark.parametrize("budget", [0, 1, 5_000, 12_000, 18_000])
def test_a_joint_plan_removes_exactly_what_it_says_and_at_least_the_budget(measured, budget):
    model, heads, neurons = measured
    plan = plan_joint(model, heads, neurons, budget, neuron_multiple=16)
    pruned = apply_structure(tiny_bert(seed=3), plan.structure)
    assert parameters_of(model) - parameters_of(pruned) == plan.parameters_removed >= budget
    largest_unit = max(adapter_for(model).removed_parameter_count(model, 0, [0]), 16 * (32 + 1 + 32))
    assert plan.parameters_removed < budget + largest_unit  # stops at the first unit that reaches the budget
    assert all(width % 16 == 0 and width >= 16 for width in intermediate_sizes(pruned))
    assert all(len(kept) >= 1 for kept in plan.structure.heads.kept_heads)
    assert plan.heads_removed == plan.structure.heads.heads_removed
    assert plan.neurons_removed == 3 * 64 - sum(intermediate_sizes(pruned))


def test_the_cheapest_units_per_parameter_go_first(measured):
    model, heads, neurons = measured
    scores = np.ones_like(heads.scores)
    scores[1] = 1e-9  # layer 1's heads cost nothing to remove ...
    fluctuation = [np.ones_like(f) for f in neurons.fluctuation]
    fluctuation[2] = np.full_like(fluctuation[2], 1e-9)  # ... nor do layer 2's neurons
    cheap = plan_joint(model, HeadScores(scores, "fluctuation", 8), type(neurons)(
        neurons.means, neurons.mean_abs, fluctuation), 8_000, min_heads_per_layer=1, neuron_multiple=16)
    kept = [len(k) for k in cheap.structure.heads.kept_heads]
    widths = [len(k) for k in cheap.structure.ffn_kept]
    assert kept[1] == 1 and widths[2] == 16  # both cheap kinds taken down to their floors: 6,264 parameters
    # then by score per parameter: a head (score 1, 1,048 parameters) before a group of 16 neurons (16, 1,040);
    # two more heads reach 8,000
    assert widths[:2] == [64, 64] and kept[0] + kept[2] == 6 and cheap.parameters_removed == 6_264 + 2 * 1_048


def test_the_cut_model_equals_the_dense_model_with_those_heads_and_neurons_silenced(measured):
    model, heads, neurons = measured
    plan = plan_joint(model, heads, neurons, 15_000, neuron_multiple=16)
    assert plan.heads_removed and plan.neurons_removed  # the budget is spent on both kinds
    pruned = apply_structure(tiny_bert(seed=3), plan.structure)
    silenced = tiny_bert(seed=3)
    adapter = adapter_for(silenced)
    with torch.no_grad():
        for layer, gone in plan.structure.heads.removed_heads.items():
            weight = adapter.output_projection(silenced, layer).weight
            for head in gone:
                weight[:, head * 8:(head + 1) * 8] = 0  # head size 32 / 4
    zero_neurons(silenced, {layer: [n for n in range(64) if n not in kept]
                            for layer, kept in enumerate(plan.structure.ffn_kept)})
    for batch in batches(2, seed=9):
        expected = silenced(**batch).last_hidden_state
        assert torch.allclose(pruned(**batch).last_hidden_state, expected, atol=1e-5)


def test_an_impossible_budget_and_a_width_off_the_multiple_are_one_line_errors(measured):
    model, heads, neurons = measured
    with pytest.raises(UserInputError, match="can remove at most"):
        plan_joint(model, heads, neurons, parameters_of(model), neuron_multiple=16)
    with pytest.raises(UserInputError, match="not a multiple of 48"):
        plan_joint(model, heads, neurons, 100, neuron_multiple=48)


def test_prune_params_plans_heads_and_ffn_jointly_through_the_cli(tiny_bert_dir, tmp_path, capsys):
    import json

    import edgeprune
    from edgeprune.cli import main
    from edgeprune.progress import Progress
    from edgeprune.pruning import prune_jointly
    from edgeprune.tasks import bundled_task

    flags = ["--model", str(tiny_bert_dir), "--examples", "16", "--max-length", "32", "--quiet"]
    assert main(["prune", *flags, "--params", "15000", "--ffn-multiple", "16", "--out", str(tmp_path / "joint"),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    pruned = edgeprune.load(tmp_path / "joint")
    dense = edgeprune.load(tiny_bert_dir)
    assert parameters_of(dense) - parameters_of(pruned) == printed["parameters_removed"] >= 15000
    assert printed["heads_removed"] and printed["neurons_removed"]
    assert intermediate_sizes(pruned) == printed["ffn_widths"] and all(w % 16 == 0 for w in printed["ffn_widths"])
    # the same as the library call on the same calibration inputs, weight for weight
    task = bundled_task("minilm-bbc", model_path=tiny_bert_dir, max_length=32, progress=Progress(enabled=False))
    from edgeprune.tasks.base import input_batches
    expected = prune_jointly(dense, input_batches(task, "calibration", 16, limit=16), 15000, neuron_multiple=16)
    assert expected.parameters_removed == printed["parameters_removed"]
    for (name, a), (_, b) in zip(dense.state_dict().items(), pruned.state_dict().items(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name

    code = main(["prune", *flags, "--params", "15000", "--scores", str(tmp_path / "s.json"), "--out",
                 str(tmp_path / "both")])
    err = capsys.readouterr().err
    assert code == 2 and "one of --scores" in err and len(err.strip().splitlines()) == 1


def test_prune_ratio_removes_that_fraction_of_what_heads_and_ffn_own(tiny_bert_dir, tmp_path, capsys):
    import json
    import math

    import edgeprune
    from edgeprune.cli import main
    from edgeprune.pruning import prunable_parameters

    dense = edgeprune.load(tiny_bert_dir)
    layers = dense.config.num_hidden_layers
    hidden, ffn = dense.config.hidden_size, dense.config.intermediate_size
    # a head owns its query, key and value rows (with biases) and its output columns; a neuron its input row, bias
    # and output column
    owned = layers * (4 * hidden * hidden + 3 * hidden) + layers * ffn * (2 * hidden + 1)
    assert prunable_parameters(dense) == owned
    flags = ["--model", str(tiny_bert_dir), "--examples", "16", "--max-length", "32", "--quiet"]
    assert main(["prune", *flags, "--ratio", "0.25", "--ffn-multiple", "16", "--out", str(tmp_path / "quarter"),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["asked"] == math.ceil(0.25 * owned) <= printed["parameters_removed"]
    assert parameters_of(dense) - parameters_of(edgeprune.load(tmp_path / "quarter")) == printed["parameters_removed"]
    for ratio in ("0", "1", "-0.5", "nan"):
        code = main(["prune", *flags, "--ratio", ratio, "--out", str(tmp_path / f"bad{ratio}")])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and "--ratio" in err, err

