"""`python -m edgeprune.generation.measure ARTIFACT ...`: the measuring process of `benchmark_generation`; prints
one line of JSON (a GenerationBenchmark). Not a user command: `edgeprune generate --bench` runs it."""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator

DECODE_WINDOW = 64  # positions a timed decode cycles through past its depth (the cache is overwritten in place)


def timed(run, min_seconds: float, least: int) -> tuple[list[float], float]:  # noqa: ANN001 - a closure
    """Durations of `run()` until `least` runs and `min_seconds` in all have passed."""
    durations: list[float] = []
    while len(durations) < least or sum(durations) < min_seconds:
        start = time.perf_counter()
        run()
        durations.append(time.perf_counter() - start)
    return durations, sum(durations)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="edgeprune.generation.measure")
    parser.add_argument("artifact")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=int, required=True)
    parser.add_argument("--min-seconds", type=float, required=True)
    parser.add_argument("--depths", required=True)
    args = parser.parse_args(argv)

    import torch

    # VmHWM, this process image's own peak: ru_maxrss would carry the peak of the process that started it (fit's,
    # gigabytes) across fork and exec
    from edgeprune.bench.runner import peak_rss_mb
    from edgeprune.export import RUNTIMES, runtime_of

    for module in RUNTIMES.get(runtime_of(args.artifact) or "executorch").packages:
        __import__(module)  # the runtime's packages, imported before the clock and the memory baseline start

    from edgeprune.generation.bench import DecodeSpeed, GenerationBenchmark
    from edgeprune.generation.runner import Generator
    from edgeprune.serialization import to_jsonable

    torch.set_num_threads(1)  # torch only wraps inputs (and TIMING_ENV keeps its OpenMP to one thread)
    before = peak_rss_mb()
    started = time.perf_counter()
    generator = Generator(args.artifact, args.threads)
    load_ms = (time.perf_counter() - started) * 1e3
    facts = generator.facts
    prompt_tokens = min(args.prompt_tokens, facts.max_seq_len, facts.context - 1)
    seeded = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, facts.vocab_size or 2, (facts.context,), generator=seeded).tolist()
    prompt = tokens[:prompt_tokens]

    def first_token() -> None:
        generator.forward(prompt, 0)[-1].argmax()

    first_token()  # warm-up: the first call plans memory and packs weights
    prefill, _ = timed(first_token, args.min_seconds, 3)
    decode = []
    for depth in sorted({int(d) for d in args.depths.split(",") if d}):
        window = min(DECODE_WINDOW, facts.context - depth)
        if window < 1:
            continue
        if depth:
            generator.forward(tokens[:depth], 0)
        steps = iter(range(10**9))

        def step(depth: int = depth, window: int = window, steps: "Iterator[int]" = steps) -> None:
            position = depth + next(steps) % window
            generator.forward([tokens[position]], position)

        step()  # warm-up at this depth
        durations, seconds = timed(step, args.min_seconds, 16)
        decode.append(DecodeSpeed(depth, len(durations), round(seconds, 4)))
    constants = generator.run.constants()
    result = GenerationBenchmark(args.artifact, args.threads, facts.context, prompt_tokens, round(load_ms, 2),
                                 round(statistics.median(prefill) * 1e3, 3), len(prefill), decode,
                                 round(peak_rss_mb(), 1), round(peak_rss_mb() - before, 1),
                                 constants.get("get_kv_cache_bytes"), openmp_threads=os.environ.get("OMP_NUM_THREADS"))
    print(json.dumps(to_jsonable(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
