"""`distill_pruned` and `save_distilled` as a Python user calls them: a pruned tiny BERT recovered from the dense
teacher of the bundled task (on the tiny BERT), with layer and FFN removal first; model and task errors in one line."""

import json

import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.io import load, save
from edgeprune.pruning import prune_heads
from edgeprune.pruning.ffn import intermediate_sizes
from edgeprune.recovery import DistillConfig, PrunedDistillation, distill_pruned, save_distilled
from edgeprune.tasks import bundled_task
from tests.conftest import tiny_bert

CONFIG = DistillConfig(max_steps=2, eval_every=2, learning_rate=1e-3)
LIMITS = dict(train_limit=32, validation_limit=32)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def task(tiny_bert_dir):
    return bundled_task("minilm-bbc", model_path=tiny_bert_dir, max_length=16)


@pytest.fixture
def pruned(tiny_bert_dir):
    return prune_heads(load(tiny_bert_dir), {0: [0, 1], 2: [3]})


def test_a_pruned_encoder_is_recovered_and_saved_as_the_cli_writes_it(pruned, task, tiny_bert_dir, tmp_path):
    source = save(pruned, tmp_path / "pruned")
    (source / "plan.json").write_text('{"kept": "as pruned"}')
    distilled = distill_pruned(load(source), task, CONFIG, source=source, **LIMITS)
    assert isinstance(distilled, PrunedDistillation)
    assert distilled.result.steps == 2 and distilled.result.stopped == "max_steps"
    assert distilled.result.metric == "accuracy" and distilled.task == "minilm-bbc"
    assert distilled.structure() == {} and distilled.removed_layers is None and distilled.ffn_ratio is None
    assert 0 <= distilled.teacher_validation_accuracy <= 1
    out = save_distilled(distilled, tmp_path / "recovered")
    record = json.loads((out / "distill.json").read_text())
    assert list(record) == ["student", "task", "teacher_validation_accuracy", "result"]
    assert record["student"] == str(source) and record["result"] == distilled.result.to_dict()
    assert (out / "plan.json").read_text() == '{"kept": "as pruned"}'
    assert (out / "vocab.txt").exists()  # tokenizer files from the teacher's folder when the student's has none
    recovered = load(out)
    assert [b.num_heads for b in adapter_for(recovered).attention_blocks(recovered)] == [2, 4, 3]
    head = torch.load(out / "classifier.pt")
    assert torch.equal(head["weight"], distilled.student.classifier.weight)
    batch = task.encode("validation")
    inputs = {"input_ids": batch["input_ids"][:4], "attention_mask": batch["attention_mask"][:4]}
    with torch.no_grad():
        assert torch.allclose(recovered(**inputs).last_hidden_state,
                              distilled.student.encoder(**inputs).last_hidden_state, atol=1e-5)


def test_layers_and_ffn_neurons_go_before_distillation(pruned, task, tmp_path):
    distilled = distill_pruned(pruned, task, DistillConfig(max_steps=1, eval_every=1, hidden_weight=1.0),
                               remove_layers=1, ffn_ratio=0.25, scoring_batches=2, **LIMITS)
    removed = distilled.removed_layers
    assert len(removed) == 1 and distilled.layer_map == [i for i in range(3) if i not in removed]
    assert distilled.result.config.layer_map == distilled.layer_map  # hidden states aligned with the kept layers
    assert distilled.intermediate_sizes == [48, 48] == intermediate_sizes(distilled.student)
    assert list(distilled.structure()) == ["removed_layers", "layer_map", "ffn_ratio", "ffn_criterion",
                                           "intermediate_sizes"]
    record = json.loads((save_distilled(distilled, tmp_path / "out") / "distill.json").read_text())
    assert record["student"] is None and record["ffn_criterion"] == "activation"
    assert load(tmp_path / "out").config.num_hidden_layers == 2


def test_ffn_only_by_weight_norm(pruned, task):
    distilled = distill_pruned(pruned, task, DistillConfig(max_steps=1, eval_every=1), ffn_ratio=0.5,
                               ffn_criterion="weight-norm", **LIMITS)
    assert distilled.removed_layers is None and distilled.intermediate_sizes == [32, 32, 32]
    assert distilled.structure() == {"ffn_ratio": 0.5, "ffn_criterion": "weight-norm",
                                     "intermediate_sizes": [32, 32, 32]}


@pytest.mark.parametrize(("options", "message"), [
    ({"remove_layers": 3}, "--remove-layers 3: the model has 3 layers, so 1..2 can go"),
    ({"remove_layers": -1}, "remove_layers must be >= 0, got -1"),
    ({"ffn_ratio": 1.0}, "ffn_ratio must be a share of neurons in [0, 1), got 1.0"),
    ({"ffn_ratio": float("nan")}, "ffn_ratio must be a share of neurons"),
    ({"ffn_criterion": "taylor"}, "unknown FFN criterion 'taylor'; choose from"),
    ({"scoring_batches": 0}, "scoring_batches must be at least 1, got 0"),
    ({"batch_size": 0}, "batch_size must be at least 1, got 0"),
    ({"train_limit": 0}, "train_limit must be at least 1, got 0"),
])
def test_bad_options_are_refused_in_one_line_before_any_work(pruned, task, options, message):
    with pytest.raises(UserInputError) as error:
        distill_pruned(pruned, task, **options)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (task.cache_dir / "teachers").exists()  # refused before the teacher was built


def test_a_student_of_another_width_is_refused_naming_its_folder(task, tmp_path):
    source = tmp_path / "wide"
    with pytest.raises(UserInputError, match=f"^{source} has hidden size 64 but the teacher's 32; distill a model "
                                             "pruned from the task's model$"):
        distill_pruned(tiny_bert(hidden_size=64), task, source=source)
    with pytest.raises(UserInputError, match="^the student has hidden size 64"):
        distill_pruned(tiny_bert(hidden_size=64), task)

