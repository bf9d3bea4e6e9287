"""prune_and_recover on a tiny BERT classifier: one-shot and iterative reach the target; layers and FFN."""

import copy

import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.progress import Progress
from edgeprune.pruning import Constraints
from edgeprune.pruning.ffn import intermediate_sizes
from edgeprune.recovery import DistillConfig, DistillData, kl_to_teacher
from edgeprune.recovery.losses import captured_hidden, hidden_alignment
from edgeprune.recovery.schedules import prune_and_recover, prune_ffn_and_recover, remove_redundant_layers
from tests.conftest import tiny_bert

QUIET = Progress(enabled=False)
CONFIG = DistillConfig(learning_rate=3e-3, warmup_steps=1, max_steps=8, eval_every=4, patience=0)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _teacher(layers=3):
    encoder = tiny_bert(num_hidden_layers=layers)
    torch.manual_seed(3)
    head = torch.nn.Linear(32, 3)
    with torch.no_grad():
        head.weight *= 30
    return EncoderClassifier(encoder, head).eval()


def _data(teacher):
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(4):
        ids = torch.randint(1000, 1200, (8, 12), generator=generator)
        with torch.no_grad():
            labels = teacher(ids, torch.ones_like(ids))[0].argmax(-1)
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return DistillData.from_batches(batches[:3], batches[3:])


def _heads(model):
    return [b.num_heads for b in adapter_for(model).attention_blocks(model)]


@pytest.mark.parametrize("schedule", ["one-shot", "iterative"])
def test_both_schedules_reach_the_target_count(schedule):
    teacher = _teacher()
    model = copy.deepcopy(teacher)
    outcome = prune_and_recover(model, teacher, _data(teacher), 6, schedule, steps=3, recover_config=CONFIG,
                                criterion="gate-gradient", constraints=Constraints(min_heads_per_layer=1),
                                progress=QUIET)
    assert outcome.plan.heads_removed == 6 and sum(_heads(model)) == 6
    assert _heads(model) == [len(k) for k in outcome.plan.kept_heads]
    assert outcome.model is model and outcome.recovery_seconds <= outcome.seconds
    if schedule == "one-shot":
        assert len(outcome.distillations) == 1 and outcome.distillations[0].steps == 8
    else:  # one recovery per removal round, sharing the step budget
        assert len(outcome.distillations) == 3 and [d.steps for d in outcome.distillations] == [2, 2, 2]
        assert "iterative(steps=3" in outcome.plan.strategy


def test_the_model_must_not_be_the_teacher_and_schedules_are_checked():
    teacher = _teacher()
    with pytest.raises(UserInputError, match="teacher itself"):
        prune_and_recover(teacher, teacher, _data(teacher), 2)
    with pytest.raises(UserInputError, match="unknown schedule"):
        prune_and_recover(copy.deepcopy(teacher), teacher, _data(teacher), 2, "gradual")


def test_layer_map_aligns_student_layers_with_the_teachers_they_came_from():
    teacher = _teacher(layers=4)
    student = copy.deepcopy(teacher)
    adapter_for(student).remove_layers(student, [3])  # layers 0..2 compute exactly what the teacher's do
    ids = torch.randint(1000, 1200, (2, 9))
    mask = torch.ones_like(ids)
    mine, theirs = [], []
    with captured_hidden(student, mine), captured_hidden(teacher, theirs), torch.no_grad():
        student(ids, mask)
        teacher(ids, mask)
    assert len(mine) == 3 and len(theirs) == 4
    assert float(hidden_alignment(mine, theirs, [0, 1, 2], mask)) == 0.0
    assert float(hidden_alignment(mine, theirs, [1, 2, 3], mask)) > 1e-5  # random tiny layers change little


def test_layer_removal_then_heads_distills_with_the_layer_map():
    teacher = _teacher(layers=4)
    model = copy.deepcopy(teacher)
    config = CONFIG.replace(hidden_weight=1.0)
    outcome = prune_and_recover(model, teacher, _data(teacher), 3, "one-shot", recover_config=config,
                                criterion="weight-magnitude", remove_layers=1, progress=QUIET)
    removed = outcome.layers.removed
    assert len(removed) == 1 and outcome.layers.layer_map == [i for i in range(4) if i not in removed]
    assert model.encoder.config.num_hidden_layers == 3 and len(_heads(model)) == 3
    assert outcome.plan.heads_removed == 3 and sum(_heads(model)) == 9
    assert [d.config.layer_map for d in outcome.distillations] == [outcome.layers.layer_map] * 2
    assert all("kl" in h for d in outcome.distillations for h in d.history)


def test_redundant_layers_are_the_ones_closest_to_identity():
    teacher = _teacher(layers=4)
    with torch.no_grad():  # layer 2 adds nothing to the residual stream: its block is the identity up to LayerNorm
        for dense in (teacher.encoder.encoder.layer[2].attention.output.dense,
                      teacher.encoder.encoder.layer[2].output.dense):
            dense.weight.zero_()
            dense.bias.zero_()
    batches = [b for b in _data(teacher).train(0)]
    removal = remove_redundant_layers(teacher, batches, 1)
    assert removal.removed == [2] and removal.layer_map == [0, 1, 3]


def test_ffn_removal_then_recovery_lowers_the_kl():
    teacher = _teacher()
    with torch.no_grad():  # FFNs that matter (a random tiny BERT's barely move the residual stream)
        for layer in teacher.encoder.encoder.layer:
            layer.output.dense.weight *= 40
    model = copy.deepcopy(teacher)
    data = _data(teacher)
    config = CONFIG.replace(max_steps=12, eval_every=3, learning_rate=1e-4, task_weight=0.0, embedding_weight=0.0)
    # without compensation: with the means folded in, this student starts ten times closer (0.06 against > 0.5)
    removed, result = prune_ffn_and_recover(model, teacher, data, 0.5, "weight-norm", config, progress=QUIET,
                                            compensate=False)
    assert intermediate_sizes(model) == [32, 32, 32] and all(len(v) == 32 for v in removed.values())
    assert model.encoder.config.intermediate_size == 32
    initial = result.history[0]["kl"]
    kept = [h["kl"] for h in result.history if h["step"] == result.best_step][0]
    assert initial > 0.5 and kept < 0.3 * initial and result.best_step > 0
    assert kl_to_teacher(model, teacher, data.validation()) == pytest.approx(kept, rel=1e-5)
