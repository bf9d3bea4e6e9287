"""The command line starts without its heavy dependencies: `--version`, `--help`, `devices list` and `devices
show` import no torch, transformers, runtime or Ray (issue 32); verbs import them when they run.

Each command runs in a fresh interpreter under `python -X importtime -m edgeprune`, whose report lists every
module the run imported. benchmarks/cli_startup.py times the same commands against `python -c pass`.
"""

import subprocess
import sys
from importlib.metadata import version

import click
import pytest

HEAVY = ("torch", "transformers", "executorch", "torchao", "ray", "litert_torch", "ai_edge_litert", "tensorflow",
         "numpy", "safetensors", "tokenizers", "huggingface_hub", "datasets", "matplotlib", "jinja2")


def imported_by(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `python -X importtime -m edgeprune ARGS`; its result and the top-level names of what it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "edgeprune", *args], capture_output=True,
                          text=True, timeout=120)
    names = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in done.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    return done, names - {"package"}  # the report's own header row ("self [us] | cumulative | imported package")


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("devices", "list"), ("devices", "show", "host"),
                                  ("devices", "--help")])
def test_the_light_commands_import_no_heavy_dependency(args):
    done, names = imported_by(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "edgeprune" in names and "click" in names  # the report is read right
    assert not names & set(HEAVY), f"`edgeprune {' '.join(args)}` imported {sorted(names & set(HEAVY))}"


def test_a_verb_still_imports_what_it_needs_when_asked_for():
    done, names = imported_by("fit", "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--max-mb" in done.stdout
    assert "torch" in names  # its choices (runtimes, recipes, criteria) come from registries that need it


def test_version_and_help_say_what_they_did_before():
    done, _ = imported_by("--version")
    assert done.stdout.strip() == f"edgeprune, version {version('edgeprune')}"
    done, _ = imported_by("--help")
    for verb in ("bench", "devices", "distill", "export", "fit", "prune", "quantize", "score"):
        assert f"\n  {verb} " in done.stdout


def test_each_verbs_listed_summary_is_its_own_help_line():
    from edgeprune.cli import VERBS, cli

    for name, verb in VERBS.items():
        command = cli.get_command(None, name)
        assert command is not None and command.name == name
        for limit in (45, 80, 1000):  # what --help prints for it, at any terminal width
            assert click.utils.make_default_short_help(verb.summary, limit) == command.get_short_help_str(limit)


def test_the_package_loads_its_api_on_first_use():
    script = ("import sys, edgeprune\n"
              "assert 'torch' not in sys.modules, 'import edgeprune imported torch'\n"
              "assert edgeprune.UserInputError.exit_code == 2 and 'torch' not in sys.modules\n"
              "import edgeprune.export, edgeprune.quantize.recipes\n"
              "assert callable(edgeprune.export) and callable(edgeprune.quantize), (edgeprune.export,)\n"
              "from edgeprune import export, prune_heads\n"
              "assert export is edgeprune.export and 'prune_heads' in dir(edgeprune)\n"
              "assert set(edgeprune.__all__) <= set(dir(edgeprune))\n"
              "try:\n    edgeprune.no_such_name\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(3)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
