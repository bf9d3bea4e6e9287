"""Check an artifact against its PyTorch source on real inputs before accepting it."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.errors import VerificationError


@dataclass
class Verification:
    num_inputs: int
    min_cosine: float  # worst cosine between runtime and PyTorch outputs over inputs and outputs
    max_abs_error: float
    tolerance_cosine: float

    @property
    def passed(self) -> bool:
        return self.min_cosine >= self.tolerance_cosine


def compare_artifact(
    source: nn.Module,
    run_artifact: Callable[..., Sequence[torch.Tensor]],
    inputs: Sequence[tuple[torch.Tensor, ...]],
    tolerance_cosine: float,
) -> Verification:
    """Every output of the runtime against PyTorch on every input: the worst cosine and absolute error."""
    min_cosine, max_error = 1.0, 0.0
    with torch.no_grad():
        for args in inputs:
            expected = source(*args)
            expected = expected if isinstance(expected, tuple | list) else (expected,)
            actual = run_artifact(*args)
            for want, got in zip(expected, actual, strict=True):
                want, got = want.float().flatten(), got.float().flatten()
                min_cosine = min(min_cosine, F.cosine_similarity(want, got, dim=0).item())
                max_error = max(max_error, (want - got).abs().max().item())
    return Verification(len(inputs), min_cosine, max_error, tolerance_cosine)


def rejection(result: Verification, name: str) -> VerificationError:
    return VerificationError(
        f"{name} disagrees with its PyTorch source on {result.num_inputs} real inputs: cosine "
        f"{result.min_cosine:.6f} < {result.tolerance_cosine} required (max abs error {result.max_abs_error:.3g})")


def verify_artifact(
    source: nn.Module,
    run_artifact: Callable[..., Sequence[torch.Tensor]],
    inputs: Sequence[tuple[torch.Tensor, ...]],
    tolerance_cosine: float,
    name: str = "artifact",
) -> Verification:
    """Compare every output of the runtime with PyTorch; raise VerificationError outside tolerance."""
    result = compare_artifact(source, run_artifact, inputs, tolerance_cosine)
    if not result.passed:
        raise rejection(result, name)
    return result
