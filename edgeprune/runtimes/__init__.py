"""The device runtimes edgeprune exports for, one descriptor each (torch-free; see base.py). Each registers itself
when RUNTIMES is first read: the modules of the `edgeprune.runtimes` entry points (edgeprune.plugins)."""

from edgeprune.runtimes.base import RUNTIMES, BoardPackages, EachRuntime, RuntimeSpec, load_named, runtime_for_suffix

__all__ = ["RUNTIMES", "BoardPackages", "EachRuntime", "RuntimeSpec", "load_named", "runtime_for_suffix"]
