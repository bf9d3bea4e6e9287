"""`fit_fleet`: one model fitted to several devices in one run, the device-independent work done once.

A team ships one model to a range of devices. Each device gets its own fit (its own budgets, runtime, search
and artifact folder, `out/DEVICE/`), but what does not depend on the device is computed by the first device
that needs it and reused by the others (`SharedWork`): the teacher, the split, the head and FFN scores, the
head means, the PyTorch estimates, every export (through the content-keyed export cache) and the quality of each
artifact through the runtime. What stays per device is benchmarking and the decisions the budgets make.

A device that cannot be fitted (unreachable with `require_device`, every recipe rejected) does not stop the
others: its row says why, and `FleetResult.fits` is false. An interrupted fleet resumes device by device:
finished devices are read back, an interrupted one resumes from its journal, the rest start.
"""

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edgeprune.devices import DeviceProfile, load_profile
from edgeprune.errors import EdgepruneError, Interrupted, UserInputError
from edgeprune.progress import Progress
from edgeprune.report.fleet import write_fleet_reports
from edgeprune.search.budget import Budget
from edgeprune.search.fit import fit_task
from edgeprune.search.fleet_result import FAILED, FLEET_FILE, FleetMember, FleetResult
from edgeprune.search.journal import work_dir_for
from edgeprune.search.options import FitOptions
from edgeprune.search.result import FitResult
from edgeprune.search.shared import SharedWork
from edgeprune.tasks.base import Task

if TYPE_CHECKING:  # Ray is an extra: the pool is imported only where one is made
    from edgeprune.cluster import BoardPool

def fit_fleet(
    task: Task,
    devices: Sequence[str | DeviceProfile],
    budgets: Mapping[str, Budget] | None = None,
    out: Path | None = None,
    options: FitOptions | None = None,
    progress: Progress | None = None,
    resume: bool = False,
    boards: "BoardPool | None" = None,
    builds_ahead: int | None = 0,
    shared_folder: Path | None = None,
) -> FleetResult:
    """Fit `task`'s model to every device in `devices` (names or profiles, in the order given); write one fit
    folder per device under `out` and fleet.json, fleet.md and fleet.html next to them.

    `budgets` maps a device name to its budget (default: the profile's). The first device pays for the shared
    work; put the device whose fit explores most (the tightest budget) first. `boards` (a lab pool on Ray)
    benchmarks each device whose profile it has boards of on those boards; `builds_ahead` and `shared_folder`
    as for `fit_task`.
    """
    from edgeprune.search.fit import default_out_dir

    profiles = [device if isinstance(device, DeviceProfile) else load_profile(device) for device in devices]
    names = [profile.name for profile in profiles]
    if not profiles:
        raise UserInputError("a fleet needs at least one device")
    if len(set(names)) != len(names):
        raise UserInputError(f"a device appears twice in the fleet: {', '.join(names)}")
    unknown = sorted(set(budgets or {}) - set(names))
    if unknown:
        raise UserInputError(f"budgets name devices that are not in the fleet: {', '.join(unknown)} (the fleet: "
                             f"{', '.join(names)})")
    out = Path(out) if out is not None else default_out_dir()
    _check_fleet_folder(out, names, resume)
    progress = progress or task.progress
    options = options or FitOptions()
    shared = SharedWork()
    started = time.perf_counter()
    members = []
    for index, profile in enumerate(profiles, 1):
        budget = (budgets or {}).get(profile.name) or Budget.for_device(profile)
        folder = out / profile.name
        runtime = ",".join(options.runtime or profile.searched_runtimes)
        progress.note(f"fleet: device {index} of {len(profiles)}: {profile.name} ({runtime}; {budget.describe()})")
        if (folder / "result.json").is_file():  # finished before this resume
            progress.note(f"fleet: {profile.name} finished before (resumed)")
            members.append(FleetMember.of(FitResult.load(folder / "result.json")))
            continue
        try:
            result = fit_task(task, profile, budget, folder, options, progress,
                              resume=resume and work_dir_for(folder).is_dir(), shared=shared, boards=boards,
                              builds_ahead=builds_ahead, shared_folder=shared_folder)
        except Interrupted as interrupted:
            raise Interrupted(f"{interrupted}; the whole fleet continues with --resume {out}") from interrupted
        except EdgepruneError as error:  # this device only: the others are still worth fitting
            progress.warn(f"fleet: {profile.name} failed: {error}")
            members.append(FleetMember(profile.name, FAILED, str(error), str(folder), budget, runtime))
            continue
        members.append(FleetMember.of(result))
    result = FleetResult(members, task.describe(), str(out), round(time.perf_counter() - started, 1),
                         dict(shared.reused))
    write_fleet_reports(result, out)
    result.save(out / FLEET_FILE)  # last: a fleet.json says the fleet is complete
    progress.note(f"fleet: {sum(m.fits for m in members)} of {len(members)} devices fit; wrote {out / 'fleet.html'}")
    return result


def _check_fleet_folder(out: Path, names: list[str], resume: bool) -> None:
    """A new fleet writes into a missing or empty folder; a resume into the folder of the same fleet."""
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {out} is a file; name a folder to write to")
    if resume:
        if (out / FLEET_FILE).is_file():
            raise UserInputError(f"{out} holds a finished fleet ({FLEET_FILE}); nothing to resume")
        if not out.is_dir():
            raise UserInputError(f"nothing to resume for {out}: the folder does not exist")
        strangers = sorted(p.name for p in out.iterdir() if p.name.removeprefix(".").removesuffix(".partial")
                           not in names)
        if strangers:
            raise UserInputError(f"{out} holds {', '.join(strangers)}, which are not devices of this fleet "
                                 f"({', '.join(names)}); resume with the same devices")
        return
    if out.exists() and any(out.iterdir()):
        raise UserInputError(f"output folder {out} already exists and is not empty; choose another --out "
                             "(or --resume it)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserInputError(f"cannot create the output folder {out}: {error.strerror or error}") from None
