"""The fit loop on a small random BERT through the real ExecuTorch runtime: a killed fit resumes without redoing
finished work and never leaves an artifact that looks complete; a latency budget binds with a measured fix."""

import json
import math

import pytest

from edgeprune.cli import main
from edgeprune.progress import Progress
from edgeprune.search import Budget
from edgeprune.search.fit import FitOptions, fit
from edgeprune.search.journal import work_dir_for
from edgeprune.tasks import bundled_task
from tests.test_fit_integration import FAST, NO_RECOVERY

pytestmark = pytest.mark.integration


class Recorder(Progress):
    """Keeps every note; raises KeyboardInterrupt (as Ctrl-C would) at the first note containing `stop_at`."""

    def __init__(self, stop_at: str | None = None) -> None:
        super().__init__(enabled=False)
        self.notes: list[str] = []
        self.stop_at = stop_at

    def note(self, message: str) -> None:
        self.notes.append(message)
        if self.stop_at is not None and self.stop_at in message:
            raise KeyboardInterrupt


def test_an_interrupted_fit_resumes_from_its_last_finished_candidate(small_bert_dir, small_bert_int8_bytes, tmp_path):
    budget = Budget(max_mb=small_bert_int8_bytes(2) / 1e6)
    options = FitOptions(recipes=("int8",), scoring_examples=32, ffn_fractions=(0.0,), layer_removals=(0,),
                         trim_vocabulary=False, recover_steps=0)
    out = tmp_path / "fit"

    def task():
        return bundled_task("minilm-bbc", model_path=small_bert_dir, max_length=32, progress=Progress(enabled=False))

    interrupted = Recorder(stop_at="best so far")  # right after the first candidate that meets the budget
    with pytest.raises(KeyboardInterrupt):
        fit(task(), device="host", budget=budget, out=out, options=options, progress=interrupted)
    assert not out.exists()  # nothing that looks complete
    records = [json.loads(line) for line in (work_dir_for(out) / "journal.jsonl").read_text().splitlines()]
    candidates = {r["candidate"] for r in records if "candidate" in r}
    finished = sorted(candidates - {"dense"})
    assert "dense" in candidates and finished and any("scores" in r for r in records)
    assert records[-1]["stopped"] == "interrupted"

    resumed = Recorder()
    result = fit(task(), device="host", budget=budget, out=out, options=options, progress=resumed, resume=True)
    assert result.fits and (out / "model.pte").is_file()
    # the search went on where it stopped: never worse than what was finished before the interruption
    counts = {key: int(key.split(":")[1].split("-")[0][1:]) for key in finished}  # "int8:h4-f0-l0" → 4
    assert result.fitted.heads_removed <= min(counts.values())
    assert "head scores: finished before (resumed)" in resumed.notes
    for key, count in counts.items():
        assert f"candidate {key.split(':')[0]}, {count} heads removed: finished before (resumed)" in resumed.notes
    assert not any(n.startswith("dense baseline:") for n in resumed.notes)  # the baseline was not rebuilt
    assert not work_dir_for(out).exists() and not (out / "journal.jsonl").exists()
    assert result.elapsed_s > records[-1]["elapsed_s"]  # both sessions count
    with pytest.raises(Exception, match="nothing to resume"):
        fit(task(), device="host", budget=budget, out=out, options=options, progress=Recorder(), resume=True)


