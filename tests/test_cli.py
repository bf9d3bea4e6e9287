"""The CLI as a user runs it: bad input gets one clean line, exit code 2, and nothing written."""

import pytest

from edgeprune.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _usage_error(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "0", "abc", "nan", "inf"])
def test_bad_budget_is_one_line_and_exit_2(capsys, value, tmp_path):
    code, err = _usage_error(capsys, "fit", "--device", "host", f"--max-mb={value}", "--out", str(tmp_path / "o"))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "megabytes" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["-1", "0", "soon", "nan"])
def test_a_bad_time_limit_is_one_line_and_exit_2(capsys, value, tmp_path):
    code, err = _usage_error(capsys, "fit", "--max-mb", "30", f"--time-limit={value}", "--out", str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "minutes" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_unknown_device_lists_known_devices(capsys, tmp_path):
    code, out, err = _run(capsys, "fit", "--device", "toaster", "--max-mb", "30", "--out", str(tmp_path / "o"))
    assert code == 2 and "unknown device 'toaster'" in err and "host" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_missing_model_path(capsys, tmp_path):
    code, out, err = _run(capsys, "fit", "--model", str(tmp_path / "nowhere"), "--max-mb", "30",
                          "--out", str(tmp_path / "o"))
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_model_folder_without_config(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    code, out, err = _run(capsys, "fit", "--model", str(tmp_path / "empty"), "--max-mb", "30",
                          "--out", str(tmp_path / "o"))
    assert code == 2 and "no config.json" in err


def test_non_empty_output_folder_is_refused_and_left_alone(capsys, tmp_path, tiny_bert_dir):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = _run(capsys, "fit", "--model", str(tiny_bert_dir), "--max-mb", "30", "--max-length", "32",
                          "--out", str(out))
    assert code == 2 and "not empty" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_unknown_task_and_criterion(capsys, tmp_path):
    code, _, err = _run(capsys, "fit", "--task", "nope", "--max-mb", "30", "--out", str(tmp_path / "o"))
    assert code == 2 and "bundled tasks: minilm-bbc" in err
    code, _, err = _run(capsys, "fit", "--criterion", "vibes", "--max-mb", "30", "--out", str(tmp_path / "o"))
    assert code == 2 and "gate-gradient" in err


def test_devices_list_and_show(capsys):
    code, out, _ = _run(capsys, "devices", "list")
    assert code == 0 and out.startswith("host\texecutorch\tlocal")
    code, out, _ = _run(capsys, "devices", "show", "host")
    assert code == 0 and '"threads": 2' in out


def test_fit_as_typed_has_a_time_limit_and_none_lifts_it():
    """The command a user types stays bounded: 8 minutes unless --time-limit says otherwise (none: no limit)."""
    from edgeprune.cli.fit import DEFAULT_TIME_LIMIT_MINUTES, fit_command, parse_minutes_or_none

    option = next(p for p in fit_command.params if p.name == "time_limit")
    assert option.type.convert(option.default, option, None) == float(DEFAULT_TIME_LIMIT_MINUTES) == 8.0
    assert parse_minutes_or_none("none") is None and parse_minutes_or_none("NONE") is None
    assert parse_minutes_or_none("2.5") == 2.5
