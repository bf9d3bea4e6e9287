"""BenchmarkResult: JSON round trip with the energy and thermal fields, energy source rules, the Markdown
report, the peak-RSS wrapper of native tools, and the runner's estimate on this machine."""

import dataclasses
import json
import shutil
import sys

import pytest
import torch

from edgeprune.bench import BenchmarkResult, benchmark_local
from edgeprune.bench.benchmark import apply_energy, estimate_mj_per_inference
from edgeprune.bench.native import peak_rss_wrapper, split_peak_rss
from edgeprune.bench.report import render_bench_markdown
from edgeprune.bench.sensors import SensorUnavailable, power_sensor
from edgeprune.devices import load_profile
from edgeprune.devices.profile import PowerModel
from edgeprune.devices.transports.local import LocalEndpoint, LocalTransport
from edgeprune.serialization import from_jsonable, to_jsonable
from tests._device_fixtures import FIXTURES


def result(**overrides) -> BenchmarkResult:
    fields = dict(device="pi5", runtime="executorch", threads=4, warmup_runs=5, timed_runs=3,
                  latency_ms=[10.0, 11.0, 12.0], p50_ms=11.0, p90_ms=11.8, p99_ms=11.98, mean_ms=11.0, cv=0.074,
                  first_run_ms=30.0, load_ms=80.0, rss_before_load_mb=300.0, peak_rss_mb=420.0, file_bytes=23_000_000)
    fields.update(overrides)
    return BenchmarkResult(**fields)


def test_every_field_round_trips_through_json():
    original = result(energy_mj_per_inference=41.5, energy_source="measured:rapl", energy_detail="rapl: ...",
                      idle_power_w=3.1, active_power_w=6.9, thermal_before_c={"thermal-zones:cpu-thermal": 51.0},
                      thermal_after_c={"thermal-zones:cpu-thermal": 86.0}, throttled=True,
                      throttle_reasons=["thermal-zones after: cpu-thermal at 86.0 °C ..."], notes=["n"])
    assert from_jsonable(BenchmarkResult, json.loads(json.dumps(to_jsonable(original)))) == original
    native = result(latency_ms=[], p50_ms=None, p90_ms=None, p99_ms=None, rss_before_load_mb=None,
                    runner="benchmark_model")
    assert from_jsonable(BenchmarkResult, json.loads(json.dumps(to_jsonable(native)))) == native
    # results saved before energy existed still load
    old = {k: v for k, v in to_jsonable(result()).items() if k in {f.name for f in dataclasses.fields(result())[:17]}}
    assert from_jsonable(BenchmarkResult, old).energy_source == "unavailable"


def test_a_measurement_wins_over_the_power_model():
    measured = result()
    apply_energy(measured, {"sensor": "rapl (package-0)", "joules": 2.0, "seconds": 0.5, "idle_w": 1.0,
                             "active_w": 4.0, "samples": 2, "runs": 3, "mj_per_run": 500.0}, PowerModel(2.0, 9.0))
    assert measured.energy_measured and measured.energy_source == "measured:rapl"
    assert measured.energy_mj_per_inference == 500.0 and "minus idle 1.000 W" in measured.energy_detail


def test_without_a_reading_the_power_model_estimates_and_says_so():
    estimated = result()
    apply_energy(estimated, {"unavailable": "rapl: no RAPL package domains"}, PowerModel(2.0, 9.0))
    assert estimated.energy_source == "estimated:power-model" and not estimated.energy_measured
    assert estimated.energy_mj_per_inference == pytest.approx((9.0 - 2.0) * 11.0)  # W x ms = mJ
    assert "not measured: rapl: no RAPL" in estimated.energy_detail
    nothing = result()
    apply_energy(nothing, {"unavailable": "x"}, None)
    assert nothing.energy_mj_per_inference is None and nothing.energy_source == "unavailable"
    assert "no [power] model" in nothing.energy_detail


