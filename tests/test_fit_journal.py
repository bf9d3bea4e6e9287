"""The fit journal and work folder: a resume never deletes what it did not create, names the setting that changed,
goes on from the last good record of a damaged or cut journal, starts over when nothing was finished, and counts
the time of every session."""

import json
import os
import time
from pathlib import Path

import pytest

from edgeprune.cli import main
from edgeprune.errors import UserInputError
from edgeprune.search.journal import JOURNAL_NAME, Journal, prepare_out_dir, work_dir_for

SETTINGS = {"options": {"ffn_fractions": [0.0, 0.5], "recipes": ["int8"]}, "device": "host", "budget": {"max_mb": 5}}


def started_fit(tmp_path: Path) -> tuple[Path, Path, Journal]:
    out = tmp_path / "fit"
    work, created = prepare_out_dir(out)
    assert created and work == work_dir_for(out)
    journal = Journal(work / JOURNAL_NAME, SETTINGS, resume=False)
    journal.record_scores({"scores": [[1.0, 2.0]]})
    journal.record_candidate("dense", {"path": "dense-fp32.pte"})
    journal.record_proxy("h0-f0-l0", {"value": 0.9})
    journal.record_candidate("int8:h2-f0-l0", {"path": "candidate.pte"})
    (work / "candidate.pte").write_bytes(b"a finished candidate")
    return out, work, journal


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_resume_replays_every_finished_record(tmp_path):
    out, work, _ = started_fit(tmp_path)
    assert prepare_out_dir(out, resume=True) == (work, False)
    resumed = Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    assert resumed.scores == {"scores": [[1.0, 2.0]]}
    assert set(resumed.candidates) == {"dense", "int8:h2-f0-l0"}
    assert resumed.proxies == {"h0-f0-l0": {"value": 0.9}}
    assert resumed.session == 1 and resumed.damage is None


def test_a_changed_setting_is_refused_by_name_and_nothing_is_removed(tmp_path):
    out, work, _ = started_fit(tmp_path)
    before = listing(work)
    changed = {**SETTINGS, "options": {"ffn_fractions": [0.0], "recipes": ["int8"]}}
    with pytest.raises(UserInputError, match=r"options\.ffn_fractions was \[0\.0, 0\.5\], now \[0\.0\]") as error:
        Journal(work / JOURNAL_NAME, changed, resume=True)
    assert "budget" not in str(error.value) and "nothing was removed" in str(error.value)
    assert listing(work) == before


def test_a_cut_off_last_record_is_dropped_and_the_rest_resumes(tmp_path):
    _, work, _ = started_fit(tmp_path)
    with (work / JOURNAL_NAME).open("ab") as handle:  # killed while appending: half a line, no newline
        handle.write(b'{"candidate": "int8:h4-f0-l0", "artifact": {"pa')
    resumed = Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    assert set(resumed.candidates) == {"dense", "int8:h2-f0-l0"} and resumed.damage is None


def test_damage_in_the_middle_resumes_from_the_last_good_record_and_keeps_the_damaged_file(tmp_path):
    _, work, _ = started_fit(tmp_path)
    lines = (work / JOURNAL_NAME).read_bytes().split(b"\n")
    original = b"\n".join(lines)
    lines[3] = b"\xff\xfe not json"  # the proxy record
    (work / JOURNAL_NAME).write_bytes(b"\n".join(lines))
    resumed = Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    assert resumed.scores is not None and set(resumed.candidates) == {"dense"} and not resumed.proxies
    assert "line 4 is damaged" in resumed.damage and "resuming from the 2 records" in resumed.damage
    kept = list(work.parent.glob(f"{work.name}.damaged-journal-*.jsonl"))
    assert len(kept) == 1 and kept[0].read_bytes() != original and b"not json" in kept[0].read_bytes()
    again = Journal(work / JOURNAL_NAME, SETTINGS, resume=True)  # the rewritten journal resumes cleanly
    assert again.damage is None and set(again.candidates) == {"dense"}


