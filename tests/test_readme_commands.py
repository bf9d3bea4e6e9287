"""Every command in README.md's fenced code blocks, run as written on the bundled MiniLM.

The shell commands (```sh blocks) run in a subprocess through bash, the way a user pastes them, in groups
whose files flow from one command to the next (score → prune → distill, export → bench); the Python API
blocks run as written in a fresh interpreter. A command that is too slow for the suite (a whole fit on MiniLM
is minutes), or that would run this suite itself, is skipped only through COVERED_ELSEWHERE, which names the
test that covers it. A README command that is neither run here nor listed there fails
`test_every_readme_command_is_run_here_or_covered_elsewhere`, as does a listed command the README lost.
"""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgeprune.tasks import minilm_model_path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
UNREACHABLE = 5  # the README's exit code for a device that cannot be reached


@dataclass(frozen=True)
class Step:
    command: str  # exactly as the README writes it, without its comment
    exit_code: int = 0
    creates: tuple[str, ...] = ()  # files or folders it must leave behind


# the groups run here, each in a folder of its own; `needs` copies files other groups made into it first
GROUPS: dict[str, tuple[Step, ...]] = {
    "stage by stage": (
        Step("edgeprune score --examples 256 --out scores.json", creates=("scores.json",)),
        Step("edgeprune prune --scores scores.json --remove 24 --out pruned/",
             creates=("pruned/plan.json", "pruned/model.safetensors")),
        Step("edgeprune prune --plan pruned/plan.json --model other-copy/ --out pruned-again/",
             creates=("pruned-again/model.safetensors",)),
        Step("edgeprune prune --params 2000000 --out pruned-joint/",
             creates=("pruned-joint/plan.json", "pruned-joint/model.safetensors")),
    ),
    "recovery": (
        Step("edgeprune prune --scores scores.json --remove 36 --out pruned/",
             creates=("pruned/plan.json", "pruned/model.safetensors")),
    ),
    "runtimes": (
        Step("edgeprune export --runtime litert --recipe litert-int8 --out minilm.tflite",
             creates=("minilm.tflite", "minilm.tflite.json")),
        Step("edgeprune quantize --recipe int8-emb4 --out minilm-int8.pt2", creates=("minilm-int8.pt2",)),
        Step("edgeprune bench minilm.tflite --threads 2 --runs 40"),
    ),
    "devices": (  # no Pi or phone is connected here: the commands that reach for one end in one line, exit 5
        Step("edgeprune devices list"),
        Step("edgeprune devices check pi5", exit_code=UNREACHABLE),
        Step("edgeprune bench model.pte --device pi5 --ssh pi@raspberrypi.local --identity ~/.ssh/id_ed25519",
             exit_code=UNREACHABLE),
        Step("edgeprune bench model.tflite --device android-arm64 --adb R58M12345 --binary "
             "/data/local/tmp/benchmark_model", exit_code=UNREACHABLE),
        Step("make lint"),
    ),
}

INSTALLS = ("installs into the user's own environment from PyPI (make installs every extra at constraints.txt's "
            "versions): tests/test_extras.py shows edgeprune importing without each extra and naming it when needed")

