"""The latency model's error, measured: for every candidate a fit benchmarked on its device, the p50 the model
predicted just before the benchmark against the p50 measured (issue 16, item 5).

    .venv/bin/python benchmarks/latency_model_error.py runs/fit-*/result.json [--out benchmarks/results]

Reads finished fits (nothing runs, so nothing else needs to be idle); prints one row per fit and one for all of
them, with the basis each prediction rested on (a line fitted to two or more measurements of the recipe, one
measurement, another recipe's, the profile's roofline) and the benchmark threads. Estimated benchmarks (an
unreachable board) are left out. nn-Meter's published claim, for comparison: 99 % within ±10 % on its devices.
"""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from edgeprune.search.latency import prediction_error
from edgeprune.search.result import FitResult
from edgeprune.serialization import to_jsonable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="result.json files of finished fits")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    rows, pairs, bases = [], [], Counter()
    for path in args.results:
        result = FitResult.load(path)
        measured = [c for c in result.candidates if c.benchmark is not None and c.benchmark.measured
                    and c.predicted_latency_ms is not None]
        fitted = [c for c in measured if c.latency_basis == "fitted"]
        pairs += [(c.predicted_latency_ms, c.benchmark.p50_ms, c.latency_basis) for c in measured]
        bases.update(c.latency_basis for c in measured)
        threads = sorted({c.benchmark.threads for c in measured})
        rows.append({"result": str(path), "device": result.device, "threads": threads,
                     "all": to_jsonable(result.latency_model_error()),
                     "after_calibration": to_jsonable(prediction_error(
                         (c.predicted_latency_ms, c.benchmark.p50_ms) for c in fitted))})
    overall = prediction_error((p, m) for p, m, _ in pairs)
    calibrated = prediction_error((p, m) for p, m, basis in pairs if basis == "fitted")
    print("| fit | device | threads | predictions | within ±10 % | median error | p90 error | "
          "within ±10 % once fitted |")
    print("|---|---|---|---|---|---|---|---|")

    def cells(error: dict) -> list[str]:
        if not error["count"]:
            return ["0", "—", "—", "—"]
        return [str(error["count"]), f"{error['within_10_percent']:.0%}", f"{error['median_abs_percent']:.1f} %",
                f"{error['p90_abs_percent']:.1f} %"]

    for row in rows:
        after = row["after_calibration"]
        print("| " + " | ".join([Path(row["result"]).parent.name, row["device"], str(row["threads"]),
                                 *cells(row["all"]), f"{after['within_10_percent']:.0%} of {after['count']}"
                                 if after["count"] else "—"]) + " |")
    print("| all | | | " + " | ".join([*cells(to_jsonable(overall)), f"{calibrated.within_10_percent:.0%} of "
                                        f"{calibrated.count}" if calibrated.count else "—"]) + " |")
    print(f"predictions by basis: {dict(bases)}")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"fits": rows, "all": to_jsonable(overall), "after_calibration": to_jsonable(calibrated),
              "by_basis": dict(bases)}
    (args.out / "latency_model_error.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out / 'latency_model_error.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
