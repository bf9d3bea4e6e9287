"""Estimated benchmarks for a device that is not connected: run the artifact here, scale to the device.

The artifact runs in the device's runtime on this machine (a real run: latency samples, peak memory); its
latencies are then scaled by (this machine's measured fp32 matmul GFLOPS at the same thread count) /
(the device profile's peak GFLOPS for the threads it uses). Every figure is marked estimated
(`BenchmarkResult.measured = False`); energy comes from the profile's power model at the estimated latency.
The matmul rate is achieved, the profile's peak is nominal, so on a device whose runtime reaches a smaller
share of its peak than torch does here the real latency is higher: budgets met by estimates alone are
marked so in the report and should be confirmed on the device.
"""

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from edgeprune.bench.benchmark import (
    ESTIMATED,
    UNAVAILABLE,
    BenchmarkResult,
    benchmark_local,
    estimate_mj_per_inference,
)
from edgeprune.devices import DeviceProfile
from edgeprune.errors import UserInputError

MATMUL_SIZE = 512


def measure_matmul_gflops(threads: int, seconds: float = 0.5) -> float:
    """This machine's fp32 matmul rate (GFLOPS) at `threads` torch threads, best of a few timed batches."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(MATMUL_SIZE, MATMUL_SIZE)
        b = torch.randn(MATMUL_SIZE, MATMUL_SIZE)
        torch.mm(a, b)  # warm-up
        best = 0.0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            for _ in range(4):
                torch.mm(a, b)
            elapsed = time.perf_counter() - start
            best = max(best, 4 * 2 * MATMUL_SIZE ** 3 / elapsed / 1e9)
        return best
    finally:
        torch.set_num_threads(previous)


@dataclass(frozen=True)
class HostEstimator:
    """Estimates `profile`'s figures from runs on this machine."""

    profile: DeviceProfile
    host_threads: int
    host_gflops: float
    device_gflops: float

    @classmethod
    def for_profile(cls, profile: DeviceProfile) -> "HostEstimator":
        if not profile.peak_gflops:
            raise UserInputError(f"device {profile.name} is not reachable and its profile has no hardware.peak_gflops "
                                 f"to estimate from; connect the device, or add peak_gflops to {profile.source}")
        threads = max(1, min(profile.threads, os.cpu_count() or 1))
        device_threads = min(profile.threads, profile.cores) if profile.cores else profile.threads
        share = device_threads / profile.cores if profile.cores else 1.0
        return cls(profile, threads, measure_matmul_gflops(threads), profile.peak_gflops * share)

    @property
    def scale(self) -> float:
        """Device latency ÷ latency here."""
        return self.host_gflops / self.device_gflops

    def describe(self) -> str:
        return (f"estimated for {self.profile.name}: run here at {self.host_threads} threads, latency × "
                f"{self.scale:.2f} (this machine {self.host_gflops:.0f} GFLOPS fp32 matmul measured, "
                f"{self.profile.name} {self.device_gflops:.0f} GFLOPS from its profile)")

    def benchmark(self, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str, warmup: int,
                  runs: int, min_seconds: float = 0.0) -> BenchmarkResult:
        local = benchmark_local(artifact, inputs, self.host_threads, runtime, warmup, runs, device=self.profile.name,
                                min_seconds=min_seconds)
        return self.scaled(local)

    def scaled(self, local: BenchmarkResult) -> BenchmarkResult:
        def times(value: float | None) -> float | None:
            return None if value is None else value * self.scale

        result = replace(
            local, device=self.profile.name, threads=self.profile.threads, measured=False,
            latency_ms=[v * self.scale for v in local.latency_ms], p50_ms=times(local.p50_ms),
            p90_ms=times(local.p90_ms), p99_ms=times(local.p99_ms), mean_ms=local.mean_ms * self.scale,
            first_run_ms=times(local.first_run_ms), thermal_before_c={}, thermal_after_c={}, throttled=False,
            throttle_reasons=[], notes=[*local.notes, self.describe(), "peak memory: as measured here in the same "
                                        "runtime (estimated for the device)"],
        )
        power = self.profile.power
        if power is not None:
            result.energy_mj_per_inference = estimate_mj_per_inference(power, result.mean_ms)
            result.energy_source = ESTIMATED
            result.idle_power_w, result.active_power_w = power.idle_w, power.active_w
            result.energy_detail = (f"({power.active_w:g} W active - {power.idle_w:g} W idle) x "
                                    f"{result.mean_ms:.3f} ms estimated mean latency, from the profile's power model")
        else:
            result.energy_mj_per_inference, result.energy_source = None, UNAVAILABLE
            result.idle_power_w = result.active_power_w = None
            result.energy_detail = "device not connected and no [power] model in its profile"
        return result
