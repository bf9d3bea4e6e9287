"""Quantization recipes: small configs in a registry, each naming its runtime and the tolerance its
artifact must meet against its PyTorch source."""

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.plugins import RUNTIMES_GROUP
from edgeprune.quantize.block_offsets import quantize_split_linears, split_block_offsets
from edgeprune.quantize.formats import FORMATS, output_layer
from edgeprune.quantize.fused_projections import fuse_projections
from edgeprune.quantize.static_int8 import Inputs, check_calibration, quantize_static
from edgeprune.quantize.tied_output import quantize_output_layer
from edgeprune.registry import Registry
from edgeprune.runtimes import RUNTIMES, EachRuntime

FormatName = str  # a registered weight format (edgeprune/quantize/formats.py): fp32, fp16, int8, int4
RuntimeName = str  # a registered runtime (edgeprune/runtimes): executorch, litert, or a plugin's
INT4_GROUP = 32  # 4-bit linear weights share one scale per 32 input columns
CALIBRATION_EXAMPLES = 32  # real inputs a calibrated recipe observes (benchmarks/export_matrix.py uses this many)


@dataclass(frozen=True)
class Recipe:
    name: str
    runtime: RuntimeName
    linear: FormatName  # how linear weights are stored in the artifact
    embedding: FormatName  # how embedding tables are stored in the artifact
    min_cosine: float  # worst cosine of runtime outputs vs. the PyTorch source over real inputs
    description: str
    # how LiteRT's ai-edge-quantizer quantizes the converted flatbuffer (its PyTorch source stays fp32)
    litert_quantization: Literal["fp16", "dynamic-int8", "dynamic-int4"] | None = None
    # activation ranges fixed from real calibration inputs (PT2E static int8 linears): `apply` needs them
    calibrated: bool = False
    # 4-bit linear weights share one scale per `group_size` input columns; a linear whose width it does not divide
    # stays at 8 bits (ExecuTorch's int4 recipes; LiteRT's int4 scheme fixes its own blocks of 32)
    group_size: int = INT4_GROUP
    # a language model's output layer (edgeprune/quantize/formats.py `output_layer`) in its own format; None: as the
    # linears. At 4 bits the vocabulary projection costs a decoder most of its quality (docs/FINDINGS.md)
    output_layer: FormatName | None = None
    # the output layer quantized to asymmetric 4-bit blocks of 32 by GPTQ on calibration inputs, and an embedding
    # table tied to it reading the same codes (edgeprune/quantize/tied_output.py): `apply` needs calibration
    output_layer_calibrated: bool = False
    # a recipe quantized in PyTorch stores its 4-bit linears as asymmetric blocks of `group_size` (a minimum and a
    # step per block), split into a symmetric part and per-block offsets (edgeprune/quantize/block_offsets.py)
    # rather than as symmetric blocks of the weights. LiteRT's dynamic-int4 splits in its exporter instead
    block_offsets: bool = False

    def __post_init__(self) -> None:
        if self.block_offsets and self.linear != "int4":
            raise ValueError(f"recipe {self.name}: block offsets split 4-bit linears; its linears are {self.linear}")

    def apply(self, model: nn.Module, calibration: Sequence[Inputs] | None = None) -> nn.Module:
        """The PyTorch module this recipe exports (a quantized copy; the original is left untouched): each of its
        weight formats (edgeprune/quantize/formats.py) quantizes the tables and the linears it stores.

        `calibration`: real task inputs at the export shape, required by (and only read by) recipes that
        calibrate (`needs_calibration`), e.g. `task.example_inputs("calibration", CALIBRATION_EXAMPLES)`.
        """
        batches = check_calibration(self.name, calibration) if self.needs_calibration else []
        quantized = copy.deepcopy(model).eval()
        if self.output_layer_calibrated:
            quantize_output_layer(quantized, batches, self.group_size)
        if not self.quantized_in_pytorch:
            return quantized
        FORMATS.get(self.embedding).quantize_tables(quantized)
        if self.calibrated:
            return quantize_static(quantized, batches, self.runtime)
        # q/k/v and gate/up as one linear each before they are quantized (each row's quantization is its own, so
        # the arithmetic is the same): fewer XNNPACK ops a decode step and fewer nodes for ExecuTorch's lowering to
        # trace (SmolLM2 int4-decoder-all: exported in 388 s against 578, docs/FINDINGS.md; LiteRT's generator fuses
        # in its own exporter)
        fuse_projections(quantized)
        head = output_layer(quantized) if self.output_layer not in (None, self.linear) else None
        split: list[nn.Module] = []
        if self.block_offsets:
            split_block_offsets(quantized, self.group_size)
            split = quantize_split_linears(quantized)
        FORMATS.get(self.linear).quantize_linears(quantized, self.group_size, skip=[*([head] if head else []), *split])
        if head is not None:
            FORMATS.get(self.output_layer).quantize_linears(head, self.group_size)
        return quantized

    def int4_fits(self, module: nn.Module) -> bool:
        """True when `module` is a linear this recipe stores in its grouped 4-bit format: its groups divide the
        input width (a narrower or odd width stays at 8 bits)."""
        return isinstance(module, nn.Linear) and FORMATS.get(self.linear).stores_grouped(module.in_features,
                                                                                         self.group_size)

    @property
    def asymmetric_blocks(self) -> bool:
        """True when the artifact stores the linears in asymmetric 4-bit blocks (a symmetric part and per-block
        offsets): ExecuTorch's `block_offsets` recipes split in PyTorch, LiteRT's dynamic-int4 in its exporter."""
        return self.block_offsets or self.litert_quantization == "dynamic-int4"

    @property
    def needs_calibration(self) -> bool:
        """True when `apply` needs real task inputs: calibrated activation ranges, or a calibrated output layer."""
        return self.calibrated or self.output_layer_calibrated

    @property
    def quantized_in_pytorch(self) -> bool:
        """True when `apply` quantizes the PyTorch module; False for a runtime whose recipes quantize the
        converted file (LiteRT's), unless the recipe is calibrated."""
        return RUNTIMES.get(self.runtime).quantizes_in_pytorch or self.calibrated

    @property
    def embeddings_quantized_in_pytorch(self) -> bool:
        """True when edgeprune's own int8/int4 table modules (their scales) reach the artifact."""
        return FORMATS.get(self.embedding).table_module is not None and self.quantized_in_pytorch


