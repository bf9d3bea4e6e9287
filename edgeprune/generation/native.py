"""A shipped generator run on a device by the native ExecuTorch runner (edgeprune/bench/native/executor_runner.cpp
with --generate): the prompt is prefilled and the continuation decoded greedily in C++, no Python or torch on the
device, as an app on a board runs it. Used to continue a prompt there and to benchmark generation there.

A runtime without such a tool names a standalone generator module in its descriptor (`RuntimeSpec.device_generator`,
LiteRT's edgeprune/bench/litert_generate.py): it is pushed and run by the device's Python with the same command
line, and prints the same log."""

import importlib.util
import re
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeprune.bench.native_run import place_binary, run_tool
from edgeprune.devices.transports.base import Transport
from edgeprune.errors import EdgepruneError, UserInputError
from edgeprune.export.manifest import GeneratorSpec
from edgeprune.generation.bench import DecodeSpeed, GenerationBenchmark

NUMBER = r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
LOADED = re.compile(rf"Model loaded in ({NUMBER}) ms")
GENERATION = re.compile(rf"Generation (\d+) of (\d+): prefill (\d+) tokens in ({NUMBER}) ms, decode (\d+) tokens in "
                        rf"({NUMBER}) ms")
TOKENS = re.compile(r"^Tokens:((?: \d+)*)[ \t]*$", re.MULTILINE)
PEAK_RSS = re.compile(r"^Peak resident set: (\d+) kB", re.MULTILINE)
DECODE_WINDOW = 64  # decode steps timed per execution at each depth (as the Python measurement's window)


@dataclass(frozen=True)
class GenerationRun:
    """One execution of the whole generation: the prompt's prefill and the decode steps after its first token."""

    prompt_tokens: int
    prefill_ms: float
    decode_steps: int
    decode_ms: float


@dataclass(frozen=True)
class NativeGeneration:
    tokens: list[int]  # the greedy continuation of the last execution
    runs: list[GenerationRun]
    load_ms: float | None
    peak_rss_mb: float | None  # the runner's own figure (its VmHWM), else the one polled from outside


@dataclass(frozen=True)
class DeviceGenerator:
    """What generates on the device: a native runner (`binary`: a path there, or a local build to push) or a
    runtime's standalone generator module run by the device's Python (`script`: the local file, pushed)."""

    title: str  # for messages: "the ExecuTorch runner"
    binary: str | None = None
    script: Path | None = None

    @property
    def source(self) -> str:
        return str(self.script) if self.script is not None else str(self.binary)

    def command(self, transport: Transport) -> list[str]:
        if self.script is not None:
            return [transport.python, transport.push(self.script, "edgeprune_generate.py")]
        return [place_binary(transport, str(self.binary))]


def script_generator(runtime: str) -> DeviceGenerator | None:
    """The generator module `runtime`'s descriptor names for devices (run there by Python); None when the runtime's
    native runner generates instead."""
    from edgeprune.runtimes import RUNTIMES

    spec = RUNTIMES.get(runtime)
    if not spec.device_generator:
        return None
    module = importlib.util.find_spec(spec.device_generator)
    if module is None or module.origin is None:
        raise UserInputError(f"the {runtime} runtime's device generator {spec.device_generator} is not installed")
    return DeviceGenerator(f"the {runtime} generator", script=Path(module.origin))


def generation_argv(binary: str, artifact: str, prompt_file: str, new_tokens: int, threads: int,
                    executions: int = 1, ignore_eos: bool = False) -> list[str]:
    argv = [binary, f"--model_path={artifact}", f"--prompt={prompt_file}", f"--generate={new_tokens}",
            f"--num_executions={executions}", f"--cpu_threads={threads}"]
    return argv + ["--ignore_eos"] if ignore_eos else argv


def parse_generation(output: str) -> NativeGeneration:
    """The runner's generation log; ValueError when it has no generation or no tokens line."""
    runs = [GenerationRun(int(p), float(pm), int(d), float(dm)) for _, _, p, pm, d, dm in GENERATION.findall(output)]
    tokens = TOKENS.search(output)
    if not runs or tokens is None:
        raise ValueError("no `Generation i of N: ...` and `Tokens: ...` lines in the runner's output")
    loaded, peak = LOADED.search(output), PEAK_RSS.search(output)
    return NativeGeneration([int(t) for t in tokens.group(1).split()], runs,
                            float(loaded.group(1)) if loaded else None, int(peak.group(1)) / 1024 if peak else None)


