"""The fit's work folder and its journal: what an interrupted fit has finished, so `--resume` goes on from there.

The journal is a JSON-lines file, appended one record at a time and fsynced, so a fit killed at any moment
leaves every finished record intact and at most one cut-off last line (ignored on resume). Its first line
records the settings the fit was started with; a resume with other settings names the setting that
differs and changes nothing. A resume never deletes what it did not create itself: a journal damaged in
the middle is set aside (renamed, not removed) and the fit resumes from the last good record before the
damage.
"""

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgeprune.errors import DiskFullError, UserInputError
from edgeprune.serialization import write_text_atomic

JOURNAL_NAME = "journal.jsonl"
LEGACY_JOURNAL_NAME = "journal.json"  # the single-object journal of edgeprune before format 1
FORMAT_VERSION = 2  # 2: candidates carry a StructurePlan and a Recipe (result format 2)
WORK_KEYS = {"scores", "candidate", "proxy"}  # records of finished work (others only keep time)


def work_dir_for(out: Path) -> Path:
    """The hidden sibling a fit works in; renamed to `out` only when the fit is complete."""
    return out.parent / f".{out.name}.partial"


def prepare_out_dir(out: Path, resume: bool = False) -> tuple[Path, bool]:
    """The work folder for a fit into `out`, and whether this call created it.

    Refuses a non-empty `out`, a place that cannot be written, a resume with nothing to resume, and a new
    fit over an interrupted one that holds finished work (which only `--resume` or the user may remove).
    """
    work = work_dir_for(out)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {out} is a file; name a folder to write to")
    if out.exists() and any(out.iterdir()):
        if resume and (out / "result.json").exists():
            raise UserInputError(f"{out} holds a finished fit (result.json); nothing to resume")
        raise UserInputError(f"output folder {out} already exists and is not empty; choose another --out")
    if resume:
        if not work.is_dir():
            raise UserInputError(f"nothing to resume for {out}: no interrupted fit in {work}")
        return work, False
    if work.is_dir():
        if Journal.finished_records(work) > 0:
            raise UserInputError(f"an interrupted fit into {out} is kept in {work}: continue it with --resume {out}, "
                                 "or remove that folder to start over")
        return work, False  # an interrupted fit that finished nothing: start it again in place
    try:
        work.mkdir(parents=True)
    except OSError as error:
        raise UserInputError(f"cannot create the output folder next to {out}: {error.strerror or error}") from None
    return work, True


