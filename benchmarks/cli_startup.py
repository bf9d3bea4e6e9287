"""How long the command line takes to start: `edgeprune --version` (and `--help`, `devices list`) against
`python -c pass`, the interpreter's own start, timed in the same run, interleaved.

    .venv/bin/python benchmarks/cli_startup.py [--repeats 15] [--out benchmarks/results]

Each command runs `--repeats` times in a fresh process, the commands alternating so that the machine's drift
touches each alike; the table gives the fastest and the median wall time and the ratio of each median to
`python -c pass`'s (the target for `--version`: at most 3x). Writes cli_startup.json.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_RATIO = 3.0  # issue 32: `edgeprune --version` within 3x of `python -c pass`


def commands() -> dict[str, list[str]]:
    script = shutil.which("edgeprune", path=str(Path(sys.executable).parent))
    edgeprune = [script] if script else [sys.executable, "-m", "edgeprune"]
    return {"python -c pass": [sys.executable, "-c", "pass"],
            "edgeprune --version": [*edgeprune, "--version"],
            "edgeprune --help": [*edgeprune, "--help"],
            "edgeprune devices list": [*edgeprune, "devices", "list"]}


def wall_seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(repeats: int) -> dict[str, list[float]]:
    timed = commands()
    for argv in timed.values():  # once each first: the file system's caches warm, for every command alike
        wall_seconds(argv)
    seconds: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(repeats):
        for name, argv in timed.items():
            seconds[name].append(wall_seconds(argv))
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15, help="fresh processes per command")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    seconds = measure(args.repeats)
    baseline = statistics.median(seconds["python -c pass"])
    rows = {name: {"min_ms": round(min(values) * 1e3, 1), "median_ms": round(statistics.median(values) * 1e3, 1),
                   "ratio": round(statistics.median(values) / baseline, 2), "seconds": values}
            for name, values in seconds.items()}
    print(f"{'command':<26}{'min ms':>9}{'median ms':>11}{'x python':>10}")
    for name, row in rows.items():
        print(f"{name:<26}{row['min_ms']:>9.1f}{row['median_ms']:>11.1f}{row['ratio']:>10.2f}")
    ratio = rows["edgeprune --version"]["ratio"]
    met = ratio <= TARGET_RATIO
    print(f"edgeprune --version: {ratio:.2f}x python -c pass (target <= {TARGET_RATIO:g}x: "
          f"{'met' if met else 'NOT met'})")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "cli_startup.json"
    path.write_text(json.dumps({"python": sys.version.split()[0], "repeats": args.repeats,
                                "target_ratio": TARGET_RATIO, "version_ratio": ratio, "target_met": met,
                                "commands": rows}, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
