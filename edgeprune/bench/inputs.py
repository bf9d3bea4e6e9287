"""Inputs to time an artifact with, without its task: from the model.json beside it, else from the program itself.

Values are seeded random draws: within the value range model.json records for an input (token ids the data uses,
a 0/1 mask, pixel values), else ones for integer inputs (a valid row of any table with two or more rows, a full
attention mask) and standard-normal values for float inputs. Latency does not depend on the values; the program
only must not index out of its tables.
"""

from pathlib import Path

import numpy as np
import torch

from edgeprune.errors import UserInputError
from edgeprune.export.manifest import inspect_artifact, manifest_beside
from edgeprune.export.program_facts import TensorSpec

INPUT_SEED = 0


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a numpy dtype name (and bfloat16, which numpy lacks)."""
    if name == "bfloat16":
        return torch.bfloat16
    try:
        return torch.from_numpy(np.zeros(0, dtype=np.dtype(name))).dtype
    except TypeError:
        raise UserInputError(f"inputs of dtype {name} cannot be made here") from None


def synthetic_inputs(specs: list[TensorSpec], seed: int = INPUT_SEED) -> tuple[torch.Tensor, ...]:
    """One seeded tensor per spec, of its shape and dtype (see the module's docstring for the values)."""
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in specs:
        dtype, shape = torch_dtype(spec.dtype), tuple(spec.shape)
        if dtype == torch.bool:
            tensors.append(torch.ones(shape, dtype=dtype))
        elif not dtype.is_floating_point:
            if spec.value_range is None:
                tensors.append(torch.ones(shape, dtype=dtype))
            else:
                low, high = int(spec.value_range[0]), int(spec.value_range[1])
                tensors.append(torch.randint(low, high + 1, shape, generator=generator).to(dtype))
        elif spec.value_range is None:
            tensors.append(torch.randn(shape, generator=generator).to(dtype))
        else:
            low, high = spec.value_range
            tensors.append((torch.rand(shape, generator=generator) * (high - low) + low).to(dtype))
    return tuple(tensors)


def artifact_inputs(path: Path, runtime: str | None = None) -> tuple[tuple[torch.Tensor, ...], str]:
    """Inputs for `path` from the model.json beside it when that describes this file, else from the program's own
    input metadata; and a line that says which (for the benchmark's notes)."""
    manifest, why = manifest_beside(path)
    if manifest is not None:
        return synthetic_inputs(manifest.inputs), (f"inputs: {describe(manifest.inputs)}, seeded random values of "
                                                   f"the shapes, dtypes and value ranges in {why}")
    facts = inspect_artifact(path, runtime)
    return synthetic_inputs(facts.inputs), (f"inputs: {describe(facts.inputs)} from the program's own metadata "
                                            f"({why}); ones for integers, seeded normal values for floats")


def describe(specs: list[TensorSpec]) -> str:
    return ", ".join(f"{spec.name} {spec.dtype} {spec.shape}" for spec in specs)


def check_inputs_fit(inputs: tuple[torch.Tensor, ...], path: Path, runtime: str | None = None) -> None:
    """Refuse (exit 2) task inputs the program does not take: another count, shape or kind of dtype (integer inputs
    may differ in width: LiteRT takes int32 where the task gives int64, and its runner casts)."""
    specs = inspect_artifact(path, runtime).inputs
    given = ", ".join(f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}" for t in inputs)
    mismatch = len(specs) != len(inputs) or any(
        list(tensor.shape) != spec.shape or tensor.dtype.is_floating_point != torch_dtype(spec.dtype).is_floating_point
        for tensor, spec in zip(inputs, specs, strict=False))
    if mismatch:
        raise UserInputError(f"{path} takes {describe(specs)}; the task gives {given}: drop --task/--model/--data "
                             "to time it with inputs from the program (or its model.json)")
