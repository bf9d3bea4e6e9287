"""LiteRT (formerly TensorFlow Lite): `.tflite` flatbuffers converted by litert-torch and run by ai-edge-litert's
interpreter (edgeprune/export/litert.py)."""

from edgeprune.runtimes.base import RUNTIMES, BoardPackages, RuntimeSpec

LITERT = RuntimeSpec(
    name="litert",
    suffix=".tflite",
    title="a LiteRT model",
    identifier=b"TFL3",
    extra="litert",
    implementation="edgeprune.export.litert:LiteRTRuntime",
    fp32_recipe="litert-fp32",
    # litert-int4 and litert-int4-all: decoders only (they set an output_layer)
    fit_ladder=("litert-fp16", "litert-int8", "litert-int4", "litert-int4-all"),
    # fp16 and dynamic-range int8 quantize the converted flatbuffer (ai-edge-quantizer), so their PyTorch source
    # stays fp32 (ai-edge-quantizer's calibrated static_wi8_ai8 was rejected on MiniLM: docs/FINDINGS.md)
    quantizes_in_pytorch=False,
    pt2e_quantizer="edgeprune.quantize.static_int8:litert_quantizer",
    # litert-torch's converter needs each weight's quantize op on the float weight; folded to an int8 constant
    # it fails with "'stablehlo.uniform_dequantize' op operand #0 must be ... quantized values" (MiniLM)
    folds_quantized_weights=False,
    row_parameter_bytes=12,  # a per-channel scale plus an int64 zero point per row
    # litert-int4: an fp16 scale and an int8 offset per block (quantize/block_offsets.py), and the offsets' per-row
    # scale and zero point: SmolLM2's file with int8 offsets came out as large as with fp16 ones (99.93 / 99.78 MB)
    group_scale_bytes=4,
    native_tool="benchmark_model",
    setup_builds_native_tool=False,  # TensorFlow's prebuilt benchmark_model, downloaded by the user
    board_packages=BoardPackages(("ai-edge-litert", "numpy"), imports="import ai_edge_litert.interpreter",
                                 disk_mb=300),
    native_board_packages=None,
    probe_distributions=("ai-edge-litert", "tflite-runtime"),
    usage_imports=("from ai_edge_litert.interpreter import Interpreter",),
    usage_run=(
        'runner = Interpreter(spec["artifact"]).get_signature_runner(spec["method"])',
        'outputs = runner(**{i["runtime_name"]: arrays[i["name"]] for i in spec["inputs"]})',
        'first = outputs[spec["outputs"][0]["runtime_name"]]',
    ),
    device_generator="edgeprune.bench.litert_generate",
    # SmolLM2 (its output layer tied to the embedding table): litert-fp32 540.5 MB where the ExecuTorch fp32 program
    # is 651.7 MB, the 113 MB table counted once (docs/FINDINGS.md)
    stores_tied_weights_once=True,
    # the generator's prefill takes exactly max_seq_len tokens (a shorter chunk is padded; one whose padding would pass
    # the cache's end is decoded token by token) and decode one; the KV cache goes into every call, and the call's own
    # rows come out
    usage_generator=(
        'interpreter = Interpreter(spec["artifact"])',
        "interpreter.allocate_tensors()",
        "# the cache lives in the decode signature's own inputs (the interpreter's first subgraph): a decode step",
        "# writes its token and position there, invokes, and writes its new keys and values into the cache in place",
        'decode = interpreter.get_signature_runner("decode")',
        'inputs = {name: detail["index"] for name, detail in decode.get_input_details().items()}',
        'outputs = {name: detail["index"] for name, detail in decode.get_output_details().items()}',
        "del decode  # the interpreter will not invoke while a signature runner (or a view of a tensor) is alive",
        'caches = [name for name in inputs if "_cache_" in name]',
        'new_rows = {name: outputs[name.replace("_cache_", "_new_")] for name in caches}',
        "tensor = interpreter.tensor  # tensor(index)() is a view: use it and drop it, never hold it across a call",
        "for name in caches:  # zeros, not what the memory held: a masked slot's value still meets a zero weight",
        "    tensor(inputs[name])()[...] = 0",
        "",
        "",
        "def decode_step(token, position):",
        '    tensor(inputs["input_ids"])()[...] = token',
        '    tensor(inputs["input_pos"])()[...] = position',
        "    interpreter.invoke()",
        "    for name in caches:  # the call returns its own keys and values: k_cache_L <- k_new_L",
        "        tensor(inputs[name])()[:, :, position:position + 1] = tensor(new_rows[name])()",
        '    return tensor(outputs["logits"])().copy()',
        "",
        "",
        "def forward(ids, start):  # logits of `ids` at positions start..",
        '    size = generator["max_seq_len"]',
        '    if len(ids) == 1 or start + size > generator["context"]:',
        "        return np.concatenate([decode_step(token, start + i) for i, token in enumerate(ids)], axis=1)",
        "    padded = np.zeros((1, size), np.int32)",
        "    padded[0, :len(ids)] = ids",
        "    positions = np.arange(start, start + size, dtype=np.int32)",
        "    cache = {name: tensor(inputs[name])() for name in caches}",
        '    result = interpreter.get_signature_runner("prefill")(input_ids=padded, input_pos=positions, **cache)',
        "    del cache  # the views: the interpreter refuses to invoke while one is alive",
        "    for name in caches:",
        '        tensor(inputs[name])()[:, :, start:start + size] = result[name.replace("_cache_", "_new_")]',
        '    return result["logits"][:, :len(ids)]',
        "",
        "",
    ),
)
RUNTIMES.register(LITERT.name)(LITERT)
