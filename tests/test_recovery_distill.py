"""Distillation of a pruned tiny BERT classifier towards its dense teacher."""

import copy
import io
import json

import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.progress import Progress
from edgeprune.pruning import prune_heads
from edgeprune.recovery import DistillConfig, DistillData, DistillResult, distill, kl_to_teacher
from tests.conftest import tiny_bert

QUIET = Progress(enabled=False)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def confident_teacher():
    encoder = tiny_bert()
    torch.manual_seed(3)
    head = torch.nn.Linear(32, 3)
    with torch.no_grad():
        head.weight *= 30  # confident predictions, so the KL to a damaged student is far from zero
    return EncoderClassifier(encoder, head).eval()


def damaged_student(teacher):
    """A pruned copy whose head disagrees with the teacher's (pruning alone barely moves a random tiny BERT)."""
    student = prune_heads(copy.deepcopy(teacher), {0: [0, 1, 2], 1: [1, 2, 3], 2: [0, 3]})
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        student.classifier.weight.add_(10 * torch.randn(student.classifier.weight.shape, generator=generator))
    return student


def labelled_batches(teacher, count, seed):
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        ids = torch.randint(1000, 1200, (8, 12), generator=generator)
        mask = torch.ones_like(ids)
        mask[:2, 9:] = 0
        with torch.no_grad():
            labels = teacher(ids, mask)[0].argmax(-1)  # the teacher's own predictions: recoverable labels
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return batches


def _data(teacher):
    return DistillData.from_batches(labelled_batches(teacher, 6, 1), labelled_batches(teacher, 2, 2))


FAST = DistillConfig(learning_rate=3e-3, warmup_steps=2, max_steps=30, eval_every=10, patience=0, seed=7)


def test_distillation_lowers_the_kl_to_the_teacher_on_held_out_batches():
    teacher = confident_teacher()
    student = damaged_student(teacher)
    data = _data(teacher)
    held_out = labelled_batches(teacher, 3, 99)
    before = kl_to_teacher(student, teacher, held_out)
    teacher_state = copy.deepcopy(teacher.state_dict())
    result = distill(student, teacher, data, FAST, QUIET)
    after = kl_to_teacher(student, teacher, held_out)
    assert after < 0.7 * before, (before, after)
    assert result.steps == 30 and result.stopped == "max_steps" and result.metric == "accuracy"
    assert result.best_metric >= result.initial_metric
    # the teacher is untouched and left trainable as it was
    for name, value in teacher.state_dict().items():
        assert torch.equal(value, teacher_state[name]), name
    assert all(p.requires_grad for p in teacher.parameters())
    assert not student.training


def test_same_seed_gives_identical_weights_and_another_seed_differs():
    teacher = confident_teacher()
    data = _data(teacher)
    config = FAST.replace(max_steps=8, eval_every=4, dropout=True)
    students = []
    for seed in (7, 7, 8):
        student = damaged_student(teacher)
        # dropout is on while training: the seed must fix it
        distill(student, teacher, data, config.replace(seed=seed), QUIET)
        students.append(student.state_dict())
    assert all(torch.equal(students[0][k], students[1][k]) for k in students[0])
    assert any(not torch.equal(students[0][k], students[2][k]) for k in students[0])


def test_early_stop_restores_the_best_validation_weights():
    teacher = confident_teacher()
    student = damaged_student(teacher)
    start = copy.deepcopy(student.state_dict())
    # a wild learning rate only makes things worse: no pass beats the starting weights, which come back
    config = DistillConfig(learning_rate=5.0, warmup_steps=0, max_steps=100, eval_every=2, patience=2,
                           max_grad_norm=1e3, seed=0)
    batches = labelled_batches(teacher, 4, 1)
    unlabeled = [{k: v for k, v in b.items() if k != "labels"} for b in batches]
    result = distill(student, teacher, DistillData.from_batches(unlabeled, unlabeled[:2]), config, QUIET)
    assert result.stopped == "early_stop" and result.steps == 4
    assert result.metric == "neg_kl" and result.best_step == 0
    assert len(result.history) == 3 and all(h["kl"] > result.history[0]["kl"] for h in result.history[1:])
    assert all(torch.equal(student.state_dict()[k], start[k]) for k in start)


def test_the_kept_weights_score_the_reported_best_metric():
    teacher = confident_teacher()
    student = damaged_student(teacher)
    data = _data(teacher)
    result = distill(student, teacher, data, FAST.replace(eval_every=5, patience=2, learning_rate=2e-2), QUIET)
    assert result.best_metric == max(h["accuracy"] for h in result.history)
    best = [h for h in result.history if h["step"] == result.best_step][0]
    assert kl_to_teacher(student, teacher, data.validation()) == pytest.approx(best["kl"], rel=1e-5)


def test_step_and_second_budgets_are_respected():
    teacher = confident_teacher()
    result = distill(damaged_student(teacher), teacher, _data(teacher), FAST.replace(max_steps=5, eval_every=100),
                     QUIET)
    assert result.steps == 5 and result.stopped == "max_steps" and result.epochs == 1
    result = distill(damaged_student(teacher), teacher, _data(teacher),
                     FAST.replace(max_steps=10_000, max_seconds=0.5, eval_every=10_000), QUIET)
    assert result.stopped == "max_seconds" and 0 < result.steps < 10_000
    assert result.seconds < 5.0  # the budget, plus one last validation pass
    result = distill(damaged_student(teacher), teacher, _data(teacher),
                     FAST.replace(max_steps=10_000, max_epochs=2, eval_every=10_000), QUIET)
    assert result.stopped == "max_epochs" and result.steps == 12 and result.epochs == 2


def test_progress_reports_loss_and_validation_on_stderr_style_stream():
    teacher = confident_teacher()
    stream = io.StringIO()
    distill(damaged_student(teacher), teacher, _data(teacher), FAST.replace(max_steps=4, eval_every=2),
            Progress(stream=stream, interval_s=0))
    text = stream.getvalue()
    assert "distilling (loss " in text and "validation accuracy" in text


def test_student_and_teacher_must_be_distinct():
    teacher = confident_teacher()
    with pytest.raises(ValueError, match="same module"):
        distill(teacher, teacher, _data(teacher), FAST, QUIET)


def test_config_and_result_round_trip_through_json():
    config = DistillConfig(temperature=4.0, layer_map=[0, 2], hidden_weight=0.5, max_seconds=60.0)
    assert DistillConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    teacher = confident_teacher()
    result = distill(damaged_student(teacher), teacher, _data(teacher), FAST.replace(max_steps=2, eval_every=1), QUIET)
    again = DistillResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.config == result.config and again.history == result.history and again.steps == 2
    with pytest.raises(UserInputError, match="unknown fields"):
        DistillConfig.from_dict({"temprature": 2})
    with pytest.raises(UserInputError, match="temperature"):
        DistillConfig(temperature=0)
    with pytest.raises(UserInputError, match="embedding_loss"):
        DistillConfig(embedding_loss="l1")
