"""Leave-one-out (ablation) importance: loss with head h gated to zero minus the loss of the full model.

Michel, Levy and Neubig, "Are Sixteen Heads Really Better than One?" (NeurIPS 2019), section 3: mask one head
at test time and measure the change; here on the loss, I(h) = L(model without h) − L(full model), mean over
examples (the form in "Multi Head Attention - Learning Module", section "Leave-One-Out (LOO) Importance").
Not an absolute value: a head whose removal lowers the loss scores below zero.

Computing it exactly normally costs one full forward per head. Two savings keep it exact:
- Prefix reuse. One plain forward records every layer's output; for ablations in layer l the layers before l
  are swapped (in their nn.ModuleList) for modules that replay those outputs, so only layers l.. run.
- Batched ablations. Several heads' ablations share one forward: the batch is repeated once per ablated head
  along the batch dimension and each copy gates a different head to zero. The model's output is cut back into
  copies and `loss_fn` is evaluated on each copy by a module that replays that copy's output. When the output
  cannot be cut per example (e.g. the model returns an already-reduced loss), ablations run one per forward.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from edgeprune.importance.base import Batch, HeadCriterion, HeadScores, LossFn
from edgeprune.importance.common import batch_size, eval_mode, require_examples, to_dense
from edgeprune.models import adapter_for


class _Replay(nn.Module):
    """Stands in for a module whose output is already known: ignores its inputs and returns that output."""

    def __init__(self, output: Any) -> None:
        super().__init__()
        self.output = output

    def forward(self, *_args: Any, **_kwargs: Any) -> Any:
        return self.output


class _NotPerExample(Exception):
    """A model output that has no per-example batch dimension to cut."""


def _repeat(value: Any, copies: int) -> Any:
    """`copies` copies of every tensor along the batch dimension, laid out as [copy 0 | copy 1 | ...]."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.repeat(copies, *([1] * (value.dim() - 1)))
    if isinstance(value, tuple | list):
        return type(value)(_repeat(v, copies) for v in value)
    return value


def _cut(value: Any, copy: int, size: int, copies: int) -> Any:
    """Copy `copy`'s examples of a model output computed on `copies` stacked copies of a `size`-example batch."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0 or value.shape[0] != size * copies:
            raise _NotPerExample
        return value[copy * size:(copy + 1) * size]
    if isinstance(value, Mapping):  # dicts and transformers ModelOutputs
        return type(value)(**{k: _cut(v, copy, size, copies) for k, v in value.items()})
    if isinstance(value, tuple | list):
        return type(value)(_cut(v, copy, size, copies) for v in value)
    return value


def _layer_slots(model: nn.Module, layers: Sequence[nn.Module]) -> list[tuple[nn.ModuleList, int]]:
    slots = {id(child): (container, index)
             for container in model.modules() if isinstance(container, nn.ModuleList)
             for index, child in enumerate(container)}
    if not all(id(layer) in slots for layer in layers):
        raise ValueError("leave-one-out reuses earlier layers' outputs and needs every layer inside an nn.ModuleList")
    return [slots[id(layer)] for layer in layers]


@contextmanager
def _replayed(slots: Sequence[tuple[nn.ModuleList, int]], outputs: Sequence[Any]) -> Iterator[None]:
    """Swap the layers in `slots` for replays of `outputs`, putting the real layers back afterwards."""
    originals = [container[index] for container, index in slots]
    try:
        for (container, index), output in zip(slots, outputs, strict=True):
            container[index] = _Replay(output)
        yield
    finally:
        for (container, index), layer in zip(slots, originals, strict=True):
            container[index] = layer


class LeaveOneOut(HeadCriterion):
    name = "leave-one-out"

    def __init__(self, ablations_per_forward: int | None = None) -> None:
        """`ablations_per_forward`: heads ablated together in one forward (memory grows with it);
        None ablates all heads of a layer at once."""
        if ablations_per_forward is not None and ablations_per_forward < 1:
            raise ValueError(f"ablations_per_forward must be at least 1, got {ablations_per_forward}")
        self.ablations_per_forward = ablations_per_forward

    def score(self, model: nn.Module, batches: Iterable[Batch], loss_fn: LossFn) -> HeadScores:
        adapter = adapter_for(model)
        blocks = adapter.attention_blocks(model)
        layers = adapter.layer_modules(model)
        slots = _layer_slots(model, layers)
        total = np.zeros((len(blocks), max(b.num_heads for b in blocks)))
        examples = 0
        # the ablation in force: in layer `layer`, copy c of the batch has head `heads[c]` gated to zero
        ablation: dict[str, Any] = {"layer": -1, "heads": []}
        recorded: list[Any] = [None] * len(layers)
        recording = [False]
        per_example_output = [True]

        def ablate(layer: int, context: torch.Tensor) -> torch.Tensor:
            if layer != ablation["layer"]:
                return context
            heads = ablation["heads"]
            keep = torch.ones(len(heads), context.shape[2], dtype=context.dtype, device=context.device)
            keep[torch.arange(len(heads)), torch.tensor(heads)] = 0
            keep = keep.repeat_interleave(context.shape[0] // len(heads), dim=0)
            return context * keep[:, None, :, None]

        def record(index: int) -> Any:
            def hook(_module: nn.Module, _args: Any, output: Any) -> None:
                if recording[0]:
                    recorded[index] = output
            return hook

        def ablated_losses(batch: Batch, layer: int, heads: list[int]) -> list[float]:
            size, copies = batch_size(batch), len(heads)
            if copies > 1 and not per_example_output[0]:
                return [loss for head in heads for loss in ablated_losses(batch, layer, [head])]
            ablation.update(layer=layer, heads=heads)
            try:
                with _replayed(slots[:layer], [_repeat(output, copies) for output in recorded[:layer]]):
                    if copies == 1:
                        return [float(loss_fn(model, batch))]
                    stacked = {k: _repeat(v, copies) for k, v in batch.items()}
                    output = _capture_output(model, lambda: loss_fn(model, stacked))
                    return [float(loss_fn(_Replay(_cut(output, c, size, copies)), batch)) for c in range(copies)]
            except _NotPerExample:
                per_example_output[0] = False
            finally:
                ablation.update(layer=-1, heads=[])
            return ablated_losses(batch, layer, heads)

        handles = [layer.register_forward_hook(record(i)) for i, layer in enumerate(layers)]
        try:
            with eval_mode(model), torch.no_grad(), adapter.head_output_hook(model, ablate):
                for batch in batches:
                    recording[0] = True
                    try:
                        base = float(loss_fn(model, batch))
                    finally:
                        recording[0] = False
                    size = batch_size(batch)
                    for block in blocks:
                        step = self.ablations_per_forward or block.num_heads
                        for start in range(0, block.num_heads, step):
                            heads = list(range(start, min(start + step, block.num_heads)))
                            losses = ablated_losses(batch, block.layer, heads)
                            total[block.layer, heads] += (np.array(losses) - base) * size
                    recorded[:] = [None] * len(layers)
                    examples += size
        finally:
            for handle in handles:
                handle.remove()
        require_examples(examples)
        return HeadScores(to_dense(blocks, total / examples), self.name, examples)


def _capture_output(model: nn.Module, run: Callable[[], object]) -> Any:
    """The output of `model`'s own forward during `run()`."""
    captured: list[Any] = []
    handle = model.register_forward_hook(lambda _module, _args, output: captured.append(output))
    try:
        run()
    finally:
        handle.remove()
    if len(captured) != 1:
        raise _NotPerExample
    return captured[0]
