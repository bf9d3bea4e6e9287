"""Which artifacts report.html shows, what it calls them and what part each played in the fit."""

from edgeprune.search.result import BuiltArtifact, FitResult


def heads_removed(artifact: BuiltArtifact) -> int | None:
    """Heads the artifact's plan removed; None when its plan keeps no head plan."""
    return None if artifact.plan.heads is None else artifact.plan.heads.heads_removed


def is_chosen(artifact: BuiltArtifact, result: FitResult) -> bool:
    # identity within one fit; equal paths once the result has been through result.json
    return artifact is result.fitted or artifact.path == result.fitted.path


def on_front(artifact: BuiltArtifact, result: FitResult) -> bool:
    return artifact is not result.dense and artifact.path in result.pareto


def display_name(artifact: BuiltArtifact, result: FitResult) -> str:
    """"dense baseline (fp32)", "int8-dynamic, 8 heads removed", or the chosen one prefixed with its label."""
    if artifact is result.dense:
        return f"dense baseline ({artifact.recipe.name})"
    name = f"{artifact.recipe.name}, {artifact.describe()}"
    return f"{result.fitted.label}: {name}" if is_chosen(artifact, result) else name


def candidates(result: FitResult) -> list[BuiltArtifact]:
    """Every exported candidate, the chosen one included even when the result lists no candidates."""
    found = list(result.candidates)
    if not any(is_chosen(c, result) for c in found):
        found.append(result.fitted)
    return found


def finalists(result: FitResult) -> list[BuiltArtifact]:
    """The dense baseline and every benchmarked candidate, in the order they were built."""
    return [a for a in [result.dense, *candidates(result)] if a.benchmark is not None]


def front_names(result: FitResult) -> list[str]:
    """The candidates on the Pareto front, by name."""
    return [display_name(c, result) for c in candidates(result) if on_front(c, result)]
