"""torchao's quantize ops answered from a cache under fake tensors while ExecuTorch lowers: the same metadata as
their bodies (concrete and symbolic sizes), real tensors and traced calls still run the bodies, the kernels are gone
after the last user, and the programs are byte-identical with and without the cache."""

import contextlib
import importlib
import threading

import pytest
import torch
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from edgeprune.export.quant_op_shapes import COMPOSITE, quant_op_shapes_cached, quant_ops
from edgeprune.models.classifier import CausalLMLogits, EncoderClassifier
from edgeprune.quantize import any_recipe, quantize
from tests.conftest import tiny_bert

BLOCK = [1, 1, 32]  # per-token int8 activations of a linear with 32 inputs, as `int8` quantizes them


def quantize_and_back(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    ops = torch.ops.torchao
    scale, zero = ops.choose_qparams_affine(x, "ASYMMETRIC", BLOCK, torch.int8, -128, 127, 1e-6, torch.float32,
                                            torch.int8)
    codes = ops.quantize_affine(x, BLOCK, scale, zero, torch.int8, -128, 127)
    return scale, zero, codes, ops.dequantize_affine(codes, BLOCK, scale, zero, torch.int8, -128, 127)


def metadata(tensors: tuple[torch.Tensor, ...]) -> list[tuple]:
    return [(tuple(t.shape), t.stride(), t.dtype, t.requires_grad) for t in tensors]


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_repeated_fake_call_gets_the_metadata_its_body_gives(dynamic):
    quant_ops()
    if dynamic:  # the prefill length a symbol, as in a KV-cached program
        mode = FakeTensorMode(shape_env=ShapeEnv())
        sizes = [DimDynamic.STATIC, DimDynamic.DYNAMIC, DimDynamic.STATIC]
        x = mode.from_tensor(torch.randn(1, 24, 32), symbolic_context=StatelessSymbolicContext(dynamic_sizes=sizes))
    else:
        mode = FakeTensorMode()
        x = mode.from_tensor(torch.randn(1, 24, 32))
    with enable_python_dispatcher(), mode:
        by_body = quantize_and_back(x)
        with quant_op_shapes_cached() as cache:
            first, again = quantize_and_back(x), quantize_and_back(x)
    assert isinstance(x.shape[1], torch.SymInt) == dynamic
    assert (cache.misses, cache.hits) == (3, 3)  # three calls a round: the first round misses, the second hits
    assert metadata(first) == metadata(again) == metadata(by_body)
    if dynamic:  # the prefill length stays the input's symbol
        assert again[2].shape[1].node.expr == x.shape[1].node.expr


def test_real_tensors_and_traced_calls_run_the_bodies():
    quant_ops()
    x = torch.randn(1, 24, 32)
    expected = quantize_and_back(x)
    traced = make_fx(quantize_and_back)(x).code
    with quant_op_shapes_cached() as cache:
        assert all(torch.equal(a, b) for a, b in zip(quantize_and_back(x), expected, strict=True))
        with enable_python_dispatcher():
            assert make_fx(quantize_and_back)(x).code == traced
    assert (cache.misses, cache.hits) == (0, 0)


def test_the_kernels_are_installed_by_the_first_user_and_removed_by_the_last():
    ops = quant_ops()
    before = [dict(op.py_kernels) for op in ops]
    entered, release = threading.Barrier(2, timeout=30), threading.Event()

    def user():
        with quant_op_shapes_cached():
            entered.wait()
            release.wait(timeout=30)

    other = threading.Thread(target=user)
    other.start()
    with quant_op_shapes_cached():
        entered.wait()
        with quant_op_shapes_cached():  # re-entrant
            assert all(COMPOSITE in op.py_kernels for op in ops)
        assert all(COMPOSITE in op.py_kernels for op in ops)
        release.set()
        other.join()
        assert all(COMPOSITE in op.py_kernels for op in ops)  # this block still uses them
    assert [dict(op.py_kernels) for op in ops] == before


def tiny_gqa_decoder() -> torch.nn.Module:
    """One layer, four query heads over two KV heads, widths the 4-bit groups of 32 divide."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                         attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    return CausalLMLogits(LlamaForCausalLM(config).eval(), 32).eval()


@pytest.mark.integration
@pytest.mark.parametrize("case", ["int8 encoder", "int4-decoder generator"])
def test_the_program_is_byte_identical_with_and_without_the_cache(case, monkeypatch):
    executorch = importlib.import_module("edgeprune.export.executorch")
    if case == "int8 encoder":
        recipe = any_recipe("int8")
        torch.manual_seed(0)
        model = EncoderClassifier(tiny_bert(num_hidden_layers=1), torch.nn.Linear(32, 5)).eval()
        example = (torch.randint(1000, 30522, (1, 16)), torch.ones(1, 16, dtype=torch.long))
    else:  # a KV-cached program: symbolic prefill lengths
        recipe, model = any_recipe("int4-decoder"), tiny_gqa_decoder()
        example = (torch.arange(8)[None] + 3, torch.arange(8))
    runtime = executorch.ExecutorchRuntime()
    cached = runtime.lower(quantize(model, recipe, calibration=None), example, recipe)
    monkeypatch.setattr(executorch, "quant_op_shapes_cached", contextlib.nullcontext)
    plain = runtime.lower(quantize(model, recipe, calibration=None), example, recipe)
    assert cached == plain