# a runtime's module (the `edgeprune.runtimes` entry points) may register recipes of its own beside its descriptor
RECIPES: Registry[Recipe] = Registry("quantization recipe", plugins=RUNTIMES_GROUP)
for _recipe in (
    Recipe("fp32", "executorch", "fp32", "fp32", 0.99999, "no quantization"),
    Recipe("int8-linear", "executorch", "int8", "fp32", 0.999,
           "int8 dynamic activations with per-channel int8 linear weights; fp32 embeddings"),
    Recipe("int8", "executorch", "int8", "int8", 0.999, "int8 linears and int8 per-row embedding tables"),
    Recipe("int8-emb4", "executorch", "int8", "int4", 0.999,
           "int8 linears and 4-bit embedding tables (an fp16 scale per 64 columns)"),
    Recipe("int4-linear", "executorch", "int4", "int8", 0.99,
           f"4-bit group-wise (group {INT4_GROUP}) linear weights with int8 dynamic activations; int8 embeddings"),
    # a decoder's recipe (issue 31): its vocabulary projection at 8 bits per channel, the other linears in asymmetric
    # 4-bit blocks split into a symmetric part and offsets. SmolLM2-135M through the program: validation perplexity
    # 42.38 (LiteRT's litert-int4 42.43); as symmetric blocks of the weights, like int4-linear, 56.93 (docs/FINDINGS.md)
    Recipe("int4-decoder", "executorch", "int4", "int8", 0.99,
           f"4-bit linear weights in asymmetric blocks of {INT4_GROUP} (a symmetric part and per-block offsets) with "
           "int8 dynamic activations; the output layer (the vocabulary projection) at int8 per channel; int8 "
           "embeddings", output_layer="int8", block_offsets=True),
    # int4-decoder with the output layer at 4 bits too, placed by GPTQ on calibration text, and the embedding table
    # tied to it reading its codes (edgeprune/quantize/tied_output.py), as litert-int4-all does; ExecuTorch keeps
    # the table's codes apart from the head's (XNNPACK packs the head its own way)
    Recipe("int4-decoder-all", "executorch", "int4", "int4", 0.99,
           "int4-decoder with the output layer at 4 bits as well (asymmetric blocks of 32 placed by GPTQ on "
           "calibration text) and the embedding table tied to it reading the same codes", output_layer="int4",
           output_layer_calibrated=True, block_offsets=True),
    Recipe("int4", "executorch", "int4", "int4", 0.99,
           f"4-bit group-wise (group {INT4_GROUP}) linear weights and 4-bit embedding tables (an fp16 scale per 64 "
           "columns)"),
    Recipe("litert-fp32", "litert", "fp32", "fp32", 0.99999, "LiteRT, no quantization"),
    Recipe("litert-fp16", "litert", "fp16", "fp16", 0.9999, "LiteRT, fp16 weights", "fp16"),
    Recipe("litert-int8", "litert", "int8", "int8", 0.99,
           "LiteRT dynamic-range int8: per-channel int8 weights, activations quantized at run time", "dynamic-int8"),
):
    RECIPES.register(_recipe.name)(_recipe)

