"""What fit measures of a shipped KV-cached generator beyond its perplexity: generation speed and memory on this
machine, and how often its greedy continuations agree with the dense teacher's."""

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from edgeprune.devices.profile import DeviceProfile
from edgeprune.errors import VerificationError
from edgeprune.generation.bench import GenerationBenchmark, TeacherAgreement
from edgeprune.progress import Progress
from edgeprune.quantize import FP32_RECIPE
from edgeprune.search.result import BuiltArtifact
from edgeprune.serialization import to_jsonable, write_text_atomic
from edgeprune.tasks.base import Quality, Task
from edgeprune.tasks.causal_lm import CausalLMTask

if TYPE_CHECKING:
    from edgeprune.generation.runner import TeacherContinuations


def benchmark_generator(folder: Path, artifact: str, profile: DeviceProfile, progress: Progress,
                        reachable: bool = True) -> GenerationBenchmark | None:
    """For a KV-cached generator: time to first token, prefill and decode tokens/s, memory and KV bytes of the
    shipped program, written beside it (generation.json, generation.md): on this machine in a Python process, on
    a reachable device by its native ExecuTorch runner or the runtime's generator module (LiteRT). None for other
    programs, and for a device without either (the per-candidate figures of the fit are still measured there)."""
    from edgeprune.generation.bench import benchmark_generation
    from edgeprune.generation.runner import generator_facts

    path = folder / artifact
    try:
        facts = generator_facts(path)
    except VerificationError:  # not a generator
        return None
    from edgeprune.export import runtime_of
    from edgeprune.generation.native import script_generator

    depths = chart_depths(facts.context)
    runtime = runtime_of(path)
    binary = profile.native_binaries.get(runtime) if profile.runner_for(runtime) == "native" else None
    # a runtime's generator module runs by the device's Python; else its native runner generates
    tool = script_generator(runtime) or binary
    if profile.endpoint.on_this_machine and binary is None:
        progress.note("benchmarking generation: time to first token, prefill and decode tokens/s")
        result = benchmark_generation(path, threads=profile.threads, depths=depths)
    elif reachable and tool is not None:
        from edgeprune.devices.setup import device_python
        from edgeprune.devices.transports import open_transport
        from edgeprune.generation.native import benchmark_generation_on

        progress.note(f"benchmarking generation on {profile.name}: time to first token, prefill and decode tokens/s")
        with open_transport(profile.endpoint, device_python(profile)) as transport:
            result = benchmark_generation_on(
                transport, path, tool, facts, threads=profile.threads, depths=depths, runs=2, device=profile.name,
                emulated=profile.emulation_label)
    else:
        progress.note(f"generation benchmark not run on {profile.name}: it needs the device's native {runtime} "
                      "runner (`edgeprune devices setup`); `edgeprune generate --bench --device` runs it later")
        return None
    # the shipped file's name: fit measures it in a staging folder that is moved into place afterwards
    result = dataclasses.replace(result, artifact=artifact)
    write_text_atomic(folder / "generation.json", json.dumps(to_jsonable(result), indent=2))
    write_text_atomic(folder / "generation.md", result.markdown())
    decode = ", ".join(f"{d.tokens_per_s:.1f} tokens/s at depth {d.depth}" for d in result.decode)
    progress.note(f"  time to first token {result.ttft_ms:.1f} ms ({result.prompt_tokens} tokens); decode {decode}")
    return result


