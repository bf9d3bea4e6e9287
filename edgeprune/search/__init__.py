"""The fit loop and the values it produces."""

from edgeprune.search.budget import Budget
from edgeprune.search.result import BuiltArtifact, FitResult, Trial

__all__ = ["Budget", "BuiltArtifact", "FitResult", "Trial"]
