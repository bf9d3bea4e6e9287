"""Score-based selection strategies on the shared registry: each gives the plan its own function gives, names
what it needs when the amount is missing, and the CLI offers exactly the registered ones."""

import re

import numpy as np
import pytest

from edgeprune.cli import cli
from edgeprune.errors import UserInputError
from edgeprune.importance import HeadScores
from edgeprune.pruning import (
    STRATEGIES,
    Constraints,
    SelectionAmount,
    plan_global_topk,
    plan_heads,
    plan_per_layer,
    plan_threshold,
)

SCORES = HeadScores(np.array([[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.4, 0.7], [0.6, 0.05, 0.95, 0.35]]), "test", 8)


@pytest.mark.parametrize("name, amount, direct", [
    ("global-topk", SelectionAmount(remove=5), lambda c: plan_global_topk(SCORES, 5, constraints=c)),
    ("per-layer", SelectionAmount(remove_per_layer=2), lambda c: plan_per_layer(SCORES, 2, c)),
    ("threshold", SelectionAmount(threshold=0.4), lambda c: plan_threshold(SCORES, 0.4, None, c)),
    ("threshold", SelectionAmount(quantile=0.5), lambda c: plan_threshold(SCORES, None, 0.5, c)),
])
def test_each_strategy_plans_what_its_function_plans(name, amount, direct):
    constraints = Constraints(min_heads_per_layer=1, heads_multiple=1)
    assert plan_heads(name, SCORES, amount, constraints) == direct(constraints)


@pytest.mark.parametrize("name, message", [
    ("global-topk", "global-topk needs --remove (heads to remove in all)"),
    ("per-layer", "per-layer needs --remove-per-layer (heads to remove from each layer)"),
    ("threshold", "threshold needs --threshold or --quantile"),
])
def test_a_missing_amount_names_what_the_strategy_needs(name, message):
    with pytest.raises(UserInputError, match=re.escape(message)):
        plan_heads(name, SCORES, SelectionAmount())


def test_an_unknown_strategy_lists_the_registered_ones():
    with pytest.raises(UserInputError, match="unknown selection strategy 'random'; choose one of: global-topk, "
                                             "per-layer, threshold"):
        plan_heads("random", SCORES, SelectionAmount(remove=1))


def test_the_cli_offers_exactly_the_registered_strategies_and_runtimes():
    from edgeprune.export import RUNTIMES

    def choices(verb: str, option: str) -> list[str]:
        return list(next(p for p in cli.get_command(None, verb).params if p.name == option).type.choices)

    assert choices("prune", "strategy") == STRATEGIES.names() == ["global-topk", "per-layer", "threshold"]
    for verb in ("export", "bench"):
        assert choices(verb, "runtime") == RUNTIMES.names()
    fit_runtime = next(p for p in cli.get_command(None, "fit").params if p.name == "runtime").type  # one or several
    assert fit_runtime.name == "|".join(RUNTIMES.names()) + "[,...]"
    assert fit_runtime.convert("litert,executorch", None, None) == ("litert", "executorch")
