"""The benchmark runner loads ExecuTorch's runtime without its compiler: every benchmark is a fresh process, so
what it imports is paid per candidate (and counted in its process peak)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from edgeprune.bench.benchmark import RUNNER
from edgeprune.bench.runner import executorch_bindings, load_forward
from edgeprune.export import export


@pytest.fixture(scope="module")
def small_pte(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runner")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    example = (torch.randn(2, 16),)
    path = export(model, example, folder / "small.pte", "fp32").path
    return path, model, example


def test_the_runner_times_a_pte_without_importing_the_executorch_compiler(small_pte, tmp_path):
    path, _, example = small_pte
    np.savez(tmp_path / "inputs.npz", arg_0=example[0].numpy())
    # the runner as fit starts it, with a line at exit saying which of the heavy packages it had imported
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: sys.stderr.write('imported: ' + ','.join(sorted(name for name in "
             "('executorch.exir', 'torch._dynamo', 'torch._inductor') if name in sys.modules)) + '\\n'))\n"
             f"sys.argv = [{str(RUNNER)!r}, '--artifact', {str(path)!r}, '--runtime', 'executorch', "
             f"'--inputs', {str(tmp_path / 'inputs.npz')!r}, '--threads', '1', '--runs', '5', '--warmup', '1']\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert len(result["latency_ms"]) == 5 and result["p50_ms"] > 0
    assert result["peak_rss_mb"] >= result["rss_before_load_mb"] > 0
    assert done.stderr.strip().splitlines()[-1] == "imported:"  # none of them


def test_the_cheap_binding_runs_the_program_as_the_public_runtime_does(small_pte):
    from executorch.runtime import Runtime

    path, model, example = small_pte
    bindings = executorch_bindings()
    assert bindings.__name__ == "executorch.extension.pybindings._C"  # the cheap route exists in this version
    cheap = load_forward(bindings, str(path))(list(example))
    public = Runtime.get().load_program(str(path)).load_method("forward").execute(list(example))
    assert torch.equal(cheap[0], public[0])
    torch.testing.assert_close(cheap[0], model(*example), rtol=1e-5, atol=1e-5)
