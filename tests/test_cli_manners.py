"""The CLI's manners, through click's CliRunner as a user's shell would see them: --version, help that shows
defaults, choices, examples and exit codes, --json on list verbs, EDGEPRUNE_* variables, and the precedence
flag > environment > edgeprune.toml > default."""

import json
from importlib.metadata import version

import pytest
from click.testing import CliRunner

from edgeprune.cli import cli, parse_options
from edgeprune.errors import UserInputError
from edgeprune.quantize import RECIPES
from edgeprune.search.fit import default_out_dir


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_version_is_the_installed_package_version(runner):
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"edgeprune, version {version('edgeprune')}"


def test_help_lists_every_verb_the_exit_codes_and_the_environment(runner):
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for verb in ("fit", "score", "prune", "distill", "quantize", "export", "bench", "cache", "devices"):
        assert f"\n  {verb} " in result.output, verb
    assert "Exit codes: 0 done" in result.output and "EDGEPRUNE_DEVICE" in result.output


def test_fit_help_shows_defaults_choices_examples_and_exit_codes(runner):
    text = runner.invoke(cli, ["fit", "--help"], terminal_width=400).output
    assert "[default: 0,0.25,0.5]" in text and "[default: auto]" in text
    assert "[" + "|".join(RECIPES.names()) + "]" in text  # every recipe, as click lists a choice
    assert "--runtime executorch|litert[,...]" in text and "--criterion [" in text  # fit may search both
    assert "Examples:\n    edgeprune fit --device host --max-mb 30" in text
    assert "Exit codes: 0 every budget met;" in text and "3 the budgets cannot be met" in text


@pytest.mark.parametrize("verb", [["fit"], ["score"], ["prune"], ["distill"], ["quantize"], ["export"], ["bench"],
                                  ["cache"], ["devices", "list"], ["devices", "show"], ["devices", "check"],
                                  ["devices", "setup"]])
def test_every_verb_has_help_with_examples_json_and_the_global_flags(runner, verb):
    text = runner.invoke(cli, [*verb, "--help"]).output
    assert "Examples:" in text and "Exit codes:" in text, verb
    assert "--json" in text and "--quiet" in text and "--verbose" in text and "--debug" in text, verb


def test_a_usage_error_is_one_line_naming_the_help_with_exit_2(runner):
    result = runner.invoke(cli, ["fit", "--max-mb", "lots"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == ("edgeprune: error: Invalid value for '--max-mb': 'lots' is not a number of megabytes, "
                             "e.g. 30 (see edgeprune fit --help)\n")
    result = runner.invoke(cli, ["prune", "--out", "x"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "--scores" in result.stderr


def test_a_group_alone_prints_its_help_and_exits_2(runner):
    result = runner.invoke(cli, ["devices"])
    assert result.exit_code == 2 and "list" in result.stderr and "setup" in result.stderr


def test_devices_list_json_is_every_profile_this_machine_first(runner):
    result = runner.invoke(cli, ["devices", "list", "--json"])
    assert result.exit_code == 0
    profiles = json.loads(result.stdout)
    names = [profile["name"] for profile in profiles]
    assert names[0] == "host" and {"pi5", "pi4", "android-arm64", "jetson-orin-nano"} <= set(names)
    assert all("runtime" in profile and "threads" in profile for profile in profiles)


def test_device_comes_from_the_flag_over_the_environment_over_the_project_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edgeprune.toml").write_text('fleet = ["pi4", "pi5"]\n[fit.budgets.pi5]\nmax_mb = 20\n')
    assert parse_options(["fit"])["device"] == ("pi4", "pi5")
    monkeypatch.setenv("EDGEPRUNE_DEVICE", "jetson-orin-nano")
    assert parse_options(["fit"])["device"] == ("jetson-orin-nano",)
    assert parse_options(["bench", "model.pte"])["device"] == "jetson-orin-nano"
    assert parse_options(["fit", "--device", "host"])["device"] == ("host",)


def test_the_project_file_reaches_the_devices_sub_commands(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edgeprune.toml").write_text('[devices]\nssh = "pi@board.local"\noffline = true\n')
    assert parse_options(["devices", "setup", "pi5"])["offline"] is True
    assert parse_options(["devices", "check", "pi5"])["ssh"] == "pi@board.local"
    assert "offline" not in parse_options(["devices", "check", "pi5"])  # not an option of check, not refused
    (tmp_path / "edgeprune.toml").write_text('[devices]\nofline = true\n')  # no sub-command has it: refused
    with pytest.raises(UserInputError, match="devices.ofline is not an option of any `devices` sub-command"):
        parse_options(["devices", "setup", "pi5"])


def test_fit_output_folders_go_under_edgeprune_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEPRUNE_RUNS", str(tmp_path / "fits"))
    assert default_out_dir().parent == tmp_path / "fits" and default_out_dir().name.startswith("fit-")
    monkeypatch.delenv("EDGEPRUNE_RUNS")
    assert default_out_dir().parent.name == "runs"


def test_the_readme_project_file_is_read_as_it_says(tmp_path, monkeypatch):
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("Options can live in `edgeprune.toml`")[1].split("```toml\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edgeprune.toml").write_text(block)
    fit = parse_options(["fit"])
    assert fit["device"] == ("pi5",) and fit["max_mb"] == 25 and fit["min_quality"] == "-1%"
    assert fit["model"] == tmp_path / "models/reviews-bert" and fit["text_column"] == "review"
    assert parse_options(["score", "--out", "s.json"])["data"] == tmp_path / "data/reviews.csv"
    assert parse_options(["devices", "check", "pi5"])["ssh"] == "pi@raspberrypi.local"
