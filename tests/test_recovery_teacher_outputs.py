"""The teacher's outputs kept across distillation runs: the same training bit for bit, one forward per batch."""

import copy

import pytest
import torch

from edgeprune.progress import Progress
from edgeprune.recovery import DistillConfig, DistillData, distill
from edgeprune.recovery.losses import forward
from edgeprune.recovery.teacher_outputs import TeacherOutputs, batch_key
from tests.test_recovery_distill import confident_teacher, damaged_student, labelled_batches

QUIET = Progress(enabled=False)
FAST = DistillConfig(learning_rate=3e-3, warmup_steps=2, max_steps=14, eval_every=5, patience=0, seed=7)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


class CountingTeacher(torch.nn.Module):
    """The teacher, counting the batches it runs on."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, input_ids, attention_mask=None):
        self.calls += 1
        return self.inner(input_ids, attention_mask)


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _data(teacher, train=4, validation=2):
    return DistillData.from_batches(labelled_batches(teacher, train, 1), labelled_batches(teacher, validation, 2))


def test_a_run_with_kept_outputs_trains_exactly_as_one_without():
    teacher = confident_teacher()
    base = damaged_student(teacher)
    data = _data(teacher)
    plain_student, kept_student = copy.deepcopy(base), copy.deepcopy(base)
    distill(plain_student, teacher, data, FAST, QUIET)  # a fresh cache inside: only repeats are kept
    cache = TeacherOutputs(teacher)
    distill(copy.deepcopy(base), teacher, data, FAST, QUIET, cache)  # fills the cache
    second = distill(kept_student, teacher, data, FAST, QUIET, cache)  # reads only from it
    for name, value in _weights(plain_student).items():
        assert torch.equal(value, _weights(kept_student)[name]), name
    assert second.steps == 14


def test_the_teacher_runs_once_per_distinct_batch_across_runs():
    inner = confident_teacher()
    teacher = CountingTeacher(inner)
    data = _data(inner, train=4, validation=2)
    cache = TeacherOutputs(teacher)
    distill(damaged_student(inner), teacher, data, FAST, QUIET, cache)
    # 4 training batches (14 steps: 3.5 epochs, the same batch order every epoch) + 2 validation batches
    assert teacher.calls == 6
    assert (cache.misses, len(cache)) == (6, 6)
    distill(damaged_student(inner), teacher, data, FAST, QUIET, cache)
    assert teacher.calls == 6  # the second run reads everything from memory
    # per run: 14 training steps and 4 validation passes (step 0, 5, 10, and the last at 14) of 2 batches
    assert cache.hits + cache.misses == 2 * (14 + 4 * 2)


def test_outputs_past_the_bound_are_computed_and_not_kept():
    teacher = confident_teacher()
    batch = labelled_batches(teacher, 1, 5)[0]
    size = forward(teacher, batch).logits.numel() * 4 + forward(teacher, batch).embedding.numel() * 4
    cache = TeacherOutputs(teacher, max_bytes=size - 1)
    first = cache.outputs(batch)
    assert len(cache) == 0 and cache.kept_bytes == 0
    assert torch.equal(first.logits, forward(teacher, batch).logits)
    roomy = TeacherOutputs(teacher, max_bytes=size)
    roomy.outputs(batch)
    assert (len(roomy), roomy.kept_bytes) == (1, size)


def test_the_key_reads_what_the_model_reads_and_nothing_else():
    teacher = confident_teacher()
    batch = labelled_batches(teacher, 1, 5)[0]
    relabelled = {**batch, "labels": batch["labels"] + 1}
    assert batch_key(batch) == batch_key(relabelled)  # labels never reach the teacher
    masked = {**batch, "attention_mask": batch["attention_mask"].clone()}
    masked["attention_mask"][5, -1] = 0
    assert batch_key(batch) != batch_key(masked)
    assert batch_key(batch) != batch_key({**batch, "input_ids": batch["input_ids"].to(torch.int32)})


def test_hidden_state_alignment_keeps_its_outputs_apart_and_trains_the_same():
    teacher = confident_teacher()
    base = damaged_student(teacher)
    data = _data(teacher)
    config = FAST.replace(hidden_weight=1.0)
    cache = TeacherOutputs(teacher)
    distill(copy.deepcopy(base), teacher, data, FAST, QUIET, cache)  # keeps outputs without hidden states
    with_hidden = copy.deepcopy(base)
    distill(with_hidden, teacher, data, config, QUIET, cache)
    plain = copy.deepcopy(base)
    distill(plain, teacher, data, config, QUIET)
    for name, value in _weights(plain).items():
        assert torch.equal(value, _weights(with_hidden)[name]), name


def test_a_cache_of_another_teacher_is_refused():
    teacher = confident_teacher()
    with pytest.raises(ValueError, match="another teacher"):
        distill(damaged_student(teacher), teacher, _data(teacher), FAST, QUIET, TeacherOutputs(confident_teacher()))