# LiteRT at 4 bits: asymmetric blocks of 32 (a min and a step per block) run on XNNPACK's symmetric blockwise kernels
# as a symmetric part plus per-block offsets (edgeprune/quantize/block_offsets.py), the codes made exact after
# ai-edge-quantizer (edgeprune/export/litert_blocks.py); a language model's output layer stays at int8 per channel.
# On SmolLM2-135M, whose weights come from a Q4_1 GGUF and so lie on such a grid, it verifies at cosine 0.996 with
# +2.1 % perplexity over fp32, as litert-int8 does, in a 99.3 MB file against int8's 141.7 (ai-edge-quantizer's own
# symmetric blocks: cosine 0.90, +37 %); it decodes no faster than int8 there (docs/FINDINGS.md). A decoder's rung
# (hence `output_layer`: an encoder's ladder leaves it out); on MiniLM, whose weights lie on no grid, verification
# refuses it (cosine 0.959; ai-edge-quantizer's symmetric blocks 0.944)
LITERT_INT4 = Recipe("litert-int4", "litert", "int4", "int8", 0.99,
                     "LiteRT 4-bit linear weights, asymmetric blocks of 32 (a symmetric part and per-block offsets), "
                     "with int8 activations quantized at run time; the output layer and the rest int8 per channel",
                     "dynamic-int4", output_layer="int8")
RECIPES.register(LITERT_INT4.name)(LITERT_INT4)
# litert-int4 with the output layer at 4 bits too: placed by GPTQ on calibration text, its tied embedding table
# reading the same codes (edgeprune/quantize/tied_output.py). On SmolLM2 the output layer was 16 % of a decode step
# at int8; rounded to 4 bits it cost +6.7 % perplexity, placed by GPTQ +1.4 % (docs/FINDINGS.md)
LITERT_INT4_ALL = Recipe("litert-int4-all", "litert", "int4", "int4", 0.99,
                         "litert-int4 with the output layer at 4 bits as well (asymmetric blocks of 32 placed by GPTQ "
                         "on calibration text) and the embedding table tied to it reading the same codes",
                         "dynamic-int4", output_layer="int4", output_layer_calibrated=True)
RECIPES.register(LITERT_INT4_ALL.name)(LITERT_INT4_ALL)