def test_markdown_report_labels_energy_and_throttling():
    text = render_bench_markdown(result(energy_mj_per_inference=77.0, energy_source="estimated:power-model",
                                        throttled=True, throttle_reasons=["vcgencmd-throttled during the run: "
                                                                          "throttled"],
                                        thermal_before_c={"z:cpu": 50.0}), "m.pte", "pi@pi5.local:22")
    assert "# edgeprune bench: m.pte on pi5" in text and "| latency p50 | 11.00 ms |" in text
    assert "| energy per inference, above idle | 77.00 mJ (estimated:power-model) |" in text
    assert "| throttled | **yes** |" in text and "- vcgencmd-throttled during the run: throttled" in text
    assert "| z:cpu | 50.0 °C | — |" in text
    native = render_bench_markdown(result(p90_ms=None, peak_rss_mb=None), "m.tflite", "adb device X")
    assert "| latency p90 | not reported by the tool |" in native and "| peak RSS of the benchmark process | " \
        "not measured |" in native


def test_the_peak_rss_wrapper_sees_a_real_process_peak(tmp_path):
    # the wrapper polls every 50 ms, so the peak is held for longer than that
    allocate = ("import time; b = bytearray(200 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.3); "
                "print('done')")
    with LocalTransport(LocalEndpoint()) as transport:
        done = transport.run(peak_rss_wrapper([sys.executable, "-c", allocate]))
        failed = transport.run(peak_rss_wrapper(["/nonexistent/benchmark_model"]))
    peak_mb, output = split_peak_rss(done.stdout)
    assert done.exit_code == 0 and output.strip() == "done"
    assert 200 < peak_mb < 400
    assert failed.exit_code == 127 and split_peak_rss(failed.stdout)[0] is None


def test_estimate_is_power_above_idle_times_latency():
    assert estimate_mj_per_inference(PowerModel(2.0, 9.0), 20.0) == pytest.approx(140.0)


@pytest.fixture(scope="module")
def tiny_tflite(tmp_path_factory, session_exports):
    from edgeprune.export import export
    from edgeprune.models.classifier import EncoderClassifier
    from tests.conftest import tiny_bert

    model = EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()
    inputs = (torch.randint(1000, 30522, (1, 16)), torch.ones(1, 16, dtype=torch.long))
    return export(model, inputs, tmp_path_factory.mktemp("tiny") / "tiny.tflite", "litert-fp32",
                  session_exports).path, inputs


@pytest.mark.integration
def test_the_runner_measures_with_a_sensor_it_can_read(tiny_tflite, tmp_path, monkeypatch):
    """The runner on a board whose sysfs is a fixture tree: a Pi's thermal zone and an x86 RAPL counter."""
    artifact, inputs = tiny_tflite
    board = tmp_path / "board"
    shutil.copytree(FIXTURES / "pi5", board)
    shutil.copytree(FIXTURES / "x86_64/sys/class/powercap", board / "sys/class/powercap")
    monkeypatch.setenv("EDGEPRUNE_SENSOR_ROOT", str(board))  # the local runner inherits it
    bench = benchmark_local(artifact, inputs, 1, warmup=1, runs=5, profile=load_profile("pi4"))
    # the counters stand still in the fixture, so the energy above idle is exactly zero, and measured
    assert bench.energy_source == "measured:rapl" and bench.energy_mj_per_inference == 0.0
    assert bench.idle_power_w == 0.0 and "rapl (package-0 + package-1): 0.000 J over" in bench.energy_detail
    assert bench.thermal_before_c == bench.thermal_after_c == {"thermal-zones:cpu-thermal": 61.25}
    assert not bench.throttled


@pytest.mark.integration
def test_the_runner_falls_back_to_the_estimate_when_no_sensor_reads(tiny_tflite, tmp_path):
    artifact, inputs = tiny_tflite
    board = tmp_path / "board.toml"
    board.write_text(load_profile("pi4").source.read_text().replace('name = "pi4"', 'name = "board"'))
    profile = load_profile(str(board))  # no sensor: the runner tries RAPL, then the profile's power model
    bench = benchmark_local(artifact, inputs, 1, warmup=1, runs=5, profile=profile)
    assert bench.device == "board" and bench.runner == "python"
    try:
        power_sensor("rapl").read()
    except SensorUnavailable:
        assert bench.energy_source == "estimated:power-model"
        assert bench.energy_mj_per_inference == pytest.approx((6.4 - 2.7) * bench.mean_ms)
        assert "rapl" in bench.energy_detail
    else:
        assert bench.energy_source == "measured:rapl" and bench.idle_power_w is not None
    assert isinstance(bench.thermal_before_c, dict) and not bench.throttled or bench.throttle_reasons
