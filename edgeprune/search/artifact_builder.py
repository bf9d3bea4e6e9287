"""Turns a float model of a search shape and a recipe into a verified artifact, then measures it: quality through
the runtime (once per file content and split, whichever device of a fleet asks) and a benchmark through the
fit's `Benchmarker`. Which model a shape exports (pruned, recovered, the dense teacher) is the candidate
builder's decision (`edgeprune.search.builder`); this knows only files.
"""

import dataclasses
import hashlib
import time
from pathlib import Path

import torch
from torch import nn

from edgeprune.export import RUNTIMES, export, load_artifact
from edgeprune.progress import Progress, elapsed_text
from edgeprune.quantize import CALIBRATION_EXAMPLES, Recipe
from edgeprune.quantize.size_model import ParameterLayout, payload_bytes
from edgeprune.search.benchmarkers import Benchmarker, WorkElsewhere
from edgeprune.search.result import BuiltArtifact
from edgeprune.search.shape_facts import ShapeFacts
from edgeprune.search.shared import SharedWork
from edgeprune.search.space import Shape
from edgeprune.tasks.base import Quality, Split


class ArtifactBuilder:
    """Exports, verifies, evaluates and benchmarks the artifacts of one fit in its work folder."""

    def __init__(self, facts: ShapeFacts, work: Path, progress: Progress, benchmarker: Benchmarker,
                 shared: SharedWork, elsewhere: WorkElsewhere) -> None:
        self.facts, self.work, self.progress, self.benchmarker = facts, work, progress, benchmarker
        self.shared, self.elsewhere = shared, elsewhere
        self.task, self.options, self.vocabulary = facts.task, facts.options, facts.vocabulary
        self.verify_inputs = self.task.example_inputs("validation", self.options.verify_examples)
        self.started = time.perf_counter()

    def remap(self, inputs: tuple[torch.Tensor, ...], trimmed: bool) -> tuple[torch.Tensor, ...]:
        """Inputs as the artifact takes them: token ids through the vocabulary map when it was trimmed."""
        if not trimmed or self.vocabulary is None:
            return inputs
        return (self.vocabulary.apply(inputs[0]), *inputs[1:])

    def calibration(self, recipe: Recipe, trimmed: bool) -> list[tuple[torch.Tensor, ...]] | None:
        """Real calibration inputs, as the artifact takes them, for a calibrated recipe; None otherwise."""
        if not recipe.needs_calibration:
            return None
        return [self.remap(i, trimmed) for i in self.task.example_inputs("calibration", CALIBRATION_EXAMPLES)]

    def build(self, model: nn.Module, shape: Shape, recipe: Recipe, file_name: str, label: str, trimmed: bool,
              recovery: str = "", observe: bool = True) -> BuiltArtifact:
        """Quantize `model` (the float model of `shape`) with `recipe`, export it to `file_name` in the work folder
        (or take it from the content-keyed cache) and verify it against PyTorch. `observe`: teach the size model
        the file's size (not for the dense baseline, whose full vocabulary would miscalibrate the candidates')."""
        facts = self.facts
        predicted = payload_bytes(model, recipe) + facts.overhead(recipe, shape)
        example = self.remap(facts.example, trimmed)
        calibration = self.calibration(recipe, trimmed)
        self.progress.note(f"{label}: {recipe.name}, {shape.describe()}: quantize, export, verify "
                           f"({elapsed_text(self.started)} into the search)")
        exported = export(model, example, self.work / file_name, recipe, self.task.cache_dir / "exports",
                          calibration=calibration, name=f"{label} ({recipe.name})",
                          verify_on=[self.remap(i, trimmed) for i in self.verify_inputs])
        if observe:
            facts.learn_size(recipe, shape, exported.size_bytes, model)
        verification = exported.verification
        self.progress.note(
            f"  {exported.size_bytes / 1e6:.2f} MB (predicted {predicted / 1e6:.2f}), "
            f"{'cached' if exported.cached else f'exported in {exported.export_seconds:.0f} s'}, "
            f"cosine to PyTorch {verification.min_cosine:.5f}"
        )
        return BuiltArtifact(
            label=label, recipe=recipe, path=file_name, plan=facts.structure(shape),
            parameters=sum(p.numel() for p in model.parameters()), file_bytes=exported.size_bytes,
            predicted_bytes=predicted, verification=verification,
            vocabulary_size=len(self.vocabulary.kept_ids) if trimmed and self.vocabulary else None,
            export_seconds=round(exported.export_seconds, 2), cached_export=exported.cached,
            ffn_fraction=shape.ffn_fraction, layers_removed=facts.removed_layers(shape.layers_removed),
            core_parameters=ParameterLayout.of(model).core_parameters, recovery=recovery,
        )

    def file_bytes(self, model: nn.Module, recipe: Recipe, name: str) -> int:
        """The size of `model`'s file in `recipe` (full vocabulary), exported unverified (or taken from the
        content-keyed cache) into the work folder and removed: what the size model is calibrated on."""
        calibration = self.calibration(recipe, False)
        path = self.work / f"{name}{RUNTIMES.get(recipe.runtime).suffix}"
        exported = export(model, self.facts.example, path, recipe, self.task.cache_dir / "exports",
                          calibration=calibration, name=name)
        path.unlink(missing_ok=True)
        self.progress.note(f"    {name}: {exported.size_bytes:,} bytes "
                           f"({'cached' if exported.cached else f'exported in {exported.export_seconds:.0f} s'})")
        return exported.size_bytes

    def evaluate(self, artifact: BuiltArtifact) -> None:
        """Validation quality through the runtime: what the search decides on."""
        artifact.validation_quality = self.runtime_quality(artifact, "validation")
        self.progress.note(f"  validation {artifact.validation_quality.metric} "
                           f"{artifact.validation_quality.value:.4f} through {artifact.recipe.runtime}")

    def runtime_quality(self, artifact: BuiltArtifact, split: Split) -> Quality:
        """The artifact's quality on `split` through the runtime; the same file (by content) measured for another
        device of the fleet, or by a build that ran ahead elsewhere, is not measured again."""
        with open(self.work / artifact.path, "rb") as file:
            key = (hashlib.file_digest(file, "sha256").hexdigest(), split)
        if key in self.shared.runtime_qualities:
            self.shared.count(f"{split} qualities through the runtime")
            return self.shared.runtime_qualities[key]
        ahead = self.elsewhere.take(*key)
        if ahead is not None:
            self.shared.runtime_qualities[key] = ahead
            return ahead
        run = load_artifact(self.work / artifact.path)
        trimmed = artifact.vocabulary_size is not None
        quality = self.task.runtime_quality(run, split, (lambda inputs: self.remap(inputs, True)) if trimmed
                                            else None)
        self.shared.runtime_qualities[key] = quality
        return quality

    def benchmark(self, artifact: BuiltArtifact) -> None:
        """Through the fit's benchmarker: on the profile's device, a board of the pool, or estimated here."""
        inputs = self.remap(self.facts.example, artifact.vocabulary_size is not None)
        window = f" and {self.options.bench_min_seconds:g} s" if self.options.bench_min_seconds else ""
        self.progress.note(f"  benchmarking {self.benchmarker.where} (at least {self.options.bench_runs} runs"
                           f"{window}, {self.benchmarker.profile.threads} threads)")
        self.elsewhere.wait_before_benchmark()
        # the latency model's figure before it sees this measurement: result.json keeps both (its error, measured)
        artifact.predicted_latency_ms = self.facts.predict_latency(artifact.shape, artifact.recipe)
        artifact.latency_basis = self.facts.latency_model.basis(artifact.recipe.name)
        artifact.benchmark = self.benchmarker.benchmark(self.work / artifact.path, inputs, artifact.recipe.runtime)
        if getattr(self.task, "decode_inputs", None) is not None:  # a generator (CausalLMTask)
            self.benchmark_generation_steps(artifact)
        peak, board = artifact.benchmark.peak_rss_mb, artifact.benchmark.board
        estimated = " (estimated)" if self.benchmarker.estimated else ""
        self.progress.note(f"  p50 {artifact.benchmark.p50_ms:.2f} ms{estimated}"
                           f", peak {'?' if peak is None else f'{peak:.0f}'} MB{f' (board {board})' if board else ''}")

    def benchmark_generation_steps(self, artifact: BuiltArtifact) -> None:
        """A generator's decode step after its prompt, and its time to first token, timed like the forward."""
        step_inputs = self.task.decode_inputs()
        step = self.benchmarker.benchmark(self.work / artifact.path, step_inputs, artifact.recipe.runtime)
        prompt = self.task.ttft_inputs()  # None: the prompt is a whole block, the forward just timed
        ttft = artifact.benchmark.p50_ms if prompt is None else self.benchmarker.benchmark(
            self.work / artifact.path, prompt, artifact.recipe.runtime).p50_ms
        artifact.benchmark = dataclasses.replace(artifact.benchmark, decode_p50_ms=step.p50_ms, ttft_p50_ms=ttft,
                                                 kv_unwritten_mb=self.kv_unwritten_mb(artifact, step_inputs))
        self.progress.note(f"  decode {artifact.benchmark.decode_tokens_per_s:.1f} tokens/s at depth "
                           f"{int(step_inputs[1][0])}; first token in {ttft:.1f} ms")

    def kv_unwritten_mb(self, artifact: BuiltArtifact, step_inputs: tuple[torch.Tensor, ...]) -> float | None:
        """The KV-cache MB a generator's timed calls (a prefill up to the step's depth, the step) did not write."""
        from edgeprune.generation.runner import generator_facts

        facts = generator_facts(self.work / artifact.path)
        kv_bytes = facts.kv_cache_bytes
        if not kv_bytes:  # a program that does not say
            return None
        written = min(int(step_inputs[1][-1]) + 1, facts.context)
        return round(kv_bytes * (facts.context - written) / facts.context / 1e6, 3)

    def measure(self, artifact: BuiltArtifact) -> None:
        self.evaluate(artifact)
        self.benchmark(artifact)