# README commands not run here: command → why, and the test that covers what it does
COVERED_ELSEWHERE: dict[str, str] = {
    "make demo": "tests/test_minilm_fit.py runs its `edgeprune fit --device host --max-mb 30` on the bundled MiniLM "
                 "(int8 rung, heads and vocabulary only: the whole space takes minutes)",
    "make test": "runs this suite, this test included",
    'edgeprune generate runs/fit-20261202-120000/model.pte --prompt "The bank said" --max-new-tokens 32':
        "tests/test_generation.py runs `edgeprune generate ARTIFACT --prompt ... --max-new-tokens` on a shipped "
        "generator (the folder's name is a fit's)",
    "edgeprune generate runs/fit-20261202-120000/model.pte --bench --prompt-tokens 128 --depths 128,384":
        "tests/test_generation.py runs `edgeprune generate ARTIFACT --bench --depths ...` and checks every figure",
    'edgeprune generate runs/fit-20261202-120000/model.pte --device pi5-emulated --prompt "The bank said"':
        "the emulated board is started by `make test-board`: tests/test_emulated_board.py generates on it through "
        "this command and checks the tokens are the host's; tests/test_native_generation.py runs the same path here "
        "with `--device host --binary`",
    "edgeprune fit --device host --runtime executorch,litert --max-latency-ms 8":
        "a whole MiniLM fit over both runtimes (minutes; measured in docs/FINDINGS.md): "
        "tests/test_runtime_dimension.py fits a small BERT over both runtimes through the CLI, LiteRT winning",
    "pip install 'edgeprune[executorch]'": INSTALLS,
    "pip install 'edgeprune[litert]'": INSTALLS,
    "pip install 'edgeprune[demo]'": INSTALLS,
    "pip install 'edgeprune[datasets]'": INSTALLS,
    "pip install 'edgeprune[cluster]'": INSTALLS,
    "pip install 'edgeprune[all]'": INSTALLS,
    "edgeprune fit --device pi5 --device pi4 --device android-arm64 --max-mb 40":
        "three whole MiniLM fits on estimates (no board here; minutes): tests/test_fleet.py fits fleets through the "
        "CLI and the project file on a small BERT, a failing device and resume included",
    "ray start --head --port 6379": "a lab machine's Ray: tests/test_cluster.py starts a real two-node cluster "
                                    "on loopback (ray.cluster_utils)",
    "ray start --address HEAD:6379 --resources '{\"board:pixel-7\": 1}'":
        "a second lab machine (placeholder address): tests/test_cluster.py pins a board's actor to the node "
        "with its resource",
    "edgeprune fit --device pi5 --device android-arm64 --boards boards.toml --ray HEAD:6379 --max-mb 40":
        "the lab's boards (placeholders): tests/test_cluster.py fits through a pool of two sshd boards on a "
        "two-node cluster, one killed mid-fit",
    "edgeprune fit --model my-bert/ --task classification --data reviews.csv --device pi5 --max-mb 25":
        "a team's folder and data (placeholders): tests/test_cli_byo.py reads every data format and task kind "
        "through the CLI, tests/test_fit_integration.py fits end to end (the unreachable-device case too)",
    "edgeprune fit --model my-encoder/ --task embedding --data sentences.jsonl --text-column sentence":
        "placeholders: tests/test_cli_byo.py (JSONL, --text-column, the embedding task through the CLI), "
        "tests/test_byo_minilm.py (MiniLM as a sentence-transformers embedding model)",
    "edgeprune fit --model my-llama/ --task causal-lm --data corpus/ --max-length 256":
        "placeholders: tests/test_cli_byo.py (the causal-lm task through the CLI), tests/test_task_causal_lm.py",
    "edgeprune fit --model my-vit/ --task image-classification --data photos/":
        "placeholders: tests/test_grayscale_images.py fits a ViT on a folder of images per class end to end",
    "edgeprune fit --device host --max-mb 12 --recipe int4 --trim-vocab":
        "a whole MiniLM fit (minutes): tests/test_minilm_fit.py fits the bundled MiniLM, tests/test_fit_integration.py "
        "fits with --trim-vocab and an int4 rung on a small BERT",
    "edgeprune fit --device pi5 --ssh pi@raspberrypi.local --max-mb 25 --max-latency-ms 40":
        "a whole MiniLM fit on estimates (minutes; no Pi here): "
        "tests/test_fit_integration.py::test_an_unreachable_device_is_fitted_on_labelled_estimates",
    "edgeprune distill --model pruned/ --max-steps 60 --out recovered/":
        "60 distillation steps of MiniLM take over 3 minutes here (measured 190 s; the step before it runs here): "
        "tests/test_cli_recovery.py runs the verb on a pruned tiny BERT, tests/test_recovery_pruned.py recovers "
        "a pruned encoder as the verb does",
    ".venv/bin/python benchmarks/export_matrix.py":
        "a benchmark (every recipe, tens of minutes): tests/test_recipes.py and tests/test_recipe_int8_static.py "
        "export and verify every recipe",
    ".venv/bin/python benchmarks/criteria.py":
        "a benchmark (every criterion and an oracle, tens of minutes): the criterion tests "
        "(tests/test_fluctuation.py, test_taylor.py, test_criteria_registry.py, ...)",
    ".venv/bin/python benchmarks/recovery.py --ratios 0.5 --max-steps 60 --eval-every 20 --iterative-steps 2":
        "a benchmark (tens of minutes): tests/test_recovery_schedules.py, test_recovery_distill.py",
    ".venv/bin/python benchmarks/fit_minilm.py --max-mb 30 --max-mb 22":
        "a benchmark (two whole MiniLM fits): tests/test_minilm_fit.py",
}

