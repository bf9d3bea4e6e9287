"""Any `nn.Module` the adapters support, with the team's own data tensors, loss and metric (Python API only).

    task = module_task(my_model, {"calibration": {...}, "validation": {...}, "test": {...}},
                       input_names=("input_ids", "attention_mask"), loss_fn=my_loss, metric_fn=my_metric,
                       metric="f1")
    edgeprune.fit(task, device="pi5", budget=edgeprune.Budget(max_mb=25))

`data[split]` maps names to tensors whose first dimension indexes examples; the model is called with the
`input_names` tensors at batch 1 (the exported signature), `loss_fn(model, batch)` scores heads, and
`metric_fn(outputs, split_data)` turns the first output of every example, in order, into one number.
"""

import copy
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from edgeprune.data import DataSplits
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.tasks.base import SPLITS, Batch, Quality, Split, Task, Teacher, example_count

LossFn = Callable[[nn.Module, Batch], torch.Tensor]
MetricFn = Callable[[list[torch.Tensor], Batch], float]


@dataclass
class ModuleTask(Task):
    module: nn.Module | None = None
    data: dict[str, Batch] = field(default_factory=dict)
    inputs: tuple[str, ...] = ("input_ids", "attention_mask")
    loss_fn: LossFn | None = None
    metric_fn: MetricFn | None = None
    metric_name: str = "metric"
    metric_higher_is_better: bool = True

    kind = "module"
    labelled: ClassVar[bool] = False

    def __post_init__(self) -> None:  # no model folder: the module and the tensors are the task
        if self.module is None or self.loss_fn is None or self.metric_fn is None:
            raise UserInputError("module_task needs a module, a loss_fn(model, batch) and a metric_fn(outputs, data)")
        adapter_for(self.module)  # fail early with the supported families
        missing = [split for split in SPLITS if split not in self.data]
        if missing:
            raise UserInputError(f"module_task data needs the splits {', '.join(SPLITS)}; missing {missing}")
        for split in SPLITS:
            tensors = self.data[split]
            absent = [name for name in self.inputs if name not in tensors]
            if absent:
                raise UserInputError(f"the {split} data has no {absent}; it has {sorted(tensors)}")
            sizes = {name: int(t.shape[0]) for name, t in tensors.items()}
            if len(set(sizes.values())) != 1 or not next(iter(sizes.values())):
                raise UserInputError(f"the {split} tensors must share a non-zero first dimension, got {sizes}")
        self.metric = self.metric_name
        self.higher_is_better = self.metric_higher_is_better

    @cached_property
    def splits(self) -> DataSplits:
        return DataSplits([], [], [])  # the data comes as tensors; see `count`

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(self.inputs)

    def encode(self, split: Split) -> Batch:
        return self.data[split]

    def teacher(self) -> Teacher:
        started = time.perf_counter()
        model = copy.deepcopy(self.module).eval()
        return Teacher(model, self.quality(model, "validation"), self.quality(model, "test"),
                       time.perf_counter() - started, cached=False)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return self.loss_fn(model, batch)

    def quality_from_outputs(self, outputs: list[torch.Tensor], split: Split) -> Quality:
        value = float(self.metric_fn(outputs, self.data[split]))
        return Quality(self.metric_name, value, self.metric_higher_is_better, split, len(outputs))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "metric": self.metric_name, "module": type(self.module).__name__,
                "split_sizes": {split: example_count(self, split) for split in SPLITS}, "inputs": list(self.inputs)}

    def cache_key(self) -> str:
        digest = hashlib.sha256()
        for name, tensor in sorted(self.module.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        for split in SPLITS:
            for name, tensor in sorted(self.data[split].items()):
                digest.update(f"{split}|{name}".encode())
                digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        digest.update(f"{self.name}|{self.inputs}|{self.metric_name}|module-v1".encode())
        return digest.hexdigest()[:24]


def module_task(module: nn.Module, data: dict[str, Batch], *, loss_fn: LossFn, metric_fn: MetricFn,
                input_names: tuple[str, ...] = ("input_ids", "attention_mask"), metric: str = "metric",
                higher_is_better: bool = True, name: str = "module", **options: Any) -> ModuleTask:
    """A task from an `nn.Module` and tensors; see the module docstring."""
    return ModuleTask(name=name, model_path=Path("."), load_items=list, module=module, data=data,
                      inputs=tuple(input_names), loss_fn=loss_fn, metric_fn=metric_fn, metric_name=metric,
                      metric_higher_is_better=higher_is_better, **options)
