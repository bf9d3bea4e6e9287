"""What a fleet fit produces: a row per device (what its fit chose, or why it has none), JSON-ready with a version."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeprune.errors import UserInputError
from edgeprune.search.budget import Budget
from edgeprune.search.result import FitResult
from edgeprune.serialization import from_jsonable, to_jsonable, write_json_atomic
from edgeprune.tasks.base import Quality

FLEET_FORMAT_VERSION = 1
FLEET_FILE = "fleet.json"
FAILED = "failed"  # a member's status when its fit raised (the other statuses are FitResult's)


@dataclass
class FleetMember:
    """One device of the fleet: what its fit chose, or why it has no artifact."""

    device: str
    status: str  # fit, fit (estimated), budget_not_met or failed
    message: str
    out_dir: str  # the device's own fit folder (result.json, report.html, the artifact)
    budget: Budget
    runtime: str = ""
    recipe: str = ""
    structure: str = ""  # heads, FFN and layers removed, vocabulary
    artifact: str = ""  # path inside out_dir
    file_bytes: int | None = None
    p50_ms: float | None = None
    latency_measured: bool = False  # benchmarked on the device, not estimated here
    peak_rss_mb: float | None = None
    test_quality: Quality | None = None
    dense_test_quality: Quality | None = None
    elapsed_s: float = 0.0
    candidates_built: int = 0

    @property
    def fits(self) -> bool:
        return self.status in ("fit", "fit (estimated)")

    @classmethod
    def of(cls, result: FitResult) -> "FleetMember":
        """A device's row from its fit: `runtime` is the one its artifact runs in (searched among several or not)."""
        fitted, benchmark = result.fitted, result.fitted.benchmark
        return cls(device=result.device, status=result.status, message=result.message, out_dir=result.out_dir,
                   budget=result.budget, runtime=fitted.recipe.runtime, recipe=fitted.recipe.name,
                   structure=fitted.describe(), artifact=fitted.path, file_bytes=fitted.file_bytes,
                   p50_ms=benchmark.p50_ms if benchmark else None,
                   latency_measured=bool(benchmark and benchmark.measured),
                   peak_rss_mb=benchmark.peak_rss_mb if benchmark else None, test_quality=fitted.quality,
                   dense_test_quality=result.dense.quality, elapsed_s=result.elapsed_s,
                   candidates_built=len(result.candidates))


@dataclass
class FleetResult:
    members: list[FleetMember]
    task: dict[str, Any]
    out_dir: str
    elapsed_s: float
    reused: dict[str, int] = field(default_factory=dict)  # what later devices took from the shared work, and how often
    format_version: int = FLEET_FORMAT_VERSION

    @property
    def fits(self) -> bool:
        return all(member.fits for member in self.members)

    def save(self, path: str | Path) -> Path:
        write_json_atomic(Path(path), to_jsonable(self))
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> "FleetResult":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise UserInputError(f"{path} is not a readable fleet.json ({error})") from None
        if not isinstance(data, dict) or data.get("format_version") != FLEET_FORMAT_VERSION:
            raise UserInputError(f"{path} is not a fleet.json of format {FLEET_FORMAT_VERSION}")
        return from_jsonable(cls, data)
