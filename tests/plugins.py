"""A third party's plugin installed the way pip would leave it: its module and a `.dist-info` folder whose
entry_points.txt names it, on a path of its own that a fresh interpreter gets on PYTHONPATH (importlib.metadata then
finds the distribution and its entry points as it finds edgeprune's). Used by the tests of the runtime, transport
and family plugins, each of which runs edgeprune's command line in such an interpreter."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import small_vocab_tokenizer_files, tiny_bert

EDGEPRUNE = [sys.executable, "-c", "from edgeprune.cli import main; raise SystemExit(main())"]


def install_plugin(root: Path, module: str, source: str, group: str, name: str,
                   exports: Path | None = None) -> dict[str, str]:
    """Install `source` as module `module` of a distribution whose entry point `name` in `group` names it; the
    environment of an interpreter that sees it (one thread, a cache of its own under `root`, whose exports are
    `exports` when given: the session's, tests/conftest.py)."""
    if exports is not None:
        (root / "cache").mkdir(parents=True, exist_ok=True)
        (root / "cache" / "exports").symlink_to(exports, target_is_directory=True)
    site = root / "site"
    metadata = site / f"{module}-1.0.dist-info"
    metadata.mkdir(parents=True)
    (site / f"{module}.py").write_text(source)
    (metadata / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    (metadata / "entry_points.txt").write_text(f"[{group}]\n{name} = {module}\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path]), "OMP_NUM_THREADS": "1",
            "EDGEPRUNE_CACHE": str(root / "cache")}


def tiny_classifier_folder(folder: Path) -> Path:
    """A tiny random BERT with a small tokenizer, as a Hugging Face folder (the bundled task fits its head)."""
    folder.mkdir()
    vocab = small_vocab_tokenizer_files(folder, words=500)
    tiny_bert(seed=1, vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=64).save_pretrained(folder)
    return folder


def run_edgeprune(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`edgeprune ARGS` in a fresh interpreter; never a traceback, whatever it exits with."""
    done = subprocess.run([*EDGEPRUNE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done
