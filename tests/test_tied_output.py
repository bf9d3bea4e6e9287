"""litert-int4-all: the output layer at 4 bits placed by GPTQ, the tied embedding table reading its codes."""

from pathlib import Path

import numpy as np
import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.export import content_key, export, export_prepared, load_artifact
from edgeprune.export.litert_buffers import share_identical_buffers
from edgeprune.generation.runner import Generator
from edgeprune.models.classifier import CausalLMLogits
from edgeprune.quantize import RECIPES, quantize
from edgeprune.quantize.block_offsets import BlockOffsetLinear, block_codes, pack_int4, quantized_blocks
from edgeprune.quantize.gptq import gptq_blocks, input_moment
from edgeprune.quantize.size_model import payload_bytes
from edgeprune.quantize.tied_output import (
    TIED_BLOCK_BYTES,
    TIED_ROW_BYTES,
    TiedFourBitEmbedding,
    quantize_output_layer,
)

GROUP = 32
PREFILL = 8
CONTEXT = 32


def tied_decoder(tie: bool = True, vocab: int = 512, layer_std: float | None = None) -> CausalLMLogits:
    """A small Llama whose output layer is its embedding table (`tie`). With `layer_std`, the layers' linears are
    drawn that wide and put on their 4-bit grid (held exactly at 4 bits): at the default initialization a tied
    model's greedy token is its input token, whatever its layers do."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.test_litert_int4 import on_grid

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                         tie_word_embeddings=tie, attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).eval()
    if layer_std is not None:
        with torch.no_grad():
            for linear in (m for m in model.model.modules() if type(m) is torch.nn.Linear):
                linear.weight.normal_(std=layer_std)
        on_grid(model.model)
    return CausalLMLogits(model, CONTEXT).eval()


def calibration(count: int = 8, vocab: int = 512) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randint(3, vocab, (1, PREFILL), generator=generator), torch.arange(PREFILL)) for _ in range(count)]


def correlated_inputs(rows: int, cols: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(2)
    mixing = torch.randn(cols, cols, generator=generator) * torch.linspace(0.1, 3.0, cols)
    return torch.randn(rows, cols, generator=generator) @ mixing


def output_error(weight: torch.Tensor, quantized: torch.Tensor, inputs: torch.Tensor) -> float:
    return float(((inputs @ (weight - quantized).T) ** 2).sum())


def test_gptq_places_blocks_on_their_grid_with_less_output_error_than_rounding():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(48, 128, generator=generator)
    inputs = correlated_inputs(512, 128)
    symmetric, offsets = gptq_blocks(weight, inputs.double().T @ inputs.double() / len(inputs), GROUP)
    placed = symmetric + offsets.repeat_interleave(GROUP, dim=1)
    # on the grid: codes −8..7 at a bfloat16 step per block, exactly
    codes, steps = block_codes(symmetric.numpy(), GROUP, 1e-5)
    assert np.array_equal(steps, torch.from_numpy(steps).to(torch.bfloat16).float().numpy())
    assert np.allclose(codes.reshape(48, -1, GROUP) * steps[..., None], symmetric.numpy().reshape(48, -1, GROUP))
    # what GPTQ is for: the layer's outputs on the inputs it saw, far closer than rounding each weight
    assert output_error(weight, placed, inputs) < 0.8 * output_error(weight, quantized_blocks(weight, GROUP), inputs)


def test_gptq_with_uncorrelated_inputs_rounds_each_weight_to_its_blocks_nearest_code():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(16, 64, generator=generator)
    symmetric, offsets = gptq_blocks(weight, torch.eye(64, dtype=torch.float64), GROUP)
    placed = symmetric + offsets.repeat_interleave(GROUP, dim=1)
    steps = symmetric.reshape(16, 2, GROUP).abs().amax(-1).repeat_interleave(GROUP, dim=1) / 8
    assert torch.all((placed - weight).abs() <= steps / 2 * (1 + 2 ** -7) + 1e-6)


def test_the_input_moment_is_that_of_the_rows_the_layer_saw():
    layer = torch.nn.Linear(4, 3)
    model = torch.nn.Sequential(torch.nn.Identity(), layer)
    batches = [(torch.randn(2, 5, 4),), (torch.randn(1, 3, 4),)]
    rows = torch.cat([batch[0].reshape(-1, 4) for batch in batches]).double()
    assert torch.allclose(input_moment(model, layer, batches), rows.T @ rows / 13)
    with pytest.raises(ValueError, match="never reached"):
        input_moment(model, layer, [])


def test_the_tied_lookup_returns_the_output_layers_rows_from_litert_int4_bytes():
    generator = torch.Generator().manual_seed(0)
    head = BlockOffsetLinear(torch.nn.Linear(64, 40), GROUP)
    codes, steps = block_codes(head.weight.detach().numpy(), GROUP, 1e-5)
    table = TiedFourBitEmbedding(torch.from_numpy(codes), torch.from_numpy(steps), head.block_offsets.weight, GROUP)
    # its packed codes are the bytes LiteRT stores the 4-bit weight in
    assert table.packed.numpy().tobytes() == pack_int4(codes)
    ids = torch.randint(0, 40, (2, 7), generator=generator)
    expected = head.dense_weight().detach()[ids]
    assert torch.allclose(table(ids), expected, rtol=0, atol=1e-4 * expected.abs().max())
    assert table.weight.shape == (40, 64)


@torch.no_grad()
def test_quantize_output_layer_replaces_the_head_and_the_table_tied_to_it():
    model = tied_decoder()
    before = model(*calibration(1)[0])[0]
    assert quantize_output_layer(model, calibration(), GROUP)
    hf = model.model
    assert isinstance(hf.lm_head, BlockOffsetLinear)
    assert isinstance(hf.get_input_embeddings(), TiedFourBitEmbedding)
    after = model(*calibration(1)[0])[0]
    assert torch.nn.functional.cosine_similarity(before.flatten(), after.flatten(), dim=0) > 0.99
    untied = tied_decoder(tie=False)
    assert quantize_output_layer(untied, calibration(), GROUP)
    assert isinstance(untied.model.get_input_embeddings(), torch.nn.Embedding)  # its own table: int8 at export
    assert not quantize_output_layer(torch.nn.Sequential(torch.nn.Linear(4, 4)), calibration(), GROUP)


def test_the_recipe_needs_calibration():
    recipe = RECIPES.get("litert-int4-all")
    assert recipe.needs_calibration and not recipe.calibrated
    with pytest.raises(UserInputError, match="calibrates on real task inputs"):
        quantize(tied_decoder(), recipe)


def test_the_size_model_counts_the_head_at_4_bits_and_the_tied_table_by_its_own_blocks():
    model = tied_decoder(vocab=1024)
    int4, int4_all = RECIPES.get("litert-int4"), RECIPES.get("litert-int4-all")
    blocks = 1024 * 64 // GROUP
    # litert-int4 keeps one int8 table (1024 × 64 + per-row parameters) for both; litert-int4-all a 4-bit head with
    # its block scale and offset (4 bytes) and the lookup's own step and offset per block
    head_int8 = 1024 * 64 + 1024 * 12
    head_int4 = 1024 * 64 // 2 + blocks * 4
    assert payload_bytes(model, int4) - payload_bytes(model, int4_all) == \
        head_int8 - head_int4 - blocks * TIED_BLOCK_BYTES - 1024 * TIED_ROW_BYTES


@torch.no_grad()
def test_a_tied_decoder_ships_its_head_at_4_bits_sharing_the_codes_with_its_table(tmp_path):
    from ai_edge_litert import schema_py_generated as schema

    model = tied_decoder(vocab=2048)
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    int4 = export(model, example, tmp_path / "int4.tflite", "litert-int4", verify_on=[example])
    artifact = export(model, example, tmp_path / "all.tflite", "litert-int4-all", calibration=calibration(),
                      verify_on=[example])
    assert artifact.verification.min_cosine >= 0.99
    data = artifact.path.read_bytes()
    tflite = schema.Model.GetRootAs(data, 0)
    graph = tflite.Subgraphs(0)
    users: dict[int, set[tuple[int, tuple[int, ...]]]] = {}
    for index in range(graph.TensorsLength()):
        tensor = graph.Tensors(index)
        shape = tuple(tensor.Shape(i) for i in range(tensor.ShapeLength()))
        users.setdefault(tensor.Buffer(), set()).add((tensor.Type(), shape))
    # one buffer read as the head's INT4 weight and as the lookup's int8 pairs
    assert {(schema.TensorType.INT4, (2048, 64)), (schema.TensorType.INT8, (2048, 32))} in users.values()
    assert not any((schema.TensorType.INT8, (2048, 64)) in kinds for kinds in users.values())  # no int8 table
    # the file's weights: a 4-bit head and the lookup's steps and offsets instead of the int8 table (a model this
    # small spends what that saves on the lookup's ops and tensors; SmolLM2's file is 8 MB smaller)
    blocks = 2048 * 64 // GROUP
    saved = 2048 * 64 - (2048 * 64 // 2 + blocks * (2 + 1) + blocks * TIED_BLOCK_BYTES + 2048 * TIED_ROW_BYTES)
    # (less the lookup's own small constants: shapes, divisors)
    assert saved - 1024 <= buffer_bytes(int4.path) - buffer_bytes(artifact.path) <= saved
    assert share_identical_buffers(data) == (data, 0)  # nothing repeats any more
    # it decodes: a step's logits (the token looked up in the head's codes) are the quantized PyTorch module's
    generator = decodes_like(RECIPES.get("litert-int4-all").apply(model, calibration()), artifact.path)
    assert len(list(generator.stream([5, 9, 14, 3, 77], 6, stop_at_eos=False))) == 6


def decodes_like(prepared: CausalLMLogits, path: Path) -> Generator:
    """Assert that a decode step of the generator at `path`, after a 4-token prefill, gives the logits of its
    quantized PyTorch source `prepared`; the generator, for more."""
    generator = Generator(path, run=load_artifact(path))
    ids = [5, 9, 14, 3, 77]
    generator.forward(ids[:4], 0)
    step = generator.forward(ids[4:], 4)[0]
    expected = prepared.model(torch.tensor([ids])).logits[0, -1]
    assert torch.nn.functional.cosine_similarity(step, expected, dim=0) > 0.99
    return generator


def buffer_bytes(path) -> int:
    """The bytes of a `.tflite`'s buffers: its weights and constants, each shared buffer once."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(path.read_bytes(), 0)
    return sum(model.Buffers(i).DataLength() for i in range(model.BuffersLength()))


