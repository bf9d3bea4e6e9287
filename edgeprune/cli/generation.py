"""`edgeprune generate`: run a shipped generator on a prompt, or benchmark it (time to first token, prefill and
decode tokens/s at context depths, memory, KV-cache bytes)."""

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click

from edgeprune.cli.common import EXIT_OK, as_args, check_output_folder, epilog, finite, output_options
from edgeprune.cli.devices import connection_options, endpoint_from
from edgeprune.errors import UserInputError

if TYPE_CHECKING:
    from edgeprune.generation.bench import GenerationBenchmark


def parse_depths(text: str) -> tuple[int, ...]:
    try:
        depths = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise UserInputError(f"--depths takes whole numbers separated by commas (e.g. 128,1024), got {text!r}"
                             ) from None
    if not depths or min(depths) < 0:
        raise UserInputError(f"--depths takes token counts of at least 0, got {text!r}")
    return depths


@click.command("generate", epilog=epilog([
    'edgeprune generate runs/fit-20261202-120000/model.pte --prompt "The bank said" --max-new-tokens 32',
    "edgeprune generate model.pte --bench --prompt-tokens 128 --depths 128,480 --threads 2",
    'edgeprune generate model.pte --device pi5-emulated --prompt "The bank said"'],
    "0 done; 2 bad input; 4 the artifact is not a generator or failed to run; 5 device unreachable; "
    "6 a device command timed out"))
@click.argument("artifact", type=click.Path(path_type=Path))
@click.option("--prompt", help="text to continue (greedy), tokenized with the tokenizer beside the artifact")
@click.option("--tokenizer", type=click.Path(path_type=Path), help="folder of tokenizer files (default: the "
              "artifact's folder, where fit ships them)")
@click.option("--max-new-tokens", type=int, default=32, show_default=True)
@click.option("--bench", is_flag=True, help="benchmark the generator instead of continuing a prompt")
@click.option("--prompt-tokens", type=int, default=128, show_default=True, help="--bench: the prompt's length "
              "for time to first token (at most the program's prefill length)")
@click.option("--depths", default="128,1024", show_default=True, help="--bench: tokens already in the cache when "
              "decode is timed (depths the context cannot hold are left out)")
@click.option("--threads", type=int, help="default: every core here, the profile's threads on a --device")
@click.option("--device", envvar="EDGEPRUNE_DEVICE", help="generate (or --bench) on this device profile's board: a "
              ".pte by the native ExecuTorch runner `devices setup` builds there, a .tflite by LiteRT's generator "
              "module under the board's Python (env EDGEPRUNE_DEVICE); default: here, by the runtime's Python API")
@click.option("--binary", metavar="PATH", help="the native ExecuTorch runner to generate with: a path on the device, "
              "or a local build to push (default: the profile's)")
@click.option("--runs", type=int, default=3, show_default=True, help="--bench on a --device: timed generations "
              "per prompt length, after one untimed")
@click.option("--min-seconds", type=finite, default=1.0, show_default=True, help="--bench: time each figure this "
              "long at least")
@click.option("--out", type=click.Path(path_type=Path), help="--bench: folder for generation.json and generation.md")
@click.option("--json", is_flag=True, help="print the result as JSON")
@connection_options
@output_options
def generate_command(**values: object) -> int:
    """Continue a prompt with a KV-cached generator (a causal-lm fit's model.pte or model.tflite), or benchmark it."""
    return run_generate(as_args(values))


def run_generate(args: SimpleNamespace) -> int:
    if args.max_new_tokens < 1:
        raise UserInputError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.threads is not None and args.threads < 1:
        raise UserInputError(f"--threads must be at least 1, got {args.threads}")
    if not args.artifact.is_file():
        raise UserInputError(f"artifact {args.artifact} does not exist")
    if args.runs < 1:
        raise UserInputError(f"--runs must be at least 1, got {args.runs}")
    if args.binary is not None and (not args.binary.strip() or any(c in args.binary for c in "\n\r\0")):
        raise UserInputError(f"--binary {args.binary!r} is not a path")
    if args.device is not None or args.binary is not None:
        return on_device(args)
    if args.bench:
        return bench_generator(args)
    if not args.prompt:
        raise UserInputError("give --prompt TEXT to continue, or --bench to benchmark the generator")
    from edgeprune.generation.runner import Generator
    from edgeprune.progress import library_output_hidden

    tokenizer = load_tokenizer(args.tokenizer or args.artifact.parent)
    with library_output_hidden():
        generator = Generator(args.artifact, args.threads)
    prompt = tokenizer(args.prompt, add_special_tokens=False)["input_ids"]
    tokens = generator.generate(prompt, args.max_new_tokens)
    return print_continuation(args, tokenizer, prompt, tokens)


