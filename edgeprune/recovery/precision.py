"""The arithmetic a distillation trains the student in: float32, or bfloat16 autocast where the hardware has it.

Under `torch.autocast(dtype=torch.bfloat16)` the student's linears and matmuls run in bfloat16 while its weights,
gradients and AdamW's state stay float32 (mixed precision, as BERT-style fine-tuning is commonly done on GPUs);
the losses are computed in float32 from the student's outputs. On a CPU with native bfloat16 instructions
(x86 `avx512_bf16` or AMX, Arm `bf16`) it is fast — MiniLM's forward and backward on a batch of 16 × 128
tokens took 0.25 s against 0.87 s in float32 on this project's 2-core EPYC (AVX-512 BF16) — and without them
it is emulated and slower, so `auto` asks the hardware. The teacher always runs in float32.
"""

from contextlib import AbstractContextManager, nullcontext
from functools import cache
from pathlib import Path

import torch

from edgeprune.errors import UserInputError

PRECISIONS = ("auto", "float32", "bfloat16")
# /proc/cpuinfo flags of native bfloat16 arithmetic: x86 AVX-512 BF16 and AMX; Arm's FEAT_BF16 ("bf16")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


@cache
def cpu_has_bfloat16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU computes in bfloat16 natively, from the kernel's CPU flags (Linux). Elsewhere: False,
    the safe answer (float32 is never slower than emulated bfloat16). A file read rather than a dependency such
    as py-cpuinfo: one flag is all that is needed."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return not BF16_FLAGS.isdisjoint(value.split())
    return False


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto` → bfloat16 where `device` computes in it natively, else float32; other names as they are."""
    if name not in PRECISIONS:
        raise UserInputError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if device.type == "cpu" and cpu_has_bfloat16() else "float32"


def training_autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The context a student's training forward runs in for a resolved `precision`."""
    if precision == "bfloat16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return nullcontext()