def generate_on(transport: Transport, artifact: Path, prompt: Sequence[int], new_tokens: int, threads: int,
                binary: "str | DeviceGenerator", *, executions: int = 1, ignore_eos: bool = False,
                timeout_s: float = 600.0) -> NativeGeneration:
    """Greedy tokens after `prompt` from the native runner at `binary` (a device path, or a local build to push), or
    a DeviceGenerator, on the transport's device, with its timings."""
    if not prompt:
        raise UserInputError("the prompt has no tokens")
    tool = binary if isinstance(binary, DeviceGenerator) else DeviceGenerator("the ExecuTorch runner", binary=binary)
    *launcher, remote_binary = tool.command(transport)
    remote_artifact = transport.push(Path(artifact), f"artifact{Path(artifact).suffix}")
    with tempfile.TemporaryDirectory(prefix="edgeprune-generate-") as scratch:
        prompt_file = Path(scratch) / "prompt.bin"
        np.asarray(list(prompt), dtype="<i8").tofile(prompt_file)
        remote_prompt = transport.push(prompt_file, "prompt.bin")  # a local transport may link, not copy
        argv = generation_argv(remote_binary, remote_artifact, remote_prompt, new_tokens, threads, executions,
                               ignore_eos)
        polled_mb, output = run_tool(transport, [*launcher, *argv], threads, timeout_s, tool.title, tool.source)
    try:
        parsed = parse_generation(output)
    except ValueError as error:
        raise EdgepruneError(f"{tool.title} on {transport.label} is too old to generate ({error}); run "
                             "`edgeprune devices setup` again to rebuild it") from None
    if parsed.peak_rss_mb is None and polled_mb is not None:
        parsed = NativeGeneration(parsed.tokens, parsed.runs, parsed.load_ms, polled_mb)
    return parsed


def benchmark_generation_on(transport: Transport, artifact: Path, binary: "str | DeviceGenerator",
                            facts: GeneratorSpec, *,
                            threads: int, prompt_tokens: int = 128,
                            depths: tuple[int, ...] = (128, 1024), runs: int = 3, device: str = "host",
                            emulated: str | None = None, timeout_s: float = 600.0) -> GenerationBenchmark:
    """Time to first token for a `prompt_tokens` prompt and decode tokens/s at each depth on the device, by the
    native runner (or a DeviceGenerator). Each length runs once untimed (the first call plans memory) and then
    `runs` times; decode at depth D is DECODE_WINDOW steps after a D-token prompt (depth 0 is reported as 1: a
    decode step needs one token in the cache; a depth the context cannot hold is left out). As on
    the host (`benchmark_generation`), the prompt is cut to the program's prefill length."""
    if runs < 1 or prompt_tokens < 1 or any(d < 0 for d in depths):
        raise UserInputError("--runs and --prompt-tokens must be at least 1, depths at least 0")
    context = facts.context
    ids = np.random.default_rng(0).integers(0, facts.vocab_size or 2, size=context).tolist()
    prompt_tokens = min(prompt_tokens, facts.max_seq_len, context - 1)
    first = generate_on(transport, artifact, ids[:prompt_tokens], 1, threads, binary, executions=1 + runs,
                        ignore_eos=True, timeout_s=timeout_s)
    timed = first.runs[1:]
    decode, peaks = [], [first.peak_rss_mb or 0.0]
    for depth in sorted({max(d, 1) for d in depths}):  # a decode needs one token in the cache at least
        steps = min(DECODE_WINDOW, context - depth - 1)
        if steps < 1:
            continue
        run = generate_on(transport, artifact, ids[:depth], steps + 1, threads, binary, executions=1 + runs,
                          ignore_eos=True, timeout_s=timeout_s)
        decode.append(DecodeSpeed(depth, sum(r.decode_steps for r in run.runs[1:]),
                                  round(sum(r.decode_ms for r in run.runs[1:]) / 1e3, 4)))
        peaks.append(run.peak_rss_mb or 0.0)
    peak = round(max(peaks), 1)
    # the runner's process is the app (no interpreter or torch in it), so all of its peak is the program's
    return GenerationBenchmark(str(artifact), threads, context, prompt_tokens, round(first.load_ms or 0.0, 2),
                               round(statistics.median(r.prefill_ms for r in timed), 3), len(timed), decode, peak,
                               peak, facts.kv_cache_bytes or None, device, emulated)
