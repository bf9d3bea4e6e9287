"""The native-runner interface: build a command line for a device binary, parse what it prints."""

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from edgeprune.registry import Registry

RSS_MARKER = "__edgeprune_vmhwm_kb="
# Runs "$@" in the background and polls its VmHWM (peak resident set) until it exits, since a native
# tool does not report its own process peak; works with toybox sh on Android and dash/bash on Linux. A tool that
# could not be started (exit 126 or 127) reports no peak: what a poll saw then was the forked shell's own.
PEAK_RSS_SCRIPT = f"""
"$@" > native.log 2>&1 &
pid=$!
hwm=0
while kill -0 "$pid" 2>/dev/null; do
  grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && break
  value=$(sed -n 's/^VmHWM:[^0-9]*\\([0-9]*\\).*/\\1/p' "/proc/$pid/status" 2>/dev/null)
  [ -n "$value" ] && hwm=$value
  sleep 0.05
done
wait "$pid"
status=$?
case $status in 126|127) hwm=0 ;; esac
cat native.log
echo "{RSS_MARKER}$hwm"
exit $status
"""


def peak_rss_wrapper(argv: Sequence[str]) -> list[str]:
    """`argv` run under the VmHWM-polling shell; the output ends with a marker line (see `split_peak_rss`)."""
    return ["sh", "-c", PEAK_RSS_SCRIPT, "sh", *argv]


def split_peak_rss(output: str) -> tuple[float | None, str]:
    """(peak RSS in MiB or None if never seen, the tool's own output) from a `peak_rss_wrapper` run."""
    match = re.search(rf"^{re.escape(RSS_MARKER)}(\d+)\s*$", output, re.MULTILINE)
    if match is None:
        return None, output
    kilobytes = int(match.group(1))
    return (kilobytes / 1024 if kilobytes else None), output[:match.start()]


@dataclass
class NativeRun:
    """What a native tool reported, in milliseconds; None where its output format does not say."""

    tool: str
    timed_runs: int
    latency_ms: list[float]
    mean_ms: float
    p50_ms: float | None
    p90_ms: float | None = None
    p99_ms: float | None = None
    std_ms: float | None = None
    first_run_ms: float | None = None
    load_ms: float | None = None
    tool_peak_memory_mb: float | None = None  # the tool's own footprint figure, where it prints one
    # the process's peak resident set as the kernel counted it (getrusage), where the tool prints it: exact, where
    # polling /proc from outside (peak_rss_wrapper) can miss a run that ends between two polls
    process_peak_rss_mb: float | None = None
    notes: list[str] = field(default_factory=list)


class NativeRunner(ABC):
    runtime = ""  # the artifact runtime this tool runs
    tool = ""  # the binary's usual name

    @abstractmethod
    def command(self, binary: str, artifact: str, threads: int, warmup: int, runs: int,
                input_files: Sequence[str] = ()) -> list[str]:
        """The device command line; `input_files` are raw little-endian tensors in call order."""

    @abstractmethod
    def parse(self, output: str, warmup: int) -> NativeRun:
        """The figures in the tool's output; ValueError when the output has none."""


NATIVE_RUNNERS: Registry[NativeRunner] = Registry("native benchmark runner")
