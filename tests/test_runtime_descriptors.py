"""Each runtime is one descriptor (edgeprune/runtimes) that every part reads: file type, extra, recipe ladder, size
model, quantizer, native tool, board packages, probe and the app snippet. The registered ones agree with what the
rest of edgeprune does with them, and a third party's runtime, registered the way a plugin would before the rest of
edgeprune is imported, is accepted everywhere without a change to edgeprune."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from edgeprune.devices.probe import probe_script
from edgeprune.devices.profile import native_keys, runtime_schema, supported_runtimes
from edgeprune.devices.setup import runtime_packages
from edgeprune.export import check_artifact, runtime_of
from edgeprune.extras import EXTRAS
from edgeprune.quantize import FIT_LADDERS, FP32_RECIPE, RECIPES
from edgeprune.runtimes import RUNTIMES, load_named


@pytest.mark.parametrize("name", RUNTIMES.names())
def test_each_descriptor_is_what_the_rest_of_edgeprune_uses(name):
    spec = RUNTIMES.get(name)
    assert runtime_of(f"model{spec.suffix}") == name and name in supported_runtimes()
    assert spec.packages == EXTRAS[spec.extra] and spec.packages
    assert spec.program.spec is spec and spec.program.name == name  # its implementation, imported on first use
    fp32 = RECIPES.get(spec.fp32_recipe)
    assert FP32_RECIPE[name] == fp32.name and fp32.runtime == name and fp32.linear == fp32.embedding == "fp32"
    assert FIT_LADDERS[name] == spec.fit_ladder and all(RECIPES.get(r).runtime == name for r in spec.fit_ladder)
    assert native_keys()[name] == spec.native_tool and spec.native_tool in runtime_schema()
    assert runtime_packages()[name] is spec.board_packages
    assert callable(load_named(spec.pt2e_quantizer))
    assert f"versions[{name!r}] = version(*{spec.probe_distributions!r})" in probe_script()


def test_a_file_of_one_runtime_named_as_the_other_is_refused_naming_its_own(tmp_path):
    """check_artifact reads the identifier from each descriptor: a .pte holding a LiteRT file says so."""
    from edgeprune.errors import VerificationError

    fake = tmp_path / "model.pte"
    fake.write_bytes(b"\x1c\x00\x00\x00" + RUNTIMES.get("litert").identifier + bytes(56))
    with pytest.raises(VerificationError, match="it is a LiteRT model: pass --runtime litert or name it"):
        check_artifact(fake)


PLUGIN = '''
"""A third party's runtime: its descriptor and its DeviceRuntime in one module of its own package."""
from pathlib import Path

from edgeprune.runtimes import RUNTIMES, BoardPackages, RuntimeSpec

FAKE = RuntimeSpec(
    name="fakert", suffix=".fake", title="a Fake model", identifier=b"FAK1", extra="",
    implementation="fake_runtime_plugin:FakeRuntime", fp32_recipe="fake-fp32", fit_ladder=("fake-fp32",),
    quantizes_in_pytorch=True, pt2e_quantizer="fake_runtime_plugin:no_quantizer", folds_quantized_weights=True,
    row_parameter_bytes=8, group_scale_bytes=2, native_tool="fake_benchmark", setup_builds_native_tool=False,
    board_packages=BoardPackages(("fake-runtime",), imports="import fake_runtime", disk_mb=10),
    native_board_packages=None, probe_distributions=("fake-runtime",), usage_imports=("import fake_runtime",),
    usage_run=("first = fake_runtime.run(spec['artifact'], arrays)",),
)
RUNTIMES.register(FAKE.name)(FAKE)

from edgeprune.export.base import DeviceRuntime  # noqa: E402 - after the registration, as a plugin's import order
from edgeprune.errors import VerificationError  # noqa: E402


class FakeRuntime(DeviceRuntime):
    spec = FAKE

    def lower(self, module, example_inputs, recipe):
        return b"\\x08\\x00\\x00\\x00FAK1" + bytes(24)

    def load(self, path, threads=None):
        return lambda *inputs: list(inputs)

    def inspect(self, path):
        raise VerificationError("not read")
'''

CHECKS = '''
import json, sys
import fake_runtime_plugin  # noqa: F401 - registers first, as a plugin does
from edgeprune.devices.probe import probe_script
from edgeprune.devices.profile import load_profile
from edgeprune.devices.setup import runtime_packages
from edgeprune.export import check_artifact, runtime_of
from edgeprune.quantize import Recipe, SizeModel

profile = load_profile(sys.argv[1])
recipe = Recipe("fake-int8", "fakert", "int8", "fp32", 0.99, "a fake recipe")
print(json.dumps({
    "profile": [profile.runtime, profile.runner, profile.native_binaries],
    "runtime_of": runtime_of("x.fake"), "checked": check_artifact(sys.argv[2]),
    "probe": "versions['fakert'] = version(*('fake-runtime',))" in probe_script(),
    "board": runtime_packages()["fakert"].with_deps,
    "pytorch": recipe.quantized_in_pytorch,
}))
'''


def test_a_third_party_runtime_registered_first_is_accepted_everywhere(tmp_path):
    (tmp_path / "fake_runtime_plugin.py").write_text(PLUGIN)
    profile = tmp_path / "fake-board.toml"
    profile.write_text(textwrap.dedent("""
        name = "fake-board"
        description = "a board that runs the fake runtime"
        [hardware]
        arch = "x86_64"
        cores = 2
        ram_mb = 2048
        [runtime]
        name = "fakert"
        threads = 2
        runner = "native"
        fake_benchmark = "/opt/fake/benchmark"
        [budgets]
        max_mb = 10.0
        [connection]
        kind = "local"
    """))
    artifact = tmp_path / "model.fake"
    artifact.write_bytes(b"\x08\x00\x00\x00FAK1" + bytes(24))
    done = subprocess.run([sys.executable, "-c", CHECKS, str(profile), str(artifact)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])})
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout)
    assert facts == {"profile": ["fakert", "native", {"fakert": "/opt/fake/benchmark"}], "runtime_of": "fakert",
                     "checked": "fakert", "probe": True, "board": ["fake-runtime"], "pytorch": True}
