"""Head scores kept in the cache folder (`scores/`), so that a second fit of the same model, or a fit after
`edgeprune score`, does not score the heads again.

A ranking depends on the dense teacher, the task's data and options (`Task.cache_key`, as the teacher's entry) and on
how it was scored (`ScoringSettings`); the entry's name is the digest of both. Comparing the candidate scorings
takes 26 s of a MiniLM fit and 94-110 s of a SmolLM2-135M one here (2 threads, docs/FINDINGS.md). The entry holds the
winner's raw scores with the decision in their `extra` and, when the scoring was chosen by measurement, the winner's
PyTorch validation quality at the probe: the search's estimate for that structure, journaled as if just measured.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edgeprune.cache import discard, read_entry, write_entry
from edgeprune.importance import HeadScores, ScoringChoice
from edgeprune.progress import Progress
from edgeprune.serialization import from_jsonable, to_jsonable
from edgeprune.tasks.base import Quality, Task

SCORES_FOLDER = "scores"
# part of every entry's name: raise it when scoring gives other scores for the same model, data and settings
SCORES_FORMAT = 1
PRODUCERS = ("torch", "transformers")


@dataclass(frozen=True)
class ScoringSettings:
    """What a ranking depends on besides the task: the named criterion, or `auto`'s candidates compared at the
    probe (with compensation or not, within `tolerance`), and the calibration examples it scores on."""

    criterion: str
    candidates: tuple[ScoringChoice, ...]  # empty for a named criterion
    examples: int
    batch_size: int
    compensate: bool
    min_heads_per_layer: int
    head_step: int | None
    tolerance: float


def scores_entry(task: Task, settings: ScoringSettings) -> Path:
    """The cache file of `task`'s ranking under `settings`."""
    described = json.dumps(to_jsonable(settings), sort_keys=True)
    digest = hashlib.sha256(f"{task.cache_key()}|{described}|{SCORES_FORMAT}".encode()).hexdigest()[:24]
    return task.cache_dir / SCORES_FOLDER / f"{task.name}-{digest}.json"


def cached_head_scores(task: Task, settings: ScoringSettings, score: Callable[[], tuple[HeadScores, Quality | None]],
                       progress: Progress) -> tuple[HeadScores, Quality | None]:
    """(raw scores, the winner's quality at the probe or None) from the cache, or from `score()`, then kept there.

    A damaged entry is one warning and scored again (`edgeprune.cache`); a cache that cannot be written (a full
    disk) is one warning and the scores are used as they are."""
    path = scores_entry(task, settings)
    data = read_entry(path, progress.warn, PRODUCERS)
    if data is not None:
        try:
            saved = json.loads(data)
            scores = HeadScores.from_dict(saved["scores"])
            probe = from_jsonable(Quality, saved["probe"]) if saved["probe"] is not None else None
        except (ValueError, KeyError, TypeError) as error:
            discard(path, f"not head scores: {type(error).__name__}", progress.warn)
        else:
            progress.note(f"head scores loaded from cache {path}")
            return scores, probe
    scores, probe = score()
    entry = {"scores": scores.to_dict(), "probe": to_jsonable(probe) if probe is not None else None}
    try:
        write_entry(path, (json.dumps(entry, indent=1) + "\n").encode(), PRODUCERS)
    except OSError as error:
        progress.warn(f"head scores not cached at {path}: {error.strerror or error}")
    return scores, probe
