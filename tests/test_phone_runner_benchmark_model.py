"""LiteRT `benchmark_model` output, parsed from samples of each format variant (tests/fixtures/devices)."""

import pytest

from edgeprune.bench.native import NATIVE_RUNNERS, parse_benchmark_model
from tests._device_fixtures import command_output


def test_recent_format_with_info_prefix_and_percentiles():
    run = parse_benchmark_model(command_output("android-arm64", "benchmark_model_recent.txt"))
    assert run.timed_runs == 50  # the timed line, not the warm-up one
    assert (run.p50_ms, run.mean_ms, run.std_ms) == (105.760, 105.784, 0.260)
    assert (run.load_ms, run.first_run_ms) == (87.639, 106.436)
    assert run.tool_peak_memory_mb == 105.93 and run.latency_ms == [] and run.p90_ms is None and not run.notes


def test_old_format_without_prefix_or_percentiles():
    run = parse_benchmark_model(command_output("android-arm64", "benchmark_model_old.txt"))
    assert run.timed_runs == 50 and run.mean_ms == 117.912 and run.std_ms == 0.612
    assert run.p50_ms is None and "no percentiles" in run.notes[0]
    assert run.load_ms == 91.820 and run.first_run_ms == 121.433  # the warm-up line's first run
    assert run.tool_peak_memory_mb == 100.836


def test_numbers_in_scientific_notation():
    run = parse_benchmark_model(command_output("android-arm64", "benchmark_model_scientific.txt"))
    assert run.timed_runs == 20
    assert run.mean_ms == pytest.approx(1279.11) and run.p50_ms == pytest.approx(1278.03)
    assert run.first_run_ms == pytest.approx(1312.07) and run.tool_peak_memory_mb == 112.5


def test_output_without_timings_is_an_error():
    with pytest.raises(ValueError, match="no `count=... avg=...` line"):
        parse_benchmark_model("ERROR: Could not open '/data/local/tmp/x.tflite'.\n")


def test_command_line_asks_for_exactly_the_runs():
    argv = NATIVE_RUNNERS.get("litert").command("/data/local/tmp/benchmark_model", "/w/artifact.tflite", 4, 5, 50)
    assert argv == ["/data/local/tmp/benchmark_model", "--graph=/w/artifact.tflite", "--num_threads=4",
                    "--num_runs=50", "--warmup_runs=5", "--min_secs=0", "--warmup_min_secs=0",
                    "--report_peak_memory_footprint=true"]