def test_a_fit_stopped_after_a_recovery_resumes_with_the_recovered_weights_not_distilling_again(
        small_bert_dir, small_bert_int8_bytes, tmp_path):
    budget = Budget(max_mb=small_bert_int8_bytes(2) / 1e6)
    options = FitOptions(recipes=("int8",), scoring_examples=32, ffn_fractions=(0.0,), layer_removals=(0,),
                         trim_vocabulary=False, recover_steps=6)
    out = tmp_path / "fit"

    def task():
        return bundled_task("minilm-bbc", model_path=small_bert_dir, max_length=32, progress=Progress(enabled=False))

    interrupted = Recorder(stop_at="the structure's bound from now on")  # right after the first recovery
    with pytest.raises(KeyboardInterrupt):
        fit(task(), device="host", budget=budget, out=out, options=options, progress=interrupted)
    recovered = next(n for n in interrupted.notes if "the structure's bound from now on" in n)
    structure = recovered.split("  recovered ")[1].split(" in ")[0]  # "4 heads removed"
    first_seconds = float(recovered.split(" in ")[1].split(" s:")[0])
    saved = list((work_dir_for(out) / "recovered").glob("*.pt"))
    assert len(saved) == 1, "the recovered weights are kept in the work folder for a resume"

    resumed = Recorder()
    result = fit(task(), device="host", budget=budget, out=out, options=options, progress=resumed, resume=True)
    assert result.fits
    assert f"  {structure}: recovered before (resumed)" in resumed.notes
    assert not any(n.startswith(f"  recovered {structure} in ") for n in resumed.notes)  # not distilled again
    assert result.recovery.structures >= 1 and result.recovery.seconds >= round(first_seconds) - 1
    assert not (out / "recovered").exists()  # kept for a resume only, not shipped


def test_a_fit_past_its_time_limit_ships_the_first_candidate_that_fits_and_says_what_was_left(
        small_bert_dir, small_bert_int8_bytes, tmp_path, capsys):
    out = tmp_path / "limited"
    # a limit passed before the search starts: the search builds until one candidate meets the budget, then stops
    code = main(["fit", *NO_RECOVERY, "--model", str(small_bert_dir), "--max-mb", str(small_bert_int8_bytes(2) / 1e6),
                 "--recipe", "int8", "--time-limit", "0.001", "--out", str(out), *FAST])
    printed = capsys.readouterr().out
    assert code == 0, printed
    result = json.loads((out / "result.json").read_text())
    built = [c for c in result["candidates"] if c["label"] != "dense baseline"]
    assert result["status"] == "fit"
    assert built[-1]["path"] == result["fitted"]["path"]  # the first candidate that fits ended the search
    assert all(c["file_bytes"] > small_bert_int8_bytes(2) for c in built[:-1])
    stopped = result["search_stopped_early"]
    assert stopped.startswith("the time limit (0.001 min) was reached, with ")
    unbuilt = [t for t in result["trials"] if t["note"].startswith("not built: the time limit")]
    assert f"with {len(unbuilt)} candidate" in stopped and all(t["file_bytes"] is None for t in unbuilt)
    assert f"(search stopped early: {stopped})" in printed
    assert f"(search stopped early: {stopped})" in (out / "report.md").read_text()


def test_a_latency_budget_nothing_meets_exits_3_with_the_measured_fix(small_bert_dir, tmp_path, capsys):
    out = tmp_path / "slow"
    code = main(["fit", *NO_RECOVERY, "--model", str(small_bert_dir), "--max-mb", "50", "--max-latency-ms", "0.001",
                 "--recipe", "int8", "--out", str(out), "--json", *FAST])
    result = json.loads(capsys.readouterr().out)
    assert code == 3 and result["status"] == "budget_not_met" and result["binding_budgets"] == ["latency p50"]
    measured = [c["benchmark"]["p50_ms"] for c in result["candidates"] if c["benchmark"]]
    # the least compressed, then (the latency model predicting everything between too slow) the most compressed
    assert len(measured) == 2 and result["fitted"]["label"] == "closest"
    suggested = math.ceil(round(min(measured) * 100, 6)) / 100  # rounded up: followed literally, it fits
    assert result["suggestions"] == [f"raise --max-latency-ms to {suggested} (the fastest candidate measured)"]
    assert suggested >= min(measured)
    assert (out / "report.html").is_file() and "latency p50" in (out / "report.md").read_text()