# Python blocks, by the first 12 hex digits of the sha256 of their text: run here, or covered elsewhere
STAGE_BY_STAGE_BLOCK = "6b3818ffd709"
PYTHON_COVERED_ELSEWHERE: dict[str, str] = {
    "b2a62428e218": "ep.fit on MiniLM and on a team's folder (placeholders), minutes each: tests/test_minilm_fit.py "
                    "and tests/test_fit_resume_and_budgets.py run fit_task, tests/test_config_round_trips.py "
                    "FitResult.load",
    "6b78219f3924": "ep.module_task on the user's own module and tensors (placeholders): tests/test_task_module.py",
}


def readme_blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block of README.md."""
    return FENCE.findall(README.read_text(encoding="utf-8"))


def without_comment(line: str) -> str:
    """The command of a shell line: up to a `#` that starts a word outside quotes."""
    quote = None
    for index, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return line[:index].strip()
    return line.strip()


def readme_shell_commands() -> list[str]:
    return [command for language, text in readme_blocks() if language in ("sh", "bash", "shell", "console")
            for command in map(without_comment, text.splitlines()) if command]


def block_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def python_blocks() -> dict[str, str]:
    return {block_key(text): text for language, text in readme_blocks() if language == "python"}


def test_every_readme_command_is_run_here_or_covered_elsewhere():
    commands = readme_shell_commands()
    run_here = [step.command for steps in GROUPS.values() for step in steps]
    assert len(run_here) == len(set(run_here)) and not set(run_here) & set(COVERED_ELSEWHERE)
    uncovered = [c for c in commands if c not in run_here and c not in COVERED_ELSEWHERE]
    assert not uncovered, f"README commands neither run by this test nor in COVERED_ELSEWHERE: {uncovered}"
    stale = [c for c in [*run_here, *COVERED_ELSEWHERE] if c not in commands]
    assert not stale, f"commands listed here that the README no longer has: {stale}"

    blocks = python_blocks()
    known = {STAGE_BY_STAGE_BLOCK, *PYTHON_COVERED_ELSEWHERE}
    new = {key: text.splitlines()[:3] for key, text in blocks.items() if key not in known}
    assert not new, f"README Python blocks (key: first lines) neither run here nor covered elsewhere: {new}"
    assert not known - set(blocks), f"Python blocks listed here that the README no longer has: {known - set(blocks)}"
    assert not any(c.strip().startswith(("import", "from")) for c in commands)  # no Python among the shell lines


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, minilm_cache):
    """One cache for the whole module (the dense teacher is built once) and a home with an identity file,
    so that `~/.ssh/id_ed25519` means what it would on a user's machine."""
    root = tmp_path_factory.mktemp("readme")
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("placeholder: no Pi is reachable from the test machine\n")
    (home / ".ssh" / "id_ed25519").chmod(0o600)
    adb_port = _free_port()
    environment = {**os.environ, "HOME": str(home), "EDGEPRUNE_CACHE": str(minilm_cache),
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                   "ANDROID_ADB_SERVER_PORT": str(adb_port)}  # an adb server of our own, stopped at the end
    yield root, environment
    if shutil.which("adb"):
        subprocess.run(["adb", "-P", str(adb_port), "kill-server"], capture_output=True, timeout=30, check=False)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_group(name: str, workspace, needs: dict[str, Path] | None = None) -> Path:
    """Run a group's commands in its own folder, in order, each in a fresh bash; return the folder."""
    root, environment = workspace
    folder = root / name.replace(" ", "-")
    folder.mkdir()
    for target, source in (needs or {}).items():
        (shutil.copytree if source.is_dir() else shutil.copy)(source, folder / target)
    for step in GROUPS[name]:
        command, cwd = step.command, folder
        if command.startswith("make "):  # in the repository; `-o`: never reinstall the venv from inside a test
            # this interpreter's venv by its absolute path, so that the Makefile's $(STAMP) is the file `-o` names
            # even when the checkout's .venv is a link to another one (a git worktree)
            venv = shlex.quote(sys.prefix)
            command, cwd = f"make VENV={venv} -o {venv}/.installed {command[5:]}", ROOT
        done = subprocess.run(["bash", "-c", command], cwd=cwd, env=environment, capture_output=True,
                              text=True, timeout=600, check=False)
        errors = done.stderr.strip().splitlines()
        assert done.returncode == step.exit_code, (step.command, done.returncode, done.stdout[-2000:],
                                                   done.stderr[-4000:])
        assert "Traceback" not in done.stderr, (step.command, done.stderr[-4000:])
        if step.exit_code:
            assert errors and errors[-1].startswith("edgeprune: error: "), (step.command, done.stderr[-2000:])
        for path in step.creates:
            assert (folder / path).exists(), (step.command, path, sorted(p.name for p in folder.iterdir()))
    return folder


