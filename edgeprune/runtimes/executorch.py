"""ExecuTorch with the XNNPACK delegate: `.pte` programs (lowered and run by edgeprune/export/executorch.py)."""

from edgeprune.runtimes.base import RUNTIMES, BoardPackages, RuntimeSpec

EXECUTORCH = RuntimeSpec(
    name="executorch",
    suffix=".pte",
    title="an ExecuTorch program",
    identifier=b"ET12",
    extra="executorch",
    implementation="edgeprune.export.executorch:ExecutorchRuntime",
    fp32_recipe="fp32",
    fit_ladder=("int8-linear", "int8", "int8-emb4", "int4-decoder", "int4-decoder-all", "int4-linear", "int4"),
    quantizes_in_pytorch=True,  # torchao's configs and edgeprune's embedding tables, before lowering
    pt2e_quantizer="edgeprune.quantize.static_int8:xnnpack_quantizer",
    folds_quantized_weights=True,
    row_parameter_bytes=4,  # one fp32 scale per row
    # XNNPACK packs the per-group scales of 4-bit weights as 16-bit floats (measured on MiniLM: 12.30 MB dense,
    # 11.29 MB with half the heads; fp32 scales would predict 0.1 MB more difference)
    group_scale_bytes=2,
    native_tool="executor_runner",
    setup_builds_native_tool=True,  # from the wheel's libraries and headers (edgeprune/devices/native_tools.py)
    board_packages=BoardPackages(
        ("numpy", "flatbuffers", "tabulate", "ruamel.yaml", "packaging", "typing-extensions", "sympy", "networkx",
         "jinja2", "filelock", "fsspec"), ("torch", "executorch", "torchao"),
        imports="import torch; from executorch.runtime import Runtime; Runtime.get()", disk_mb=2500),
    # a board that times .pte files with the native runner needs only the wheel's libraries and headers, from
    # which setup compiles the runner there: no torch
    native_board_packages=BoardPackages((), ("executorch",), disk_mb=200),
    probe_distributions=("executorch",),
    usage_imports=("import torch", "from executorch.runtime import Runtime"),
    usage_run=(
        'method = Runtime.get().load_program(spec["artifact"]).load_method(spec["method"])',
        'outputs = method.execute([torch.from_numpy(arrays[i["name"]]) for i in spec["inputs"]])',
        "first = outputs[0].numpy()",
    ),
    usage_generator=(
        'method = Runtime.get().load_program(spec["artifact"]).load_method(spec["method"])',
        "",
        "",
        "def forward(ids, start):  # logits of `ids` at positions start..; the program keeps their keys and values",
        "    return method.execute([torch.tensor([ids]), torch.arange(start, start + len(ids))])[0].numpy()",
        "",
        "",
    ),
    usage_llm_kernels=(
        "from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - the fast attention's kernels",
    ),
)
RUNTIMES.register(EXECUTORCH.name)(EXECUTORCH)
