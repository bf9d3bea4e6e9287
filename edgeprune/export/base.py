"""The interface every runtime implements: lower a module to bytes, load an artifact to run it."""

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export.program_facts import ProgramFacts
from edgeprune.quantize.recipes import Recipe
from edgeprune.runtimes import RuntimeSpec

RunArtifact = Callable[..., list[torch.Tensor]]
HEAD_BYTES = 64  # enough of a file's start for every runtime's header


class DeviceRuntime(ABC):
    """The heavy half of a runtime: what its descriptor (`edgeprune.runtimes.RuntimeSpec`) names as its
    implementation and imports on first use."""

    spec: RuntimeSpec  # everything else about the runtime: file type, extra, recipes, tools, board packages

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def title(self) -> str:
        return self.spec.title

    def require(self) -> None:
        """Refuse, in one line naming the pip extra, when this runtime's packages are not installed here."""
        self.spec.require()

    def check_file(self, path: Path, head: bytes, size: int) -> None:
        """Refuse (VerificationError, exit 4) a file of this runtime that is cut off or malformed, without running
        it; `head` is the file's first HEAD_BYTES bytes. The identifier is already checked."""
        if int.from_bytes(head[0:4], "little") >= size:
            raise VerificationError(f"{path} is not {self.title} in one piece: its root table lies beyond its "
                                    f"{size} bytes; export or copy it again")

    @abstractmethod
    def lower(self, module: nn.Module, example_inputs: tuple[torch.Tensor, ...], recipe: Recipe) -> bytes:
        """The artifact's bytes for `module` (already quantized by `recipe.apply` where that applies)."""

    @abstractmethod
    def load(self, path: Path, threads: int | None = None) -> RunArtifact:
        """A callable that runs the artifact on torch tensors and returns its outputs in order."""

    @abstractmethod
    def inspect(self, path: Path) -> ProgramFacts:
        """What the artifact says about itself (inputs, outputs, operators, delegates), read by this runtime; a file
        it cannot read is a VerificationError (exit 4)."""
