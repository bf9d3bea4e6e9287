"""Estimated figures for a device that is not connected: a run here scaled by measured vs. profile compute."""

import dataclasses

import pytest

from edgeprune.bench.benchmark import BenchmarkResult
from edgeprune.devices import load_profile
from edgeprune.errors import UserInputError
from edgeprune.search.estimate import HostEstimator, measure_matmul_gflops


def local_result() -> BenchmarkResult:
    return BenchmarkResult("host", "executorch", 2, 5, 20, [10.0] * 19 + [14.0], 10.0, 12.0, 14.0, 10.2, 0.1, 20.0,
                           5.0, 300.0, 330.0, 1000, energy_mj_per_inference=3.0, energy_source="measured:rapl",
                           thermal_before_c={"zone": 50.0}, throttled=True)


def test_latencies_scale_by_compute_and_every_figure_is_marked_estimated():
    pi5 = load_profile("pi5")
    estimator = HostEstimator(pi5, host_threads=2, host_gflops=77.0, device_gflops=154.0)
    result = estimator.scaled(local_result())
    assert estimator.scale == 0.5
    assert result.measured is False and result.device == "pi5" and result.threads == pi5.threads
    assert (result.p50_ms, result.p90_ms, result.p99_ms, result.mean_ms) == (5.0, 6.0, 7.0, 5.1)
    assert result.latency_ms == [5.0] * 19 + [7.0] and result.first_run_ms == 10.0
    assert result.peak_rss_mb == 330.0  # the same runtime's memory, as measured here
    # energy: the pi5 power model (9 W − 2 W) × the estimated mean latency; nothing of this machine's sensors
    assert result.energy_source == "estimated:power-model" and result.energy_mj_per_inference == pytest.approx(35.7)
    assert not result.thermal_before_c and not result.throttled
    assert any(note.startswith("estimated for pi5: run here at 2 threads, latency × 0.50") for note in result.notes)


def test_a_profile_without_power_model_has_no_energy_and_one_without_compute_cannot_be_estimated():
    bare = dataclasses.replace(load_profile("pi5"), power=None)
    result = HostEstimator(bare, 2, 100.0, 100.0).scaled(local_result())
    assert result.energy_mj_per_inference is None and result.energy_source == "unavailable"
    with pytest.raises(UserInputError, match="peak_gflops"):
        HostEstimator.for_profile(dataclasses.replace(bare, peak_gflops=None))


def test_the_device_share_follows_the_threads_it_runs_and_the_host_rate_is_measured():
    pi5 = dataclasses.replace(load_profile("pi5"), threads=2)
    estimator = HostEstimator.for_profile(pi5)
    assert estimator.device_gflops == pytest.approx(154.0 / 2)  # 2 of its 4 cores
    assert estimator.host_threads == 2 and estimator.host_gflops > 1.0
    assert measure_matmul_gflops(1, seconds=0.1) > 0.5
