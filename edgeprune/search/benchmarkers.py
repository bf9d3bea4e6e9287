"""Where a fit's candidates are benchmarked: one small interface, three implementations.

- `DeviceBenchmarker`: on the profile's own connection (this machine, a board over SSH, a phone over ADB);
- `PoolBenchmarker`: on a board of the profile in a lab pool on Ray (`edgeprune.cluster.BoardPool`);
- `EstimatingBenchmarker`: the device does not answer, so a run here is scaled to the profile (`HostEstimator`).

`benchmarker_for` picks the one a fit uses. Work that must not run beside a benchmark (builds started ahead on this
machine) registers a wait with `WorkElsewhere`, which the builder is given, not patched with.
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from edgeprune.bench.benchmark import BenchmarkResult, benchmark_on
from edgeprune.devices import DeviceProfile, load_profile
from edgeprune.devices.transports import open_transport
from edgeprune.devices.transports.base import Transport
from edgeprune.devices.transports.local import LocalEndpoint
from edgeprune.search.estimate import HostEstimator
from edgeprune.search.options import FitOptions
from edgeprune.tasks.base import Quality

if TYPE_CHECKING:  # Ray is an extra: the pool is imported only where one is made
    from edgeprune.cluster import BoardPool


class Benchmarker(Protocol):
    """Benchmarks an artifact file of a runtime on (or for) the fit's device."""

    profile: DeviceProfile  # the device benchmarked for (its threads are the benchmark's)
    where: str  # for progress lines: "on pi5", "estimated for pi5", ...
    estimated: bool  # figures scaled from this machine, not measured on the device

    def benchmark(self, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str) -> BenchmarkResult: ...


@dataclass
class DeviceBenchmarker:
    """On the profile's own connection."""

    link: Transport
    profile: DeviceProfile
    options: FitOptions
    estimated: bool = False

    @property
    def where(self) -> str:
        return f"on {self.profile.name}"

    def benchmark(self, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str) -> BenchmarkResult:
        warmup, runs, min_seconds = self.options.bench_settings
        return benchmark_on(self.link, artifact, inputs, runtime, self.profile.threads, warmup, runs,
                            device=self.profile.name, profile=self.profile, min_seconds=min_seconds)


@dataclass
class PoolBenchmarker:
    """On a board of the profile in a lab pool on Ray; another board when one stops answering."""

    boards: "BoardPool"
    profile: DeviceProfile
    options: FitOptions
    estimated: bool = False

    @property
    def where(self) -> str:
        return f"on {self.profile.name} (a board of the pool)"

    def benchmark(self, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str) -> BenchmarkResult:
        return self.boards.benchmark(self.profile.name, artifact, inputs, runtime, *self.options.bench_settings)


@dataclass
class EstimatingBenchmarker:
    """The device does not answer: a run on this machine, scaled to the profile (the figures say `measured`
    false)."""

    estimator: HostEstimator
    profile: DeviceProfile
    options: FitOptions
    estimated: bool = True

    @property
    def where(self) -> str:
        return f"estimated for {self.profile.name}"

    def benchmark(self, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str) -> BenchmarkResult:
        return self.estimator.benchmark(artifact, inputs, runtime, *self.options.bench_settings)


def benchmarker_for(profile: DeviceProfile, options: FitOptions, link: Transport,
                    estimator: HostEstimator | None = None, boards: "BoardPool | None" = None) -> Benchmarker:
    """The estimate when the device is not reachable, else the pool's boards when there is a pool, else `link`."""
    if estimator is not None:
        return EstimatingBenchmarker(estimator, profile, options)
    if boards is not None:
        return PoolBenchmarker(boards, profile, options)
    return DeviceBenchmarker(link, profile, options)


def this_machine(options: FitOptions, profile: DeviceProfile | None = None) -> DeviceBenchmarker:
    """Benchmarks on this machine, in this Python, for `profile` (default: the host profile)."""
    return DeviceBenchmarker(open_transport(LocalEndpoint(), sys.executable), profile or load_profile("host"), options)


@dataclass
class WorkElsewhere:
    """What work running outside the builder tells it: qualities already measured by builds that ran ahead on
    other machines (by the artifact's sha256 and split), and waits to run before each benchmark (no build beside
    a benchmark). Filled by `edgeprune.cluster.ahead`; read by the builder."""

    qualities: dict[tuple[str, str], Quality] = field(default_factory=dict)
    before_benchmark: list[Callable[[], None]] = field(default_factory=list)

    def measured(self, digest: str, split: str, quality: Quality) -> None:
        self.qualities[(digest, split)] = quality

    def take(self, digest: str, split: str) -> Quality | None:
        """The quality measured elsewhere for this file and split, once (None: none was)."""
        return self.qualities.pop((digest, split), None)

    def wait_before_benchmark(self) -> None:
        for wait in self.before_benchmark:
            wait()