def print_continuation(args: SimpleNamespace, tokenizer, prompt: list[int], tokens: list[int]) -> int:  # noqa: ANN001
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    if args.json:
        print(json.dumps({"prompt": args.prompt, "prompt_tokens": prompt, "tokens": tokens, "text": text}))
    else:
        print(args.prompt + text)
    return EXIT_OK


def on_device(args: SimpleNamespace) -> int:
    """Continue the prompt, or benchmark, on the profile's device: by its native runner (ExecuTorch), or by the
    runtime's generator module run by the device's Python (LiteRT)."""
    from edgeprune.devices import load_profile
    from edgeprune.devices.transports import open_transport
    from edgeprune.export import check_artifact
    from edgeprune.generation.native import benchmark_generation_on, generate_on, script_generator
    from edgeprune.generation.runner import generator_facts
    from edgeprune.progress import library_output_hidden

    profile = load_profile(args.device or "host")
    runtime = check_artifact(args.artifact)
    # a runtime with a generator module runs it by the device's Python; else its native runner generates
    binary = script_generator(runtime) or args.binary or profile.native_binaries.get(runtime)
    if binary is None:
        if args.device is not None and profile.endpoint.on_this_machine:
            args.device = None  # this machine without a native runner: ExecuTorch's Python runtime, as without --device
            return run_generate(args)
        from edgeprune.runtimes import RUNTIMES

        tool_key = RUNTIMES.get(runtime).native_tool
        raise UserInputError(f"device {profile.name} has no native {runtime} runner to generate with: set runtime.env "
                             f"(where `edgeprune devices setup` builds it) or runtime.{tool_key} in {profile.source}, "
                             "or pass --binary PATH")
    if not args.bench and not args.prompt:
        raise UserInputError("give --prompt TEXT to continue, or --bench to benchmark the generator")
    if args.bench and args.out is not None:
        check_output_folder(args.out, empty=False)
    tokenizer = None if args.bench else load_tokenizer(args.tokenizer or args.artifact.parent)
    with library_output_hidden():
        facts = generator_facts(args.artifact)
    threads = args.threads or profile.threads
    from edgeprune.devices.setup import device_python

    endpoint = endpoint_from(profile, args)
    with open_transport(endpoint, device_python(profile, endpoint)) as transport:
        transport.workdir  # noqa: B018 - connect now: an unreachable device fails before anything is pushed
        if args.bench:
            result = benchmark_generation_on(transport, args.artifact, binary, facts, threads=threads,
                                             prompt_tokens=args.prompt_tokens,
                                             depths=parse_depths(args.depths), runs=args.runs, device=profile.name,
                                             emulated=profile.emulation_label)
            return print_benchmark(args, result)
        prompt = tokenizer(args.prompt, add_special_tokens=False)["input_ids"]
        run = generate_on(transport, args.artifact, prompt, args.max_new_tokens, threads, binary)
    return print_continuation(args, tokenizer, prompt, run.tokens)


def load_tokenizer(folder: Path):  # noqa: ANN201 - a transformers tokenizer
    from transformers import AutoTokenizer

    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise UserInputError(f"no tokenizer files in {folder}; pass --tokenizer FOLDER (a fit ships them beside "
                             "model.pte)")
    return AutoTokenizer.from_pretrained(folder)


def bench_generator(args: SimpleNamespace) -> int:
    from edgeprune.generation.bench import benchmark_generation

    if args.out is not None:
        check_output_folder(args.out, empty=False)
    result = benchmark_generation(args.artifact, threads=args.threads, prompt_tokens=args.prompt_tokens,
                                  depths=parse_depths(args.depths), min_seconds=args.min_seconds)
    return print_benchmark(args, result)


def print_benchmark(args: SimpleNamespace, result: "GenerationBenchmark") -> int:
    from edgeprune.serialization import to_jsonable, write_json_atomic, write_text_atomic

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(args.out / "generation.json", to_jsonable(result))
        write_text_atomic(args.out / "generation.md", result.markdown())
    print(json.dumps(to_jsonable(result), indent=2) if args.json else result.markdown(), end="")
    return EXIT_OK
