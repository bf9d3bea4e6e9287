"""Parts registered through package metadata. Each registry of parts that a third party may add to names an
entry-point group (`edgeprune.runtimes`, `edgeprune.transports`, `edgeprune.families`); the first time a registry is
read, every module named in its group is imported, and registers its part as it is imported. edgeprune's own parts
are listed there too (pyproject.toml), so a third party's package adds one exactly as edgeprune does: one module that
registers on import, named in its own `[project.entry-points."edgeprune.transports"]` (or runtimes, families) table.

This is how simonw/llm finds its plugins, with Python's importlib.metadata and no plugin framework. One group per
registry, not one for all: reading the transports (`devices list`) must not import a model family's torch."""

import sys
from importlib.metadata import PackageNotFoundError, distribution, entry_points

OWN_DISTRIBUTION = "edgeprune"
# the entry-point groups, one per registry a third party may add to (RECIPES reads the runtimes' group: a runtime's
# module registers its recipes beside its descriptor)
RUNTIMES_GROUP = "edgeprune.runtimes"
TRANSPORTS_GROUP = "edgeprune.transports"
FAMILIES_GROUP = "edgeprune.families"

_loaded: set[str] = set()  # groups loaded in this process; marked before loading, so a plugin reading a registry
# while it is imported sees what is registered so far instead of a loop


def load_plugins(group: str) -> None:
    """Import every module of the entry-point `group` once. A third party's module that fails to import is named in
    one warning and skipped; edgeprune's own failing is an error, as is edgeprune missing from the metadata."""
    if group in _loaded:
        return
    _loaded.add(group)
    try:
        own = {point.name for point in distribution(OWN_DISTRIBUTION).entry_points if point.group == group}
    except PackageNotFoundError:
        own = set()
    if not own:
        raise RuntimeError(f"edgeprune's own parts register through its package metadata (entry points "
                           f"{group!r}), and the installed edgeprune lists none: install it again "
                           "(pip install -e . in a checkout)")
    for point in sorted(entry_points(group=group), key=lambda p: (p.name not in own, p.name)):
        try:
            point.load()
        except Exception as error:
            if point.name in own:
                raise
            print(f"edgeprune: warning: plugin {point.name} ({point.value}) was not loaded: "
                  f"{type(error).__name__}: {error}", file=sys.stderr)
