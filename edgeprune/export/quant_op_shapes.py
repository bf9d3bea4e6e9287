"""Shape propagation of torchao's quantize ops, cached while ExecuTorch lowers a program.

torchao registers `choose_qparams_affine`, `quantize_affine` and `dequantize_affine` as CompositeImplicitAutograd
ops whose kernels are Python bodies. ExecuTorch keeps them in the graph (XNNPACK matches them as dynamically
quantized linears) and every pass that retraces the graph runs them under fake tensors to learn their outputs'
shapes: each call replays its body op by op, 8 to 17 fake dispatches, with symbolic sizes in a KV-cached program's
prefill length. That is a quarter of an int8 BERT's lowering and 30 % of a 4-bit generator's (docs/FINDINGS.md,
2026-12-08 second session).

Inside `quant_op_shapes_cached()`, a Python kernel registered for these ops (the way torch.export itself overrides
CompositeImplicitAutograd ops) answers a fake call whose inputs it has seen before with empty tensors of the shapes,
strides, dtypes and `requires_grad` the body gave, and runs the body otherwise: on real tensors, while a graph is
being traced (a proxy or functional mode is active), under any other dispatch mode, the first time a signature is
seen, and for outputs it does not cache (an offset into a storage). The outputs' metadata depend only on the inputs'
metadata and the scalar arguments, which form the key. Sizes with symbols are valid only in their own shape
environment, so those entries live with their fake mode. The programs are byte-identical with and without it
(tests/test_quant_op_shapes.py). No library offers this: torchao registers no fake kernel for these ops, and a
CompositeImplicitAutograd op cannot be given one through `torch.library`.
"""

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch._C import DispatchKey
from torch._C import _TorchDispatchModeKey as ModeKey
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

COMPOSITE = DispatchKey.CompositeImplicitAutograd
QUANT_OPS = ("choose_qparams_affine", "quantize_affine", "dequantize_affine")  # torch.ops.torchao.*

OutputSpec = tuple[tuple[Any, ...], tuple[Any, ...], torch.dtype, torch.device, bool]


class ShapeCache:
    """The outputs' metadata by call signature: concrete ones for any fake mode, symbolic ones per fake mode."""

    def __init__(self) -> None:
        self.concrete: dict[tuple, tuple[bool, list[OutputSpec]]] = {}
        self.symbolic: weakref.WeakKeyDictionary[FakeTensorMode, dict] = weakref.WeakKeyDictionary()
        self.hits = 0
        self.misses = 0

    def entries(self, mode: FakeTensorMode, symbolic: bool) -> dict:
        return self.symbolic.setdefault(mode, {}) if symbolic else self.concrete


_lock = threading.Lock()
_users = 0
_saved_kernels: dict[torch._ops.OpOverload, dict] = {}
_cache = ShapeCache()


def quant_ops() -> list[torch._ops.OpOverload]:
    import torchao.quantization.quant_primitives  # noqa: F401 - registers torch.ops.torchao.*

    return [getattr(torch.ops.torchao, name).default for name in QUANT_OPS]


@contextlib.contextmanager
def quant_op_shapes_cached() -> Iterator[ShapeCache]:
    """Within the block, torchao's quantize ops answer repeated fake calls from a cache (re-entrant, thread-safe:
    the kernels are installed by the first user and removed by the last)."""
    global _users, _cache
    with _lock:
        if _users == 0:
            _cache = ShapeCache()
            for op in quant_ops():
                _saved_kernels[op] = op.py_kernels.copy()
                if COMPOSITE not in op.py_kernels:  # one already there (torch.export's, mid-export) is left alone
                    op.py_impl(COMPOSITE)(cached_kernel(op))
        _users += 1
        cache = _cache
    try:
        yield cache
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                for op, kernels in _saved_kernels.items():
                    op.py_kernels.clear()
                    op.py_kernels.update(kernels)
                    op._dispatch_cache.clear()  # the resolved kernels per key; py_impl clears it the same way
                _saved_kernels.clear()


def cached_kernel(op: torch._ops.OpOverload):  # noqa: ANN201 - a dispatcher kernel
    def kernel(*args: Any, **kwargs: Any) -> Any:
        # torch.export may keep this kernel as the op's fake rule after the block (it registers the op's
        # CompositeImplicitAutograd kernel of the moment): outside the block it is the body
        mode = only_fake_mode([*args, *kwargs.values()]) if _users else None
        if mode is None:
            return op._op_dk(COMPOSITE, *args, **kwargs)  # torchao's body, as if no kernel were registered
        symbolic = any(isinstance(size, torch.SymInt) for value in [*args, *kwargs.values()]
                       if isinstance(value, torch.Tensor) for size in (*value.shape, *value.stride()))
        key = (op, torch.is_grad_enabled(), signature(args), signature(tuple(sorted(kwargs.items()))))
        entries = _cache.entries(mode, symbolic)
        known = entries.get(key)
        if known is None:
            _cache.misses += 1
            result = op._op_dk(COMPOSITE, *args, **kwargs)
            outputs = result if isinstance(result, tuple) else (result,)
            cacheable = all(isinstance(out, FakeTensor) and out.storage_offset() == 0 for out in outputs) and (
                symbolic or not any(isinstance(size, torch.SymInt) for out in outputs
                                    for size in (*out.shape, *out.stride())))
            if cacheable:
                entries[key] = (isinstance(result, tuple), [(tuple(out.shape), out.stride(), out.dtype, out.device,
                                                             out.requires_grad) for out in outputs])
            return result
        _cache.hits += 1
        as_tuple, specs = known
        with mode:
            outputs = tuple(torch.empty_strided(shape, stride, dtype=dtype, device=device, requires_grad=grad)
                            for shape, stride, dtype, device, grad in specs)
        return outputs if as_tuple else outputs[0]

    return kernel


def only_fake_mode(values: list[Any]) -> FakeTensorMode | None:
    """The fake mode of a call to answer from the cache: every tensor argument fake in one mode, no graph being
    traced and no dispatch mode but that fake mode active. None: run the body."""
    tensors = [value for value in values if isinstance(value, torch.Tensor)]
    if not tensors or not all(isinstance(tensor, FakeTensor) for tensor in tensors):
        return None
    modes = {tensor.fake_mode for tensor in tensors}
    if len(modes) != 1:
        return None
    mode = modes.pop()
    if any(torch._C._get_dispatch_mode(key) is not None for key in (ModeKey.PROXY, ModeKey.FUNCTIONAL)):
        return None
    if any(active is not mode for active in _get_current_dispatch_mode_stack()):
        return None
    return mode


def signature(value: Any) -> Any:
    """A hashable description of an argument's metadata: a tensor's sizes and strides (symbols as their
    expressions), dtype, device and `requires_grad`; sequences element by element; scalars as they are."""
    if isinstance(value, torch.Tensor):
        return ("tensor", signature(tuple(value.shape)), signature(value.stride()), value.dtype, value.device,
                value.requires_grad)
    if isinstance(value, (list, tuple)):
        return tuple(signature(item) for item in value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("symbol", value.node.expr)
    return value
