"""Benchmarking artifacts where they run."""

from edgeprune.bench.benchmark import BenchmarkResult, benchmark_local

__all__ = ["BenchmarkResult", "benchmark_local"]
