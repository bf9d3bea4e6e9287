"""What a fit may try and how it measures: the options of the search, validated when made."""

import math
from dataclasses import dataclass

from edgeprune.errors import UserInputError
from edgeprune.importance import CRITERIA
from edgeprune.importance.defaults import default_scoring
from edgeprune.quantize import RECIPES
from edgeprune.recovery.precision import PRECISIONS
from edgeprune.runtimes import RUNTIMES
from edgeprune.search.space import parse_fractions, parse_layer_counts

AUTO = "auto"
# the steps of a recovery `recover_steps="auto"` spends: 150 steps at DistillConfig's learning rate (2e-5) took 42
# of MiniLM's 72 heads, FFN −50 % and a layer from 83.4 % to within half a point of the dense model's test accuracy
# (docs/FINDINGS.md, "Under 5 MB within a point"); 43 s a recovery here in bfloat16 ("Recovery 4× faster")
AUTO_RECOVER_STEPS = 150


FFN_ALLOCATIONS = ("uniform", "scored")


@dataclass
class FitOptions:
    # "auto": the head scoring is chosen by measurement (edgeprune.search.scoring: fluctuation or Taylor, whichever
    # pruned model keeps the better PyTorch validation quality); or a CRITERIA name. `normalize`: how scores are
    # compared across layers ("none", "l2", "zscore"); None: the chosen scoring's, "none" for a named criterion.
    # `compensate`: removed heads' mean outputs folded into the bias (FLAP)
    criterion: str = "auto"
    normalize: str | None = None
    compensate: bool = default_scoring().compensate
    scoring_examples: int = 256  # calibration examples used to score heads
    scoring_batch_size: int = 16
    min_heads_per_layer: int = 1
    # the runtimes searched (a name, "executorch,litert" or a tuple; kept as a tuple); None: the device profile's
    # `searched_runtimes`
    runtime: tuple[str, ...] | None = None
    recipes: tuple[str, ...] | None = None  # None: the runtimes' ladders merged, highest fidelity first
    verify_examples: int = 8  # real validation inputs each export is checked on
    # keep only embedding rows of tokens in the calibration and validation data: None searches both ways
    trim_vocabulary: bool | None = None
    ffn_fractions: tuple[float, ...] = (0.0, 0.25, 0.5)  # of the kept layers' FFN neurons removed
    # how a fraction is spread over the layers: "uniform", the same fraction of every layer; "scored", groups of 32
    # neurons of least fluctuation first, whichever layer they are in (`plan_neurons` globally: each layer its width)
    ffn_allocation: str = "uniform"
    layer_removals: tuple[int, ...] = (0, 1, 2)  # whole layers removed (the most redundant consecutive block)
    head_step: int | None = None  # heads removed go in multiples of this; None: the number of layers
    require_device: bool = False  # fail when the device is unreachable instead of estimating its figures
    # validation qualities this close count as equal, and the less compressed candidate wins; None: one standard
    # error of the dense teacher's validation accuracy (accuracy-like metrics), else 0
    quality_tolerance: float | None = None
    bench_warmup: int = 5
    bench_runs: int = 30
    # the Python runner times runs beyond bench_runs until they add up to this long: a 2 ms model's 30 runs (60 ms)
    # sit inside one burst of a noisy machine's load (benchmarks/bench_window.py; docs/FINDINGS.md)
    bench_min_seconds: float = 1.0
    # "auto": a built pruned candidate is distilled from the teacher (AUTO_RECOVER_STEPS steps) when its PyTorch
    # estimate falls short of the dense teacher's by more than the tie tolerance (`recovering.needs_recovery`);
    # N > 0: every built pruned candidate, N steps; 0: no recovery
    recover_steps: int | str = AUTO
    recovery_batch_size: int | None = None  # examples a recovery step; None: the task's (Task.recovery_batch_size)
    recovery_precision: str = "auto"  # the students' training arithmetic (`edgeprune.recovery.precision`)
    # a recipe whose 4-bit grid the students train through and are left on (`DistillConfig.quantization_aware`):
    # litert-int4, whose artifact then holds a recovered model exactly; None: float students; "auto": fit trains
    # them on the grid of its ladder's first 4-bit recipe with one when the teacher's weights lie on that grid
    # (`weight_grid.grid_for_recovery`: a model that came as a Q4_1 GGUF), else in float
    recovery_quantization_aware: str | None = AUTO
    # no candidate is started once the fit has run this long (resumed sessions included) and a candidate meets every
    # budget: the best so far ships, and the result says what was left unbuilt. None: search until nothing can win
    time_limit_minutes: float | None = None

    def __post_init__(self) -> None:
        if self.runtime is not None:
            names = self.runtime.split(",") if isinstance(self.runtime, str) else self.runtime
            self.runtime = tuple(dict.fromkeys(name.strip() for name in names if name.strip())) or None
            for name in self.runtime or ():
                RUNTIMES.get(name)
        if self.recipes is not None and not self.recipes:
            raise UserInputError(f"name at least one recipe; choose from: {', '.join(RECIPES.names())}")
        for recipe in self.recipes or ():
            RECIPES.get(recipe)
        if self.scoring_examples < 1 or self.verify_examples < 1 or self.bench_runs < 20 or self.bench_min_seconds < 0:
            raise UserInputError("need scoring_examples >= 1, verify_examples >= 1, bench_runs >= 20 and "
                                 "bench_min_seconds >= 0")
        if self.criterion != "auto" and self.criterion not in CRITERIA.names():
            raise UserInputError(f"unknown head criterion {self.criterion!r}; choose auto (chosen by measurement) or "
                                 f"one of: {', '.join(CRITERIA.names())}")
        if self.normalize not in (None, "none", "l2", "zscore"):
            raise UserInputError(f"normalize must be none, l2 or zscore, got {self.normalize!r}")
        if self.recover_steps != AUTO and (isinstance(self.recover_steps, bool) or not isinstance(
                self.recover_steps, int) or self.recover_steps < 0):
            raise UserInputError(f"recover_steps must be auto or a whole number >= 0 (0: no recovery), got "
                                 f"{self.recover_steps!r}")
        if self.recovery_batch_size is not None and self.recovery_batch_size < 1:
            raise UserInputError(f"recovery_batch_size must be >= 1, got {self.recovery_batch_size}")
        if self.recovery_precision not in PRECISIONS:
            raise UserInputError(f"recovery_precision must be one of {', '.join(PRECISIONS)}, "
                                 f"got {self.recovery_precision!r}")
        if self.recovery_quantization_aware not in (None, AUTO):
            from edgeprune.recovery.weight_grid import grid_of

            grid_of(self.recovery_quantization_aware)
        self.ffn_fractions = parse_fractions(self.ffn_fractions)
        if self.ffn_allocation not in FFN_ALLOCATIONS:
            raise UserInputError(f"ffn_allocation must be {' or '.join(FFN_ALLOCATIONS)}, got {self.ffn_allocation!r}")
        self.layer_removals = parse_layer_counts(self.layer_removals)
        if self.quality_tolerance is not None and not 0 <= self.quality_tolerance < math.inf:
            raise UserInputError(f"quality_tolerance must be >= 0 (in the task metric's units), got "
                                 f"{self.quality_tolerance}")
        if self.time_limit_minutes is not None and not self.time_limit_minutes > 0:
            raise UserInputError(f"time_limit_minutes must be more than 0, got {self.time_limit_minutes}")
        if self.head_step is not None and self.head_step < 1:
            raise UserInputError(f"head_step must be >= 1, got {self.head_step}")

    @property
    def recovery_steps(self) -> int:
        """The steps one recovery runs: AUTO_RECOVER_STEPS under "auto", else `recover_steps` (0: no recovery)."""
        return AUTO_RECOVER_STEPS if self.recover_steps == AUTO else int(self.recover_steps)

    @property
    def recovery_when_it_pays(self) -> bool:
        """Whether a candidate is distilled only when pruning cost it more than the tie tolerance ("auto")."""
        return self.recover_steps == AUTO

    @property
    def bench_settings(self) -> tuple[int, int, float]:
        """Warm-up runs, timed runs and the least timed seconds of each benchmark, in `benchmark_on`'s order."""
        return self.bench_warmup, self.bench_runs, self.bench_min_seconds
