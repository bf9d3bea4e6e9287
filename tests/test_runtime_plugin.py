"""A third party's runtime is one module in a package of its own, found through the `edgeprune.runtimes` entry points
as ExecuTorch and LiteRT are (edgeprune/plugins.py): here PyTorch's own ExportedProgram, with its descriptor, its
recipe, its lowering and loading, and the runner the benchmark pushes to the device, all in the one file. Installed
on the path of a fresh interpreter, with no change to edgeprune, `export`, `bench` and `fit` use it."""

import json
import subprocess

import pytest

from tests.plugins import install_plugin, run_edgeprune, tiny_classifier_folder

pytestmark = pytest.mark.integration

PLUGIN = '''
"""PyTorch's ExportedProgram (torch.export) as a device runtime: the whole plugin.

The file is `.pt2e`: an 8-byte header (edgeprune checks bytes 4 to 8 of every artifact against its runtime's
identifier) and what torch.export.save writes. On the device only `runner` is used (it needs torch, not edgeprune),
so everything of edgeprune's is defined only where edgeprune imports."""
import io
from pathlib import Path

HEADER = b"\\x08\\x00\\x00\\x00PT2E"


def read_program(path):
    import torch

    return torch.export.load(io.BytesIO(Path(path).read_bytes()[len(HEADER):]))


def outputs(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def runner(artifact, inputs, threads):
    """On the device, beside edgeprune's runner.py: runtime ready, then one call of the program."""
    import torch

    torch.set_num_threads(threads)
    tensors = [torch.from_numpy(array) for array in inputs]
    yield
    module = read_program(artifact).module()
    yield lambda: module(*tensors)


try:
    from edgeprune.export.base import DeviceRuntime
    from edgeprune.export.program_facts import ProgramFacts, RuntimeInfo, TensorSpec
    from edgeprune.quantize.recipes import RECIPES, Recipe
    from edgeprune.runtimes import RUNTIMES, BoardPackages, RuntimeSpec
    # a plugin may import any of edgeprune while edgeprune loads it: the device modules read the runtime registry
    # only when used, so they import here while the registry is still being filled
    import edgeprune.bench, edgeprune.devices.probe, edgeprune.devices.setup  # noqa: E401, F401
except ModuleNotFoundError as missing:  # on a device without edgeprune; anything else is a real error
    if missing.name != "edgeprune":
        raise
else:
    PT2 = RuntimeSpec(
        name="pt2", suffix=".pt2e", title="a PyTorch ExportedProgram", identifier=b"PT2E", extra="",
        implementation="pt2_runtime:Pt2Runtime", fp32_recipe="pt2-fp32", fit_ladder=("pt2-fp32",),
        quantizes_in_pytorch=True, pt2e_quantizer="pt2_runtime:no_quantizer", folds_quantized_weights=False,
        row_parameter_bytes=4, group_scale_bytes=2, native_tool="pt2_benchmark", setup_builds_native_tool=False,
        board_packages=BoardPackages(("torch",), imports="import torch", disk_mb=800), native_board_packages=None,
        probe_distributions=("torch",), usage_imports=("import pt2_runtime",),
        usage_run=("first = pt2_runtime.outputs(pt2_runtime.read_program(spec['artifact']).module()("
                   "*[torch.from_numpy(a) for a in arrays]))",),
        device_runner="pt2_runtime",
    )
    RUNTIMES.register(PT2.name)(PT2)
    RECIPES.register("pt2-fp32")(Recipe("pt2-fp32", "pt2", "fp32", "fp32", 0.99999, "PyTorch's kernels, fp32"))

    def no_quantizer():
        raise NotImplementedError("pt2 has no static int8 recipe")

    class Pt2Runtime(DeviceRuntime):
        spec = PT2

        def lower(self, module, example_inputs, recipe):
            import torch

            buffer = io.BytesIO()
            torch.export.save(torch.export.export(module.eval(), tuple(example_inputs)), buffer)
            return HEADER + buffer.getvalue()

        def load(self, path, threads=None):
            module = read_program(path).module()
            return lambda *inputs: outputs(module(*inputs))

        def inspect(self, path):
            import torch

            program = read_program(path)
            placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in
                            program.graph_signature.user_inputs]
            results = outputs(program.module()(*[torch.zeros(n.meta["val"].shape, dtype=n.meta["val"].dtype)
                                                  for n in placeholders]))

            def spec(name, tensor):
                return TensorSpec(name, list(tensor.shape), str(tensor.dtype).removeprefix("torch."))

            return ProgramFacts(
                runtime=RuntimeInfo("pt2", "torch", torch.__version__), method="forward",
                inputs=[spec(n.name, n.meta["val"]) for n in placeholders],
                outputs=[spec(f"output_{i}", t) for i, t in enumerate(results)],
                operators=sorted({str(n.target) for n in program.graph.nodes if n.op == "call_function"}),
                delegates=[])
'''

TASK = ["--task", "minilm-bbc", "--max-length", "32"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The plugin installed as a distribution on a path of its own, and a tiny model."""
    root = tmp_path_factory.mktemp("runtime-plugin")
    env = install_plugin(root, "pt2_runtime", PLUGIN, "edgeprune.runtimes", "pt2")
    model = tiny_classifier_folder(root / "model")
    return {"root": root, "model": model, "env": env}


def edgeprune(installed: dict, *args: str) -> subprocess.CompletedProcess:
    return run_edgeprune(installed["root"], installed["env"], *args)


def test_export_bench_and_fit_with_a_runtime_edgeprune_does_not_ship(installed):
    root, model = installed["root"], installed["model"]
    artifact = root / "model.pt2e"
    done = edgeprune(installed, "export", "--model", str(model), *TASK, "--runtime", "pt2", "--out", str(artifact),
                     "--quiet")
    assert done.returncode == 0 and artifact.read_bytes()[4:8] == b"PT2E", done.stderr[-3000:]
    dense_bytes = artifact.stat().st_size

    done = edgeprune(installed, "bench", str(artifact), "--model", str(model), "--max-length", "32", "--runs", "5",
                     "--warmup", "1", "--threads", "1", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["runtime"] == "pt2" and result["measured"] and result["p50_ms"] > 0  # timed by the plugin's runner

    budget_mb = 0.97 * dense_bytes / 1e6  # the dense program does not fit: fit must cut something
    out = root / "fit"
    done = edgeprune(installed, "fit", "--model", str(model), *TASK, "--device", "host", "--runtime", "pt2",
                     "--max-mb", f"{budget_mb:.6f}", "--scoring-examples", "16", "--recover-steps", "0",
                     "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    fitted = json.loads(done.stdout)["fitted"]
    assert fitted["recipe"]["name"] == "pt2-fp32" and fitted["file_bytes"] <= budget_mb * 1e6 < dense_bytes
    assert fitted["verification"]["min_cosine"] >= 0.99999 and (out / fitted["path"]).suffix == ".pt2e"
    assert json.loads((out / "model.json").read_text())["runtime"]["name"] == "pt2"