@pytest.fixture(scope="module")
def stage_by_stage(workspace) -> Path:
    return run_group("stage by stage", workspace, {"other-copy": minilm_model_path()})


@pytest.fixture(scope="module")
def runtimes(workspace) -> Path:
    return run_group("runtimes", workspace)


@pytest.fixture(scope="module")
def python_stage_by_stage(workspace) -> Path:
    root, environment = workspace
    folder = root / "python"
    folder.mkdir()
    script = folder / "readme_stage_by_stage.py"
    script.write_text(python_blocks()[STAGE_BY_STAGE_BLOCK], encoding="utf-8")
    done = subprocess.run([sys.executable, script.name], cwd=folder, env=environment, capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return folder


@pytest.mark.integration
def test_the_step_by_step_commands(stage_by_stage):
    import json

    import edgeprune
    from edgeprune.models import adapter_for

    plan = json.loads((stage_by_stage / "pruned" / "plan.json").read_text())
    assert plan["heads_removed"] == 24 and plan["criterion"] == "fluctuation"  # fit's criterion by default
    again = edgeprune.load(stage_by_stage / "pruned-again")
    assert [list(b.original_heads) for b in adapter_for(again).attention_blocks(again)] == plan["kept_heads"]
    joint = edgeprune.load(stage_by_stage / "pruned-joint")  # MiniLM's 22.7 M parameters less at least 2 M
    dense = edgeprune.load(stage_by_stage / "other-copy")
    removed = sum(p.numel() for p in dense.parameters()) - sum(p.numel() for p in joint.parameters())
    assert 2_000_000 <= removed < 2_000_000 + 50_000  # at most one head's or 32 neurons' parameters more


@pytest.mark.integration
def test_the_recovery_commands(stage_by_stage, workspace):
    import json

    folder = run_group("recovery", workspace, {"scores.json": stage_by_stage / "scores.json"})
    assert json.loads((folder / "pruned" / "plan.json").read_text())["heads_removed"] == 36


@pytest.mark.integration
def test_the_runtime_commands(runtimes):
    assert (runtimes / "minilm.tflite").stat().st_size > 1_000_000


@pytest.mark.integration
def test_the_python_api_stage_by_stage(python_stage_by_stage):
    import edgeprune
    from edgeprune.models.classifier import EncoderClassifier

    assert (python_stage_by_stage / "pruned.pte").stat().st_size > 1_000_000
    assert isinstance(edgeprune.load(python_stage_by_stage / "pruned-model"), EncoderClassifier)


@pytest.mark.integration
def test_the_device_commands(runtimes, python_stage_by_stage, workspace):
    run_group("devices", workspace, {"model.pte": python_stage_by_stage / "pruned.pte",
                                     "model.tflite": runtimes / "minilm.tflite"})
