"""A third party's transport is one module in a package of its own, found through the `edgeprune.transports`
entry points as edgeprune's own are (edgeprune/plugins.py). Installed on the path of a fresh interpreter, with no
change to edgeprune, its kind is accepted in a profile's [connection] table, its flag is a flag of `bench`, `fit`
and `devices check`, and `bench` and `fit` run the artifact through it."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.plugins import install_plugin, run_edgeprune, tiny_classifier_folder

pytestmark = pytest.mark.integration

# A device reached as a folder of this machine (a board's root file system mounted here, say): commands run as
# subprocesses in a work folder under `root`, and each is logged to root/commands.log, so the test sees what ran there.
PLUGIN = '''
"""A folder-device transport: the whole plugin."""
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from edgeprune.devices.transports.base import CommandResult, DeviceTimeoutError, Endpoint, Flag, Transport, register
from edgeprune.errors import UserInputError


@dataclass(frozen=True, kw_only=True)
class FolderEndpoint(Endpoint):
    kind: str = field(default="folder", init=False)
    root: str

    @property
    def record_key(self):
        return f"folder:{self.root}"

    def check(self, where):
        if not Path(self.root).is_dir():
            raise UserInputError(f"{where}: root {self.root!r} is not a folder")


@register("folder")
class FolderTransport(Transport):
    endpoint_type = FolderEndpoint
    flags = (Flag("--folder", "PATH", "reach the device as this folder of this machine", selects=True),)

    @classmethod
    def with_flags(cls, endpoint, given):
        endpoint = FolderEndpoint(root=given["folder"])
        endpoint.check("--folder")
        return endpoint

    def _make_workdir(self):
        return tempfile.mkdtemp(prefix="work-", dir=self.endpoint.root)

    def push(self, local, name=None):
        target = self.remote_path(name or Path(local).name)
        shutil.copy(local, target)
        return target

    def run(self, argv, timeout_s=600, env=None):
        with open(Path(self.endpoint.root) / "commands.log", "a") as log:
            log.write(" ".join(argv) + "\\n")
        try:
            done = subprocess.run(list(argv), cwd=self.workdir, env={**os.environ, **(env or {})},
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise DeviceTimeoutError(f"{argv[0]} ran past its {timeout_s:g} s timeout") from None
        except FileNotFoundError as error:  # what a shell there would say: not found, exit 127
            return CommandResult(127, "", str(error))
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def fetch(self, name, local):
        shutil.copy(self.remote_path(name), local)
        return local

    def _remove_workdir(self, path):
        shutil.rmtree(path, ignore_errors=True)
'''

@pytest.fixture(scope="module")
def installed(tmp_path_factory, session_exports):
    """The plugin installed as a distribution on a path of its own (its module and its dist-info entry points),
    a tiny model, and a profile of a board reached through the plugin."""
    root = tmp_path_factory.mktemp("transport-plugin")
    env = install_plugin(root, "folder_transport", PLUGIN, "edgeprune.transports", "folder", session_exports)
    board = root / "board"
    board.mkdir()
    profile = root / "folder-board.toml"
    profile.write_text(textwrap.dedent(f"""
        name = "folder-board"
        description = "a board whose root is a folder of this machine"
        [hardware]
        arch = "x86_64"
        cores = 2
        ram_mb = 4096
        [runtime]
        name = "executorch"
        threads = 1
        python = "{sys.executable}"
        [budgets]
        max_mb = 50.0
        [connection]
        kind = "folder"
        root = "{board}"
    """))
    model = tiny_classifier_folder(root / "model")
    return {"root": root, "board": board, "profile": profile, "model": model, "env": env}


def edgeprune(installed: dict, *args: str) -> subprocess.CompletedProcess:
    return run_edgeprune(installed["root"], installed["env"], *args)


def logged(folder: Path) -> list[str]:
    log = folder / "commands.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_plugins_kind_reads_from_a_profile_and_its_flag_is_refused_beside_another(installed):
    done = edgeprune(installed, "devices", "check", str(installed["profile"]), "--json")
    report = json.loads(done.stdout)
    assert report["device"] == "folder-board" and logged(installed["board"]), done.stderr[-2000:]
    done = edgeprune(installed, "devices", "check", "host", "--folder", str(installed["root"]), "--adb", "R5CX")
    assert done.returncode == 2 and done.stderr.strip().endswith("pass --adb or --folder, not both: a device has "
                                                                 "one connection"), done.stderr[-2000:]
    bad = installed["root"] / "bad.toml"
    bad.write_text(installed["profile"].read_text().replace('kind = "folder"', 'kind = "folder"\nhost = "x"'))
    done = edgeprune(installed, "devices", "show", str(bad))
    assert done.returncode == 2 and "connection.host does not apply to kind = 'folder' (it is for 'ssh'); " \
        "allowed: root" in done.stderr, done.stderr[-2000:]


def test_export_then_bench_through_the_plugin_by_profile_and_by_flag(installed):
    artifact = installed["root"] / "model.pte"
    done = edgeprune(installed, "export", "--model", str(installed["model"]), "--task", "minilm-bbc",
                     "--max-length", "32", "--out", str(artifact), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    done = edgeprune(installed, "bench", str(artifact), "--device", str(installed["profile"]), "--model",
                     str(installed["model"]), "--max-length", "32", "--runs", "5", "--warmup", "1", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["device"] == "folder-board" and result["measured"] and result["p50_ms"] > 0
    assert any(".pte" in line for line in logged(installed["board"]))  # the runner ran it in the board's folder
    elsewhere = installed["root"] / "other-board"
    elsewhere.mkdir()
    done = edgeprune(installed, "bench", str(artifact), "--device", str(installed["profile"]), "--folder",
                     str(elsewhere), "--model", str(installed["model"]), "--max-length", "32", "--runs", "5",
                     "--warmup", "1", "--json")
    assert done.returncode == 0 and any(".pte" in line for line in logged(elsewhere)), done.stderr[-2000:]
    assert not [p for p in installed["board"].iterdir() if p.name.startswith("work-")]  # work folders removed


def test_fit_benchmarks_every_candidate_through_the_plugin(installed):
    out = installed["root"] / "fit"
    before = len(logged(installed["board"]))
    done = edgeprune(installed, "fit", "--device", str(installed["profile"]), "--task", "minilm-bbc", "--model",
                     str(installed["model"]), "--max-length", "32", "--max-mb", "0.13", "--recipe", "int8",
                     "--ffn-fractions", "0", "--layer-removals", "0", "--no-trim-vocab", "--scoring-examples", "16",
                     "--recover-steps", "0", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    measured = [c for c in result["candidates"] if c["benchmark"] and c["benchmark"]["measured"]]
    assert measured and result["fitted"]["file_bytes"] <= 0.13e6
    runs = [line for line in logged(installed["board"])[before:] if ".pte" in line]
    assert len(runs) >= len(measured)  # every benchmarked candidate ran on the folder board


def test_a_plugin_that_fails_to_import_is_one_warning_and_the_rest_works(tmp_path):
    """A broken third-party package never takes edgeprune down: its entry point is named in one warning and skipped;
    the built-in transports still answer."""
    env = install_plugin(tmp_path, "broken_transport", "raise ImportError('needs a library this machine lacks')",
                         "edgeprune.transports", "broken")
    done = run_edgeprune(tmp_path, env, "devices", "check", "host", "--json")
    warnings = [line for line in done.stderr.splitlines() if "broken" in line]
    assert done.returncode == 0 and json.loads(done.stdout)["device"] == "host", done.stderr[-2000:]
    assert warnings == ["edgeprune: warning: plugin broken (broken_transport) was not loaded: ImportError: needs a "
                        "library this machine lacks"]
