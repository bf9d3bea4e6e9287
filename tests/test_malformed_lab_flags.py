"""The malformed-input suite (tests/test_malformed_inputs.py) for the flags of Ray, a lab of boards, the time limit
and the cache verb: each bad value is one line, exit 2, before any work, and leaves no file behind."""

import pytest

from tests.test_malformed_inputs import check_case

# --- Ray, a lab of boards, the time limit and the cache -------------------------------------------------------

@pytest.mark.parametrize(("flags", "expected"), [
    (["--ray", "head:notaport"], "--ray head:notaport: expected HOST:PORT of the cluster's head"),
    (["--ray", "head:70000"], "expected HOST:PORT"), (["--ray", ":6379"], "expected HOST:PORT"),
    (["--ray", "ray://"], "expected HOST:PORT"),
    (["--ray", "auto", "--builds-ahead", "-1"], "--builds-ahead"), (["--builds-ahead", "x"], "--builds-ahead"),
    (["--shared-folder", "."], "--shared-folder is for builds ahead on Ray"),
    (["--time-limit", "nan"], "--time-limit"), (["--time-limit", "0"], "--time-limit"),
    (["--time-limit", "-3"], "--time-limit"), (["--time-limit", "1e400"], "--time-limit"),
    (["--boards", "missing.toml"], "missing.toml"),
])
def test_the_ray_lab_and_time_limit_flags_are_one_line_before_any_work(flags, expected, tmp_path, capfd):
    check_case(capfd, tmp_path, ["fit", *flags, "--out", str(tmp_path / "o")], 2, expected)


@pytest.mark.parametrize("flags", [["--verify", "--clear"], ["--bogus"], ["extra-argument"]])
def test_the_cache_verb_refuses_what_it_does_not_take(flags, tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(tmp_path / "cache"))
    check_case(capfd, tmp_path, ["cache", *flags], 2)
