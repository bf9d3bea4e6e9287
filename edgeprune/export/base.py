"""The interface every runtime implements: lower a module to bytes, load an artifact to run it."""

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from edgeprune.quantize.recipes import Recipe

RunArtifact = Callable[..., list[torch.Tensor]]


class DeviceRuntime(ABC):
    name: str = ""
    suffix: str = ""  # artifact file extension

    @abstractmethod
    def lower(self, module: nn.Module, example_inputs: tuple[torch.Tensor, ...], recipe: Recipe) -> bytes:
        """The artifact's bytes for `module` (already quantized by `recipe.apply` where that applies)."""

    @abstractmethod
    def load(self, path: Path, threads: int | None = None) -> RunArtifact:
        """A callable that runs the artifact on torch tensors and returns its outputs in order."""
