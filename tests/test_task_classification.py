"""The classification task on a team's own data: a fitted head or the model's own, the quality report, errors."""

import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.pruning import prune_heads
from edgeprune.tasks import make_task
from edgeprune.tasks.base import example_count
from edgeprune.tasks.metrics import classification_report, per_class_regressions
from tests._byo import tiny_classifier_dir, topic_rows, write_csv


def test_a_plain_encoder_gets_a_fitted_head_and_a_full_report(tiny_bert_dir, tmp_path):
    task = make_task("classification", tiny_bert_dir, write_csv(tmp_path / "d.csv", topic_rows()), max_length=16)
    teacher = task.teacher()
    assert not task.uses_own_head and task.labels == ["money", "music", "sport"]
    report = teacher.test.details
    assert teacher.test.metric == "accuracy" and teacher.test.examples == example_count(task, "test")
    assert sum(row["support"] for row in report["per_class"].values()) == example_count(task, "test")
    assert sum(map(sum, report["confusion_matrix"])) == example_count(task, "test") and 0 <= report["macro_f1"] <= 1
    logits, embedding = teacher.model(*task.example_inputs("test", 1)[0])
    assert logits.shape == (1, 3) and embedding.shape == (1, 32)


def test_the_models_own_head_is_used_when_its_labels_match(tmp_path):
    model = tiny_classifier_dir(tmp_path / "clf", ["sport", "money", "music"])
    task = make_task("classification", model, write_csv(tmp_path / "d.csv", topic_rows()), max_length=16)
    assert task.uses_own_head and task.labels == ["sport", "money", "music"]  # the head's order, not sorted
    teacher = task.teacher()
    (logits,) = teacher.model(*task.example_inputs("validation", 1)[0])
    assert logits.shape == (1, 3)
    assert task.loss(teacher.model, next(task.batches("calibration", 4))).requires_grad


def test_a_head_that_does_not_match_the_labels_is_a_clear_error(tmp_path):
    model = tiny_classifier_dir(tmp_path / "clf", ["positive", "negative"])
    task = make_task("classification", model, write_csv(tmp_path / "d.csv", topic_rows()), max_length=16)
    with pytest.raises(UserInputError, match=r"predicts \['positive', 'negative'\].*--head fit"):
        task.teacher()
    refit = make_task("classification", model, tmp_path / "d.csv", max_length=16, head="fit")
    assert refit.teacher().test.metric == "accuracy" and refit.labels == ["money", "music", "sport"]


def test_max_length_beyond_the_models_positions_is_refused(tiny_bert_dir, tmp_path):
    with pytest.raises(UserInputError, match="beyond the 64 positions.*--max-length 64"):
        make_task("classification", tiny_bert_dir, write_csv(tmp_path / "d.csv", topic_rows()), max_length=65)


def test_per_class_regressions_show_a_class_lost_behind_a_stable_mean():
    labels = ["a", "b"]
    targets = torch.tensor([0, 0, 1, 1])
    dense = classification_report(torch.tensor([[1., 0], [1, 0], [0, 1], [1, 0]]), targets, labels)
    pruned = classification_report(torch.tensor([[1., 0], [0, 1], [0, 1], [0, 1]]), targets, labels)
    assert dense["accuracy"] == pruned["accuracy"] == 0.75
    assert per_class_regressions(dense, pruned) == [{"label": "a", "reference_recall": 1.0, "recall": 0.5,
                                                     "drop": 0.5, "extra_errors": 1}]


def test_runtime_quality_and_batched_accuracy_agree_with_pytorch_quality(tiny_bert_dir, tmp_path):
    task = make_task("classification", tiny_bert_dir, write_csv(tmp_path / "d.csv", topic_rows()), max_length=16)
    model = task.teacher().model
    prune_heads(model.encoder, {0: [0, 1, 2], 1: [0, 1, 2], 2: [0, 1, 2]})  # a different model than the teacher
    in_pytorch = task.quality(model, "test")
    through_a_runner = task.runtime_quality(lambda *inputs: list(model(*inputs)), "test")
    assert through_a_runner.value == in_pytorch.value == task.accuracy(model, "test", batch_size=5)
    assert through_a_runner.details["confusion_matrix"] == in_pytorch.details["confusion_matrix"]
