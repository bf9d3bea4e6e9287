"""Benchmarking artifacts where they run."""

from edgeprune.bench.benchmark import BenchmarkResult, benchmark_local, benchmark_on

__all__ = ["BenchmarkResult", "benchmark_local", "benchmark_on"]
