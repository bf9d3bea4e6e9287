"""A three-device fleet of `minilm-bbc` against three separate fits, and the fleet with its boards on Ray: wall time
side by side in one run. Prints a table, writes JSON.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/fleet.py [--scenario one-budget|three-budgets]
        [--out benchmarks/results]

The devices: this machine (`host`, 2 threads) and two "boards" that are this machine behind two real sshd on
loopback ports (1 thread each). `one-budget` gives all three the same size budget (20 MB), as `edgeprune fit
--device A --device B --device C --max-mb 20` does: the devices then need the same candidates and differ in their
benchmarks. `three-budgets` gives each its own (30, 20 and 13 MB): each device needs structures no other builds, the
case where sharing helps least. Every arm starts from its own empty cache holding only the dense teacher (copied
from a warm one), so no arm borrows another's exports; within an arm the export cache works as it does for a user
(three separate fits share exports through it, as three separate `edgeprune fit` runs would). The Ray arm starts a
two-node Ray cluster on 127.0.0.1 (one CPU per node), benchmarks the two boards through a pool of actors (`fit --ray
--boards`), with builds ahead at fit's default: none, since every node is this machine. On two cores any gain comes
from work done once, not from more CPUs. The search is kept to heads and the vocabulary with the int8 recipe (FFN
and layer removal off), so the whole run takes minutes; run nothing else meanwhile.
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/sshd.py lives beside the package
# Ray on loopback only (read when ray is imported): see tests/test_cluster.py
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import torch  # noqa: E402

from edgeprune import Budget, FitOptions, bundled_task, fit  # noqa: E402
from edgeprune.progress import Progress  # noqa: E402
from edgeprune.search.fleet import fit_fleet  # noqa: E402
from tests.sshd import start_sshd  # noqa: E402

SCENARIOS = {"one-budget": {"host": 20.0, "lab-a": 20.0, "lab-b": 20.0},
             "three-budgets": {"host": 30.0, "lab-a": 20.0, "lab-b": 13.0}}


def boards_toml(folder: Path, profiles: dict[str, Path], servers: dict) -> Path:
    text = "".join(f'[[board]]\nname = "{name}-board"\nprofile = "{profiles[name]}"\n[board.connection]\n'
                   f"{server.connection_toml()}\n" for name, server in servers.items())
    path = folder / "boards.toml"
    path.write_text(text)
    return path


def fresh_cache(root: Path, name: str, warm: Path) -> Path:
    cache = root / f"cache-{name}"
    shutil.copytree(warm / "teachers", cache / "teachers")
    os.environ["EDGEPRUNE_CACHE"] = str(cache)
    return cache


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--skip-ray", action="store_true", help="leave out the Ray arm")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="one-budget")
    args = parser.parse_args()
    budgets_mb = SCENARIOS[args.scenario]
    options = FitOptions(recipes=("int8",), ffn_fractions=(0.0,), layer_removals=(0,))
    root = Path(tempfile.mkdtemp(prefix="edgeprune-fleet-bench-"))
    servers = {name: start_sshd(root / f"sshd-{name}") for name in ("lab-a", "lab-b")}
    try:
        profiles = {name: server.write_profile(root, name) for name, server in servers.items()}
        devices = ["host", str(profiles["lab-a"]), str(profiles["lab-b"])]
        budgets = {name: Budget(max_mb=mb) for name, mb in budgets_mb.items()}
        warm = root / "cache-warm"
        os.environ["EDGEPRUNE_CACHE"] = str(warm)
        bundled_task("minilm-bbc", progress=Progress()).teacher()  # the teacher, once, for every arm

        arms: dict[str, dict] = {}
        fresh_cache(root, "separate", warm)
        separate = {}
        for device, name in zip(devices, budgets_mb, strict=True):
            started = time.perf_counter()
            result = fit(bundled_task("minilm-bbc", progress=Progress()), device=device, budget=budgets[name],
                         out=root / "separate" / name, options=options)
            separate[name] = {"wall_s": round(time.perf_counter() - started, 1), "recipe": result.fitted.recipe.name,
                              "structure": result.fitted.describe(), "file_mb": round(result.fitted.file_bytes / 1e6,
                                                                                      2)}
        arms["three separate fits"] = {"wall_s": round(sum(s["wall_s"] for s in separate.values()), 1),
                                       "devices": separate}

        fresh_cache(root, "fleet", warm)
        started = time.perf_counter()
        fleet = fit_fleet(bundled_task("minilm-bbc", progress=Progress()), devices, budgets, root / "fleet", options)
        arms["fleet"] = {"wall_s": round(time.perf_counter() - started, 1), "reused": fleet.reused,
                         "devices": {m.device: {"structure": m.structure, "file_mb": round(m.file_bytes / 1e6, 2)}
                                     for m in fleet.members}}

        if not args.skip_ray:
            arms["fleet, boards on Ray"] = ray_arm(root, warm, devices, budgets, options, profiles, servers)
    finally:
        for server in servers.values():
            server.stop()

    single = separate["host"]["wall_s"]
    header = ["arm", "wall s", "× one fit (host)", "devices: structure, MB"]
    rows = [[name, f"{arm['wall_s']:.0f}", f"{arm['wall_s'] / single:.2f}",
             "; ".join(f"{d} {v['structure']} {v['file_mb']}" for d, v in arm["devices"].items())]
            for name, arm in arms.items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    print(f"scenario {args.scenario}: budgets {budgets_mb} MB; threads: host 2, boards 1 each; torch intra-op "
          f"threads in the driver {torch.get_num_threads()}; {os.cpu_count()} CPUs")
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                           "torch_threads": torch.get_num_threads()},
               "scenario": args.scenario, "budgets_mb": budgets_mb, "one_fit_s": single, "arms": arms}
    path = args.out / f"fleet-{args.scenario}.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    shutil.rmtree(root, ignore_errors=True)
    return 0


def ray_arm(root: Path, warm: Path, devices: list[str], budgets: dict, options: FitOptions, profiles: dict,
            servers: dict) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from edgeprune.cluster import BoardPool, load_boards

    fresh_cache(root, "ray", warm)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        started = time.perf_counter()
        with BoardPool(load_boards(boards_toml(root, profiles, servers)), Progress()) as pool:
            fleet = fit_fleet(bundled_task("minilm-bbc", progress=Progress()), devices, budgets, root / "fleet-ray",
                              options, boards=pool, builds_ahead=None)
        return {"wall_s": round(time.perf_counter() - started, 1), "reused": fleet.reused,
                "devices": {m.device: {"structure": m.structure, "file_mb": round(m.file_bytes / 1e6, 2)}
                            for m in fleet.members}}
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