def with_weights_past_the_flatbuffer(data: bytes) -> bytes:
    """`data` rewritten the way ai-edge-quantizer writes a large model: every buffer's bytes after the flatbuffer,
    at an offset (16-byte aligned), the flatbuffer holding only (offset, size)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    payloads = []
    for buffer in model.buffers:
        payloads.append(None if buffer.data is None else np.asarray(buffer.data, np.uint8).tobytes())
        if buffer.data is not None:
            buffer.data, buffer.offset, buffer.size = None, 2, len(payloads[-1])  # placeholders: same table size

    def pack() -> bytes:
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    position = -(-len(pack()) // 16) * 16
    tail = bytearray()
    for buffer, payload in zip(model.buffers, payloads, strict=True):
        if payload is not None:
            buffer.offset = position + len(tail)
            tail += payload + bytes(-len(payload) % 16)
    head = pack()
    assert len(head) <= position
    return head + bytes(position - len(head)) + bytes(tail)


def test_repeated_buffers_past_the_flatbuffer_are_taken_in_and_shared(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    model = tied_decoder(vocab=2048)
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    recipe = RECIPES.get("litert-int4-all")
    artifact = export_prepared(recipe.apply(model, calibration()), example, tmp_path / "shared.tflite", recipe)
    shared = artifact.path.read_bytes()
    # the same model with its weights past the flatbuffer and the codes twice: what the quantizer hands over
    spread = with_weights_past_the_flatbuffer(duplicate_first_shared_buffer(shared))
    taken_in, saved = share_identical_buffers(spread)
    assert saved == 2048 * 32  # the int8 pairs: one copy of the 4-bit codes again
    for data in (spread, taken_in):
        path = tmp_path / "model.tflite"
        path.write_bytes(data)
        Interpreter(str(path)).allocate_tensors()
    assert buffer_bytes_of(taken_in) == buffer_bytes_of(shared)


def duplicate_first_shared_buffer(data: bytes) -> bytes:
    """`data` with the tensors of its first buffer shared by an INT4 and an INT8 tensor given a copy of their own
    (the INT8 ones): the file before `share_identical_buffers`."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    kinds: dict[int, set[int]] = {}
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            kinds.setdefault(tensor.buffer, set()).add(tensor.type)
    index = next(i for i, types in kinds.items() if {schema.TensorType.INT4, schema.TensorType.INT8} <= types)
    copy = schema.BufferT()
    copy.data = np.array(model.buffers[index].data, dtype=np.uint8)
    model.buffers.append(copy)
    for graph in model.subgraphs:
        for tensor in graph.tensors:
            if tensor.buffer == index and tensor.type == schema.TensorType.INT8:
                tensor.buffer = len(model.buffers) - 1
    builder = flatbuffers.Builder(len(data))
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def buffer_bytes_of(data: bytes) -> int:
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    return sum(model.Buffers(i).DataLength() or model.Buffers(i).Size() for i in range(model.BuffersLength()))


def test_the_export_key_changes_with_the_calibration_inputs():
    model, example = tied_decoder(), (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    recipe = RECIPES.get("litert-int4-all")
    first, other = calibration(), calibration()
    other[0] = (other[0][0] + 1, other[0][1])
    assert content_key(model, recipe, example, first) == content_key(model, recipe, example, calibration())
    assert content_key(model, recipe, example, first) != content_key(model, recipe, example, other)
    assert content_key(model, recipe, example, first) != content_key(model, recipe, example)