@pytest.mark.parametrize("first_line", [b"{not json", b"[1, 2]", b'{"journal": 99, "settings": {}}'])
def test_a_damaged_first_line_is_refused_by_file_name_and_nothing_is_removed(tmp_path, first_line):
    _, work, _ = started_fit(tmp_path)
    lines = (work / JOURNAL_NAME).read_bytes().split(b"\n")
    (work / JOURNAL_NAME).write_bytes(b"\n".join([first_line, *lines[1:]]))
    before = listing(work)
    with pytest.raises(UserInputError, match=str(work / JOURNAL_NAME)):
        Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    assert listing(work) == before


@pytest.mark.parametrize("state", ["no journal", "header only"])
def test_a_fit_killed_before_its_first_record_resumes_from_the_beginning(tmp_path, state):
    out = tmp_path / "fit"
    work, _ = prepare_out_dir(out)
    if state == "header only":
        Journal(work / JOURNAL_NAME, SETTINGS, resume=False)
    assert prepare_out_dir(out, resume=True) == (work, False)
    resumed = Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    assert resumed.scores is None and not resumed.candidates and not resumed.has_work
    assert prepare_out_dir(out) == (work, False)  # a new fit may take over a folder that finished nothing


def test_elapsed_time_adds_up_over_sessions(tmp_path):
    _, work, journal = started_fit(tmp_path)
    time.sleep(0.2)
    journal.record_stop("interrupted")
    first = json.loads((work / JOURNAL_NAME).read_text().splitlines()[-1])["elapsed_s"]
    assert first >= 0.2
    second = Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    second.record_candidate("int8:h4-f0-l0", {"path": "x"})
    time.sleep(0.1)
    second.record_stop("interrupted")
    third = Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    assert third.session == 2 and third.elapsed_before_s >= first + 0.1
    assert third.elapsed_s() >= third.elapsed_before_s


def test_a_new_fit_over_interrupted_work_is_refused_and_keeps_it(tmp_path):
    out, work, _ = started_fit(tmp_path)
    before = listing(work)
    with pytest.raises(UserInputError, match=r"continue it with --resume"):
        prepare_out_dir(out)
    assert listing(work) == before


def test_an_older_journal_is_refused_and_kept(tmp_path):
    out = tmp_path / "fit"
    work = work_dir_for(out)
    work.mkdir()
    (work / "journal.json").write_text('{"fingerprint": "x", "candidates": {}}')
    with pytest.raises(UserInputError, match="older edgeprune"):
        Journal(work / JOURNAL_NAME, SETTINGS, resume=True)
    assert (work / "journal.json").is_file()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere; /proc is tested below")
def test_an_unwritable_parent_is_one_clean_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(UserInputError, match="cannot create"):
        prepare_out_dir(locked / "fit")


def test_an_output_folder_under_proc_is_exit_2(capsys):
    with pytest.raises(UserInputError, match="cannot create the output folder"):  # the API checks it too
        prepare_out_dir(Path("/proc/x/fit"))
    assert main(["fit", "--out", "/proc/x/fit", "--max-mb", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be written" in err[0]  # checked before the task is built


def test_fit_resume_with_a_changed_option_keeps_the_partial_through_the_cli(tiny_bert_dir, tmp_path, capsys):
    """The fit itself checks the journal before any heavy work, and the CLI reports it in one line."""
    out = tmp_path / "fit"
    work = work_dir_for(out)
    flags = ["--task", "minilm-bbc", "--model", str(tiny_bert_dir), "--max-length", "16", "--quiet",
             "--recipe", "int8", "--max-mb", "5"]
    work.mkdir()
    settings_of_another_fit = {"options": {"recipes": ["fp32"]}}
    journal = Journal(work / JOURNAL_NAME, settings_of_another_fit, resume=False)
    journal.record_candidate("dense", {"path": "dense-fp32.pte"})
    before = listing(work)
    assert main(["fit", *flags, "--resume", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot resume: this fit was started with other settings" in err[0]
    assert "options.recipes was" in err[0]
    assert listing(work) == before and not out.exists()
