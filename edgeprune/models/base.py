"""The interface every architecture adapter implements."""

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class AttentionBlock:
    """One attention module as it is now (after any pruning)."""

    layer: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    original_heads: tuple[int, ...]  # for each current head, its index in the dense model


class ModelAdapter(ABC):
    """Knows one architecture family: where its heads are and how to cut them out for real."""

    family: str = ""

    @classmethod
    @abstractmethod
    def matches(cls, model: nn.Module) -> bool:
        """True when this adapter understands `model`."""

    @abstractmethod
    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        """The attention blocks in layer order."""

    @abstractmethod
    def gate_heads(self, model: nn.Module, gates: torch.Tensor) -> AbstractContextManager[None]:
        """Context in which each head's output is multiplied by `gates[layer, head]`."""

    @abstractmethod
    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        """Slice the given heads (current positions in `layer`) out of the real weights."""

    @abstractmethod
    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        """Parameters that one head of `layer` owns (weights and biases it takes with it)."""


@contextmanager
def frozen_parameters(model: nn.Module) -> Iterator[None]:
    """Turn off parameter gradients for a scoring pass, restoring the flags afterwards."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
