"""DistillData from a task: calibration for training (shuffled per epoch by seed), validation for stopping,
and never the test split."""

import copy

import pytest
import torch

from edgeprune.models.classifier import EncoderClassifier
from edgeprune.progress import Progress
from edgeprune.recovery import DistillConfig, DistillData, distill
from edgeprune.recovery.schedules import prune_and_recover
from edgeprune.tasks import TextClassificationTask

QUIET = Progress(enabled=False)


class NoTestTask(TextClassificationTask):
    """A task that fails loudly if anything reads its test split."""

    def encode(self, split):
        if split == "test":
            raise AssertionError("the test split was read")
        return super().encode(split)

    def batches(self, split, batch_size, limit=None):
        if split == "test":
            raise AssertionError("the test split was read")
        return super().batches(split, batch_size, limit)


@pytest.fixture
def task(tiny_bert_dir, bbc_sample):
    return NoTestTask(name="tiny", model_path=tiny_bert_dir, load_items=lambda: bbc_sample, max_length=16,
                      progress=QUIET)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _ids(batches):
    return torch.cat([b["input_ids"] for b in batches])


def test_train_batches_cover_calibration_reshuffled_per_epoch_and_repeatable(task):
    data = DistillData.from_task(task, batch_size=16, seed=3)
    calibration = task.encode("calibration")["input_ids"]
    first = list(data.train(0))
    assert all(len(b["labels"]) <= 16 for b in first) and set(first[0]) == {"input_ids", "attention_mask", "labels"}
    epoch0 = _ids(first)
    assert len(epoch0) == len(calibration)
    assert sorted(map(tuple, epoch0.tolist())) == sorted(map(tuple, calibration.tolist()))
    assert torch.equal(epoch0, _ids(data.train(0)))  # same seed and epoch: same order
    assert not torch.equal(epoch0, _ids(data.train(1)))  # a new epoch reshuffles
    assert not torch.equal(epoch0, _ids(DistillData.from_task(task, 16, seed=4).train(0)))
    limited = DistillData.from_task(task, 16, seed=3, train_limit=40, validation_limit=20)
    assert len(_ids(limited.train(0))) == 40 and len(_ids(limited.validation())) == 20
    assert torch.equal(_ids(data.validation()), task.encode("validation")["input_ids"])


def test_distill_and_schedules_never_read_the_test_split(task):
    encoder = task.load_encoder()
    torch.manual_seed(0)
    teacher = EncoderClassifier(encoder, torch.nn.Linear(32, len(task.labels))).eval()
    data = DistillData.from_task(task, batch_size=16, train_limit=64, validation_limit=32)
    config = DistillConfig(max_steps=6, eval_every=3, learning_rate=1e-3)
    result = distill(copy.deepcopy(teacher), teacher, data, config, QUIET)
    assert result.steps == 6 and result.metric == "accuracy"
    outcome = prune_and_recover(copy.deepcopy(teacher), teacher, data, 4, "iterative", steps=2, recover_config=config,
                                criterion="taylor", progress=QUIET)
    assert outcome.plan.heads_removed == 4
