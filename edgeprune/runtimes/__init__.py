"""The device runtimes edgeprune exports for, one descriptor each (torch-free; see base.py)."""

from edgeprune.runtimes import executorch, litert  # noqa: F401 - each registers its descriptor, as a plugin would
from edgeprune.runtimes.base import RUNTIMES, BoardPackages, RuntimeSpec, load_named, runtime_for_suffix

__all__ = ["RUNTIMES", "BoardPackages", "RuntimeSpec", "load_named", "runtime_for_suffix"]
