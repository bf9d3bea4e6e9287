"""ExecuTorch `executor_runner` logs, parsed from samples of each format variant (tests/fixtures/devices)."""

import statistics

import pytest

from edgeprune.bench.native import NATIVE_RUNNERS, parse_executor_runner
from tests._device_fixtures import command_output


def test_per_iteration_logs_drop_the_first_and_warmup_runs():
    run = parse_executor_runner(command_output("android-arm64", "executor_runner_iterations.txt"), skip=2)
    timed = [43.321875, 42.770044, 43.281002, 43.500131]
    assert run.latency_ms == timed and run.timed_runs == 4
    assert run.first_run_ms == 57.901230 and run.load_ms == 90.604512
    assert run.mean_ms == pytest.approx(statistics.fmean(timed))
    assert run.p50_ms == pytest.approx((43.281002 + 43.321875) / 2)
    assert run.p90_ms <= run.p99_ms <= max(timed) and not run.notes


def test_edgeprunes_runner_reports_its_own_peak_resident_set():
    log = command_output("android-arm64", "executor_runner_iterations.txt") + "Peak resident set: 51712 kB\n"
    assert parse_executor_runner(log, skip=2).process_peak_rss_mb == 50.5
    assert parse_executor_runner(log.replace("Peak resident", "Peak"), skip=2).process_peak_rss_mb is None


def test_older_builds_log_only_the_total():
    run = parse_executor_runner(command_output("android-arm64", "executor_runner_total_only.txt"), skip=2)
    assert run.timed_runs == 6 and run.latency_ms == [] and run.p50_ms is None
    assert run.mean_ms == pytest.approx(261.846 / 6) and run.load_ms is None
    assert "no per-iteration times" in run.notes[0]


def test_output_without_the_total_is_an_error():
    with pytest.raises(ValueError, match="no `Model executed successfully"):
        parse_executor_runner("E 00:00:00.000100 executorch:executor_runner.cpp:120] Failed to parse model file\n")


def test_command_line_runs_first_warmup_and_timed_executions():
    runner = NATIVE_RUNNERS.get("executorch")
    argv = runner.command("/data/local/tmp/executor_runner", "/w/artifact.pte", 4, 5, 30, ["/w/in0.bin", "/w/in1.bin"])
    assert argv == ["/data/local/tmp/executor_runner", "--model_path=/w/artifact.pte", "--num_executions=36",
                    "--cpu_threads=4", "--inputs=/w/in0.bin,/w/in1.bin"]
    parsed = runner.parse(command_output("android-arm64", "executor_runner_iterations.txt"), warmup=1)
    assert parsed.timed_runs == 4  # six executions: the first and one warm-up dropped