class Journal:
    """Finished work of one fit (head scores, PyTorch estimates, candidates), appended record by record.

    `settings` identifies the fit (model, data, options, budget, device); a resume must match it. Each record
    also carries the session it was written in and that session's elapsed seconds, so the time of every
    session of the fit adds up (`elapsed_before_s`).
    """

    def __init__(self, path: Path, settings: dict[str, Any], resume: bool) -> None:
        self.path = path
        self.settings = json.loads(json.dumps(settings, sort_keys=True))  # exactly what JSON gives back
        self.scores: dict[str, Any] | None = None
        self.candidates: dict[str, dict[str, Any]] = {}
        self.proxies: dict[str, dict[str, Any]] = {}
        self.session = 0
        self.elapsed_before_s = 0.0
        self.started = time.perf_counter()
        self.damage: str | None = None  # what was wrong with the journal resumed from, if anything
        if resume:
            self._refuse_legacy()
        records = list(self._read()) if resume and path.is_file() else []
        if records:
            self._check_settings(records[0])
            self._replay(records[1:])
        else:
            write_text_atomic(path, json.dumps({"journal": FORMAT_VERSION, "settings": self.settings}) + "\n")

    @staticmethod
    def finished_records(work: Path) -> int:
        """How many records of finished work the journal in `work` holds (0: none, or no journal)."""
        path = work / JOURNAL_NAME
        if (work / LEGACY_JOURNAL_NAME).is_file():
            return 1
        if not path.is_file():
            return 0
        count = 0
        with path.open("rb") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                count += isinstance(record, dict) and bool(WORK_KEYS & set(record))
        return count

    @property
    def has_work(self) -> bool:
        return bool(self.scores is not None or self.candidates or self.proxies)

    # reading ---------------------------------------------------------------------------------------------------

    def _refuse_legacy(self) -> None:
        legacy = self.path.parent / LEGACY_JOURNAL_NAME
        if legacy.is_file() and not self.path.is_file():
            raise UserInputError(f"{legacy} was written by an older edgeprune whose journal this one cannot resume; "
                                 f"start a new fit (the folder {self.path.parent} is left as it is)")

    def _read(self) -> Iterator[dict[str, Any]]:
        """The good records, in order. A cut-off last line (a fit killed while appending) is dropped; a bad line
        before the end is damage: the journal is set aside and rewritten with the records before it."""
        try:
            raw = self.path.read_bytes()
        except OSError as error:
            raise UserInputError(f"cannot read the journal {self.path}: {error.strerror or error}") from None
        lines = raw.split(b"\n")
        good: list[dict[str, Any]] = []
        for index, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode())
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except (UnicodeDecodeError, ValueError) as error:
                last = all(not rest.strip() for rest in lines[index + 1:])
                if index == 0:
                    raise UserInputError(f"the journal {self.path} is damaged on its first line ({error}); it cannot "
                                         "be resumed: start a new fit (nothing was removed)") from None
                if not (last and not raw.endswith(b"\n")):  # anything but a cut-off last line is damage
                    self._set_aside(good, f"line {index + 1} is damaged ({type(error).__name__})")
                break
            good.append(record)
        return iter(good)

    def _set_aside(self, good: list[dict[str, Any]], reason: str) -> None:
        # beside the work folder, not in it: the finished output folder must not carry it
        work = self.path.parent
        kept = work.with_name(f"{work.name}.damaged-journal-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        os.replace(self.path, kept)
        write_text_atomic(self.path, "".join(json.dumps(record) + "\n" for record in good))
        self.damage = (f"the journal {self.path} was damaged ({reason}); resuming from the {len(good) - 1} records "
                       f"before it (the damaged file is kept as {kept})")

    def _check_settings(self, header: dict[str, Any]) -> None:
        if header.get("journal") != FORMAT_VERSION or not isinstance(header.get("settings"), dict):
            raise UserInputError(f"{self.path} is not a journal this edgeprune can resume (format "
                                 f"{header.get('journal')!r}, expected {FORMAT_VERSION}); start a new fit "
                                 "(nothing was removed)")
        differences = describe_differences(header["settings"], self.settings)
        if differences:
            raise UserInputError(f"cannot resume: this fit was started with other settings ({'; '.join(differences)})"
                                 f"; resume with the same ones, or start a new fit (nothing was removed from "
                                 f"{self.path.parent})")

    def _replay(self, records: list[dict[str, Any]]) -> None:
        sessions: dict[int, float] = {}
        for record in records:
            session = int(record.get("session", 0))
            sessions[session] = max(sessions.get(session, 0.0), float(record.get("elapsed_s", 0.0)))
            if "scores" in record:
                self.scores = record["scores"]
            elif "candidate" in record:
                self.candidates[record["candidate"]] = record["artifact"]
            elif "proxy" in record:
                self.proxies[record["proxy"]] = record["quality"]
        self.session = max(sessions, default=-1) + 1
        self.elapsed_before_s = sum(sessions.values())

    # writing ---------------------------------------------------------------------------------------------------

    def elapsed_s(self) -> float:
        """Seconds spent on this fit in every session so far, this one included."""
        return self.elapsed_before_s + time.perf_counter() - self.started

    def append(self, **record: Any) -> None:
        """One record, on its own line, flushed to disk before returning."""
        record.update(session=self.session, elapsed_s=round(time.perf_counter() - self.started, 3))
        line = (json.dumps(record) + "\n").encode()
        # unbuffered, so that a write the disk has no room for fails here and not again when the file closes
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        whole = os.lseek(fd, 0, os.SEEK_END)
        try:
            rest = memoryview(line)
            while rest:
                rest = rest[os.write(fd, rest):]
            os.fsync(fd)
        except OSError as error:  # a full disk: no half record may stay for the next one to follow
            os.ftruncate(fd, whole)
            if DiskFullError.is_disk_full(error):
                raise DiskFullError(self.path, len(line)) from error
            raise
        finally:
            os.close(fd)

    def record_scores(self, scores: dict[str, Any]) -> None:
        self.scores = scores
        self.append(scores=scores)

    def record_candidate(self, key: str, artifact: dict[str, Any]) -> None:
        self.candidates[key] = artifact
        self.append(candidate=key, artifact=artifact)

    def record_proxy(self, key: str, quality: dict[str, Any]) -> None:
        self.proxies[key] = quality
        self.append(proxy=key, quality=quality)

    def record_stop(self, reason: str) -> None:
        """The moment a session stopped (Ctrl-C or an error), so its time counts when the fit resumes. Best effort:
        on a full disk this record is what is lost (the finished work before it is whole)."""
        try:
            self.append(stopped=reason)
        except OSError:
            pass


def describe_differences(before: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """'options.ffn_fractions was [0.0, 0.5], now [0.0]' for every leaf that differs."""
    differences = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key), now.get(key)
        name = f"{prefix}{key}"
        if isinstance(old, dict) and isinstance(new, dict):
            differences += describe_differences(old, new, f"{name}.")
        elif old != new:
            differences.append(f"{name} was {_short(old)}, now {_short(new)}")
    return differences


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