def chart_depths(context: int) -> tuple[int, ...]:
    """Where decode is timed, for the report's chart against context length: after 128 and 1024 tokens and at a
    quarter, half and three quarters of the context, where the context holds them with 64 slots to decode; else
    half way."""
    wanted = {128, 1024, context // 4, context // 2, 3 * context // 4}
    return tuple(sorted(d for d in wanted if 0 < d <= context - 64)) or (context // 2,)


# BuiltArtifact.quality_source of a dense baseline whose quality was taken from the teacher in PyTorch
PYTORCH_QUALITY = "PyTorch (its fp32 program checked to compute the same, prefilling and decoding)"


def quality_from_pytorch(task: Task, artifact: BuiltArtifact, program: Path, teacher: torch.nn.Module) -> bool:
    """Whether a baseline's quality is the dense teacher's in PyTorch rather than a pass through its program: for a
    generator's fp32 program that verified on prefills (worst cosine to PyTorch at least 0.99999, what fp32 recipes
    require) and that also decodes like PyTorch (`decode_cosine`). A generator's perplexity through its program
    prefills and decodes every block of the split: SmolLM2's fp32 program took 38 s (ExecuTorch) and 58-80 s
    (LiteRT) on the validation split, 70 and 107-142 s on the test split (2026-12-07, 2 threads), for PyTorch's
    perplexity to four decimals (41.6183 both). Quantized programs are always measured."""
    if not (isinstance(task, CausalLMTask) and artifact.recipe.name == FP32_RECIPE[artifact.recipe.runtime]
            and artifact.verification.passed):
        return False
    return decode_cosine(task, program, teacher) >= artifact.recipe.min_cosine


@torch.no_grad()
def decode_cosine(task: CausalLMTask, program: Path, teacher: torch.nn.Module) -> float:
    """The worst cosine, over the first test block, of the program's logits to the teacher's in PyTorch, the block
    run as `CausalLMTask.runtime_quality` runs it (`generated_logits`): prefilled, its last tokens decoded one
    at a time through the program's cache (the path a verification on prefills does not take)."""
    from edgeprune.export import load_artifact
    from edgeprune.tasks.causal_lm import generated_logits, prefill_length

    block = task.encode("test")["input_ids"][:1]
    logits = generated_logits(load_artifact(program), block, prefill_length(task.max_length, "test"))
    return float(torch.nn.functional.cosine_similarity(logits[0].float(), teacher(block)[0][0].float(),
                                                       dim=-1).min())


def adopt_teacher_quality(artifact: BuiltArtifact, quality: Quality, split: str, progress: Progress) -> None:
    """Give `artifact` the teacher's PyTorch `quality` on `split` (validation: what the search decides on; test:
    the report's), saying where it came from."""
    if split == "validation":
        artifact.validation_quality = quality
    elif split == "test":
        artifact.quality = quality
    else:
        raise ValueError(f"a baseline's quality is adopted on the validation or test split, not {split!r}")
    artifact.quality_source = PYTORCH_QUALITY
    progress.note(f"  {split} {quality.metric} {quality.value:.4f} in PyTorch: the fp32 program computes the same "
                  f"(worst cosine {artifact.verification.min_cosine:.5f} on prefills, at least "
                  f"{artifact.recipe.min_cosine} decoding), so it is not run over the split")


def teacher_reference(teacher: torch.nn.Module) -> "TeacherContinuations":
    """The teacher's greedy continuations, computed once for every program `agreement_with_teacher` compares."""
    from edgeprune.generation.runner import TeacherContinuations

    return TeacherContinuations(teacher)


def agreement_with_teacher(task: Task, teacher: "torch.nn.Module | TeacherContinuations", artifact: Path,
                           progress: Progress) -> TeacherAgreement | None:
    """The program's greedy continuations of held-out test prompts against the teacher's (next-token agreement);
    None for a program that is not a generator. `teacher` a `TeacherContinuations` computes the teacher's once for
    every program compared."""
    from edgeprune.export import load_artifact
    from edgeprune.generation.runner import Generator, program_generator, teacher_agreement

    if not isinstance(task, CausalLMTask):
        return None
    run = load_artifact(artifact)
    if program_generator(run) is None:
        return None
    agreement = teacher_agreement(Generator(artifact, run=run), teacher, task.encode("test")["input_ids"])
    progress.note(f"  {Path(artifact).name}: next-token agreement with the dense teacher {agreement.agreement:.1%} "
                  f"({agreement.prompts} test prompts of {agreement.prompt_tokens} tokens, {agreement.new_tokens} "
                  "greedy tokens each)")
    return agreement
