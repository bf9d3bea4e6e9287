"""Native benchmark binaries for devices without Python (phones): one module per tool, with its parser."""

from edgeprune.bench.native.base import NATIVE_RUNNERS, NativeRun, NativeRunner, peak_rss_wrapper, split_peak_rss
from edgeprune.bench.native.benchmark_model import BenchmarkModel, parse_benchmark_model
from edgeprune.bench.native.executor_runner import ExecutorRunner, parse_executor_runner

__all__ = ["NATIVE_RUNNERS", "BenchmarkModel", "ExecutorRunner", "NativeRun", "NativeRunner",
           "parse_benchmark_model", "parse_executor_runner", "peak_rss_wrapper", "split_peak_rss"]
