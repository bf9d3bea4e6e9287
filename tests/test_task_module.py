"""A team's own nn.Module with its own tensors, loss and metric: scored, evaluated and checked like any task."""

import pytest
import torch
from torch import nn

from edgeprune import module_task, score_heads
from edgeprune.errors import UserInputError
from edgeprune.pruning import prune_heads
from edgeprune.tasks.base import input_signature
from tests.conftest import tiny_bert


class Regressor(nn.Module):
    """A BERT encoder with a scalar regression head: not a classifier edgeprune knows."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = tiny_bert()
        self.head = nn.Linear(32, 1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[:, 0])


def split_data(count: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 2000, (count, 12), generator=generator)
    target = ids.float().mean(1, keepdim=True) / 2000
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "target": target}


def mse_loss(model, batch):
    return nn.functional.mse_loss(model(batch["input_ids"], batch["attention_mask"]), batch["target"])


def negative_mse(outputs, data):
    return -float(nn.functional.mse_loss(torch.cat(outputs), data["target"]))


@pytest.fixture
def task():
    data = {"calibration": split_data(16, 0), "validation": split_data(6, 1), "test": split_data(8, 2)}
    return module_task(Regressor().eval(), data, loss_fn=mse_loss, metric_fn=negative_mse, metric="neg_mse")


def test_the_users_metric_and_loss_drive_quality_and_scores(task):
    teacher = task.teacher()
    data = task.encode("test")
    with torch.no_grad():
        expected = negative_mse([teacher.model(data["input_ids"], data["attention_mask"])], data)
    assert teacher.test.metric == "neg_mse" and teacher.test.value == pytest.approx(expected, rel=1e-5)
    scores = score_heads(teacher.model, task.batches("calibration", 4), "taylor", loss_fn=task.loss)
    assert scores.scores.shape == (3, 4) and (scores.scores > 0).all()
    pruned = task.teacher().model
    prune_heads(pruned.encoder, {0: [0, 1], 2: [3]})
    assert task.quality(pruned, "test").value != teacher.test.value
    assert [spec.shape for spec in input_signature(task)] == [[1, 12], [1, 12]]
    assert task.describe()["split_sizes"] == {"calibration": 16, "validation": 6, "test": 8}


def test_the_cache_key_follows_weights_and_data(task):
    key = task.cache_key()
    with torch.no_grad():
        task.module.head.bias.add_(1.0)
    assert task.cache_key() != key


def test_bad_tensors_and_models_are_clear_errors():
    good = split_data(4, 0)
    with pytest.raises(UserInputError, match="missing"):
        module_task(Regressor(), {"calibration": good}, loss_fn=mse_loss, metric_fn=negative_mse)
    uneven = {**good, "target": good["target"][:3]}
    with pytest.raises(UserInputError, match="first dimension"):
        module_task(Regressor(), {"calibration": uneven, "validation": good, "test": good}, loss_fn=mse_loss,
                    metric_fn=negative_mse)
    with pytest.raises(UserInputError, match="supported families"):
        module_task(nn.Linear(3, 3), {"calibration": good, "validation": good, "test": good}, loss_fn=mse_loss,
                    metric_fn=negative_mse)