# Calibrated static int8: offered by name (never in a fit ladder) and guarded by verification like every recipe.
# On MiniLM both are rejected there (cosine 0.967 / 0.973 < 0.99, about -2 points accuracy; docs/FINDINGS.md):
# per-tensor static activation ranges do not hold BERT's activation outliers.
STATIC_RECIPES = (
    Recipe("int8-static", "executorch", "int8", "int8", 0.99,
           "int8 linears with static activation ranges calibrated on task inputs (PT2E, XNNPACK quantizer); "
           "int8 per-row embedding tables", calibrated=True),
    Recipe("litert-int8-static", "litert", "int8", "int8", 0.99,
           "LiteRT int8 linears with static activation ranges calibrated on task inputs (PT2E, litert-torch "
           "quantizer); int8 per-row embedding tables", calibrated=True),
)
for _recipe in STATIC_RECIPES:
    RECIPES.register(_recipe.name)(_recipe)
UNVERIFIED_RECIPES: dict[str, Recipe] = {}  # recipes measured by benchmarks but not offered (none at present)

# each runtime's dense baseline, and the recipes the fit loop tries (highest fidelity first, smallest last): what
# its descriptor says (edgeprune/runtimes)
FP32_RECIPE: Mapping[str, str] = EachRuntime("fp32_recipe")
FIT_LADDERS: Mapping[str, tuple[str, ...]] = EachRuntime("fit_ladder")


def fidelity_rank(recipe: Recipe) -> tuple[int, int]:
    """How far from fp32 a recipe stores the linears and the embedding tables (0, 0 for fp32): comparable across
    runtimes only component by component (int8 linears with fp32 tables vs int8 everywhere is ordered; LiteRT
    int8 vs ExecuTorch int8 is not)."""
    return FORMATS.get(recipe.linear).rank, FORMATS.get(recipe.embedding).rank


def fit_ladder(runtimes: Sequence[str], names: Sequence[str] | None = None,
               output_layer: bool = True) -> tuple[str, ...]:
    """The recipes a fit tries on `runtimes`: `names` (each checked to run on one of them) in the order given,
    else every runtime's FIT_LADDERS merged so that each ladder keeps its order and, at each step, the higher
    fidelity comes first (the first runtime's on a tie). Without `output_layer` (a model with no output layer of
    its own: an encoder) the ladder leaves out the recipes that differ only there."""
    if names:
        for name in names:
            recipe = RECIPES.get(name)
            if recipe.runtime not in runtimes:
                raise UserInputError(f"recipe {name!r} builds {recipe.runtime} artifacts; this fit's runtimes are "
                                     f"{', '.join(runtimes)} (add --runtime {','.join([*runtimes, recipe.runtime])})")
        return tuple(dict.fromkeys(names))
    ladders = [[name for name in FIT_LADDERS[runtime] if output_layer or RECIPES.get(name).output_layer is None]
               for runtime in runtimes]
    merged: list[str] = []
    while any(ladders):
        heads = [(fidelity_rank(RECIPES.get(ladder[0])), index) for index, ladder in enumerate(ladders) if ladder]
        merged.append(ladders[min(heads)[1]].pop(0))
    return tuple(merged)


def any_recipe(name: str) -> Recipe:
    """A registered recipe, or one of UNVERIFIED_RECIPES (for benchmarks that measure them)."""
    return UNVERIFIED_RECIPES[name] if name in UNVERIFIED_RECIPES else RECIPES.get(name)


def recipes_for(runtime: str) -> list[str]:
    return [name for name in RECIPES.names() if RECIPES.get(name).runtime == runtime]


def recipe_for_runtime(name: str, runtime: str) -> Recipe:
    """The named recipe, checked to be one `runtime` can execute."""
    recipe = RECIPES.get(name)
    if recipe.runtime != runtime:
        raise UserInputError(f"recipe {name!r} builds a {recipe.runtime} artifact, not {runtime}; "
                             f"{runtime} recipes: {', '.join(recipes_for(runtime))}")
    return recipe
