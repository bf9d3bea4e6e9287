"""The interface every runtime implements: lower a module to bytes, load an artifact to run it."""

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export.program_facts import ProgramFacts
from edgeprune.extras import require_extra
from edgeprune.quantize.recipes import Recipe

RunArtifact = Callable[..., list[torch.Tensor]]
HEAD_BYTES = 64  # enough of a file's start for every runtime's header


class DeviceRuntime(ABC):
    name: str = ""
    suffix: str = ""  # artifact file extension
    title: str = ""  # what one of its artifacts is called, with its article: "an ExecuTorch program"
    identifier: bytes = b""  # the flatbuffer file identifier, bytes 4 to 8 of every artifact
    extra: str = ""  # the pip extra that installs it (edgeprune.extras)

    def require(self) -> None:
        """Refuse, in one line naming the pip extra, when this runtime's packages are not installed here."""
        if self.extra:
            require_extra(self.extra, f"the {self.name} runtime")

    def is_own(self, head: bytes) -> bool:
        """Whether a file starting with `head` carries this runtime's file identifier."""
        return len(head) >= 8 and head[4:8] == self.identifier

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
