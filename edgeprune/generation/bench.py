"""Generation benchmarks of a shipped generator: load time, time to first token for a P-token prompt, prefill and
decode tokens per second at context depths, peak memory and the KV cache's bytes.

The measurement runs in its own process (`python -m edgeprune.generation.measure`), so that its peak resident set
is the program's and the runtime's, and what it adds over the process before the program loads is reported apart
(the interpreter and torch are not what an app pays). Same window rules as `bench`: a warm-up, then each figure
timed over at least `min_seconds`.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from edgeprune.bench.runner import TIMING_ENV
from edgeprune.errors import UserInputError, VerificationError

FORMAT_VERSION = 3  # 2: device and emulated; 3: openmp_threads


@dataclass
class DecodeSpeed:
    depth: int  # tokens already in the cache when the timed decode starts
    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


@dataclass
class GenerationBenchmark:
    artifact: str
    threads: int
    context: int
    prompt_tokens: int
    load_ms: float
    ttft_ms: float  # prefill of the prompt and the first token's logits, median
    prefill_runs: int
    decode: list[DecodeSpeed] = field(default_factory=list)
    peak_rss_mb: float = 0.0  # the measuring process's whole peak
    added_rss_mb: float = 0.0  # peak less the process before the program loaded: what an app pays
    kv_cache_bytes: int | None = None  # the cache buffers at the full context, as the program declares them
    device: str = "host"
    emulated: str | None = None  # e.g. "emulated (QEMU user mode on x86_64)": the timings say nothing of a real board
    openmp_threads: str | None = None  # OMP_NUM_THREADS of the measuring process (TIMING_ENV: "1"); None: unset
    version: int = FORMAT_VERSION

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prompt_tokens / (self.ttft_ms / 1e3) if self.ttft_ms else 0.0

    def rows(self) -> list[tuple[str, str]]:
        threads = f"{self.threads} (OpenMP {self.openmp_threads})" if self.openmp_threads else str(self.threads)
        rows = [("threads", threads), ("load", f"{self.load_ms:.0f} ms"),
                ("time to first token", f"{self.ttft_ms:.1f} ms ({self.prompt_tokens}-token prompt)"),
                ("prefill", f"{self.prefill_tokens_per_s:.0f} tokens/s")]
        rows += [(f"decode at depth {d.depth}", f"{d.tokens_per_s:.1f} tokens/s ({d.tokens} tokens in "
                                                 f"{d.seconds:.2f} s)") for d in self.decode]
        rows += [("peak memory", f"{self.peak_rss_mb:.0f} MB (+{self.added_rss_mb:.0f} MB for the program)")]
        if self.kv_cache_bytes is not None:
            rows.append(("KV cache", f"{self.kv_cache_bytes / 2**20:.2f} MiB at {self.context} tokens"))
        return rows

    def markdown(self) -> str:
        lines = [f"# Generation benchmark: {Path(self.artifact).name} on {self.device}", ""]
        if self.emulated:
            lines += [f"**{self.emulated}**: these timings are the emulator's and say nothing about a real board; "
                      "do not compare them with, or scale them into, a real device's figures.", ""]
        lines += ["| figure | value |", "|---|---|"]
        return "\n".join(lines + [f"| {name} | {value} |" for name, value in self.rows()]) + "\n"


@dataclass(frozen=True)
class TeacherAgreement:
    """How often the shipped generator's greedy continuation picks the dense teacher's token, position by
    position (free-running: after a first disagreement the two continue from different texts, as an app's would)."""

    agreement: float  # mean over the prompts of next_token_agreement
    prompts: int
    prompt_tokens: int
    new_tokens: int


def benchmark_generation(path: Path, *, threads: int | None = None, prompt_tokens: int = 128,
                         depths: tuple[int, ...] = (128, 1024), min_seconds: float = 1.0,
                         timeout_s: float = 600.0) -> GenerationBenchmark:
    """Benchmark the generator at `path` on this machine in a fresh process. A depth the context cannot hold
    (depth plus the decode window past it) is left out; the prompt is cut to the program's prefill length."""
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"artifact {path} does not exist")
    if prompt_tokens < 1 or min_seconds < 0 or any(d < 0 for d in depths):
        raise UserInputError("--prompt-tokens must be at least 1, depths and --min-seconds at least 0")
    command = [sys.executable, "-m", "edgeprune.generation.measure", str(path), "--threads",
               str(threads or os.cpu_count() or 1), "--prompt-tokens", str(prompt_tokens), "--min-seconds",
               str(min_seconds), "--depths", ",".join(str(d) for d in depths)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False,
                              env={**os.environ, **TIMING_ENV})
    except subprocess.TimeoutExpired:
        raise UserInputError(f"the generation benchmark of {path} ran past {timeout_s:.0f} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VerificationError(f"the generation benchmark of {path} failed: {last}")
    from edgeprune.serialization import from_jsonable

    return from_jsonable(GenerationBenchmark, json.loads(done.stdout.strip().splitlines()[-1]))
