"""edgeprune's cache folder (`EDGEPRUNE_CACHE`, default ~/.cache/edgeprune): entries that check themselves.

Every file edgeprune keeps there (exports, teachers, head scores, wheels for boards) is written whole — to a
temporary file in its folder, then renamed over its name — with a record beside it, `.NAME.record.json`: its size,
its sha256 and the versions that produced it. A read that does not match its record (what a full disk, a killed copy
or a hand edit leaves) is one warning naming the entry, the entry is removed and its caller builds it again; the
work goes on. Two processes filling one entry at once (two fits of one model, a fleet and a fit) each write whole
files and rename them under a lock on the entry, so one of them wins whole and neither fails.

`edgeprune cache` lists the entries with their sizes, `--verify` checks every record, `--clear` empties it.
"""

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from edgeprune.serialization import write_bytes_atomic

RECORD_SUFFIX = ".record.json"
LOCK_SUFFIX = ".lock"
TEMPORARY_SUFFIX = ".tmp"  # write_bytes_atomic's temporary files: `.NAME.XXXX.tmp`
OUTDATED = "written by"  # how a problem of versions, not bytes, begins
STALE_TEMPORARY_S = 3600  # a temporary file this old belongs to a writer that was killed: --verify removes it
RECORDED_KINDS = ("exports", "teachers", "scores", "wheels")  # the folders whose files carry records


def cache_root() -> Path:
    """The cache folder: $EDGEPRUNE_CACHE, else ~/.cache/edgeprune."""
    return Path(os.environ.get("EDGEPRUNE_CACHE", Path.home() / ".cache" / "edgeprune"))


def record_path(path: Path) -> Path:
    """Where the record of the entry at `path` lives: `.NAME.record.json` beside it."""
    return path.with_name(f".{path.name}{RECORD_SUFFIX}")


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{LOCK_SUFFIX}")


def producing_versions(packages: Sequence[str] = ()) -> dict[str, str]:
    """edgeprune's, Python's and `packages`' versions (those installed here), for an entry's record."""
    versions = {"edgeprune": _version("edgeprune") or "unknown", "python": sys.version.split()[0]}
    for package in packages:
        found = _version(package)
        if found is not None:
            versions[package] = found
    return versions


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@contextmanager
def entry_lock(path: Path) -> Iterator[None]:
    """Hold the entry's lock (an flock on `.NAME.lock` beside it): its file and record change together."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(path), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def write_entry(path: Path, data: bytes, producers: Sequence[str] = ()) -> None:
    """Put `data` in the cache at `path` with its record (size, sha256, versions of edgeprune and `producers`).

    Both are written whole beside their names and renamed under the entry's lock; a write that fails (a full
    disk) leaves neither half of a file nor a record of one."""
    path = Path(path)
    record = record_of(data, producers)
    with entry_lock(path):
        replaced = False
        try:
            write_bytes_atomic(path, data)
            replaced = True
            write_bytes_atomic(record_path(path), record)
        except BaseException:
            if replaced:  # the new bytes under the old record: neither may stay
                _remove(path)
            raise


def record_file(path: Path, producers: Sequence[str] = ()) -> None:
    """Record a file that something else wrote whole into the cache (pip's wheels), so later reads can check it."""
    path = Path(path)
    with entry_lock(path):
        write_bytes_atomic(record_path(path), record_of(path.read_bytes(), producers))


def record_of(data: bytes, producers: Sequence[str] = ()) -> bytes:
    """The record of an entry holding `data`, as its file holds it (JSON)."""
    record = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "versions": producing_versions(producers),
              "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return (json.dumps(record, indent=2) + "\n").encode()


def read_entry(path: Path, warn: Callable[[str], None] | None = None, producers: Sequence[str] = ()) -> bytes | None:
    """The entry's bytes when it is whole; None when there is none, or when it does not match its record: then it
    is removed, with one warning naming it (`warn` takes the message; default: stderr), and the caller builds it
    again. An entry that `producers` (package names) made at other versions than this environment's is rebuilt
    as well, with a warning that says so."""
    path = Path(path)
    if not path.exists():
        return None
    data, problem = _checked(path, producers)
    if problem is None:
        return data
    with entry_lock(path):  # another process may be replacing it right now: look again while it cannot
        if not path.exists():
            return None
        data, problem = _checked(path, producers)
        if problem is None:
            return data
        discard(path, problem, warn)
    return None


def discard(path: Path, problem: str, warn: Callable[[str], None] | None = None) -> None:
    """Remove a damaged (or outdated) entry and its record, saying so in one line: the caller rebuilds it."""
    _remove(Path(path))
    state = "outdated" if problem.startswith(OUTDATED) else "damaged"
    message = f"{state} cache entry {path}: rebuilt ({problem})"
    if warn is not None:
        warn(message)
    else:
        sys.stderr.write(f"edgeprune: warning: {message}\n")
        sys.stderr.flush()


def entry_problem(path: Path) -> str | None:
    """What is wrong with the entry at `path` (None: it matches its record)."""
    return _checked(Path(path))[1]


def _checked(path: Path, producers: Sequence[str] = ()) -> tuple[bytes, str | None]:
    try:
        record = json.loads(record_path(path).read_text())
        size, digest, versions = int(record["size"]), str(record["sha256"]), dict(record["versions"])
    except FileNotFoundError:
        return b"", "it has no record: an older edgeprune wrote it, or its writer was stopped"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return b"", f"its record cannot be read: {type(error).__name__}"
    try:
        data = path.read_bytes()
    except OSError as error:
        return b"", f"it cannot be read: {error.strerror or error}"
    if len(data) != size:
        return data, f"it holds {len(data)} of its {size} bytes"
    if hashlib.sha256(data).hexdigest() != digest:
        return data, "its sha256 differs from its record's"
    here = producing_versions(producers)
    changed = [f"{package} {versions.get(package, '?')}, this is {here[package]}" for package in producers
               if package in here and versions.get(package) != here[package]]
    if changed:
        return data, f"{OUTDATED} {'; '.join(changed)}"
    return data, None


def _remove(path: Path) -> None:
    for item in (path, record_path(path)):
        item.unlink(missing_ok=True)


@dataclass(frozen=True)
class CacheEntry:
    """One thing the cache holds: a recorded file (exports, teachers, scores, wheels) or a folder edgeprune builds whole
    (the emulated board's root), with its size."""

    path: Path
    kind: str  # the top-level folder it is in: exports, teachers, scores, wheels, boards, ...
    size_bytes: int
    recorded: bool  # it carries a record that --verify checks
    versions: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "kind": self.kind, "size_bytes": self.size_bytes, "recorded": self.recorded,
                "versions": self.versions}


def list_entries(root: Path | None = None) -> list[CacheEntry]:
    """What the cache holds, by kind then name; records, locks and temporary files are not entries."""
    root = cache_root() if root is None else Path(root)
    if not root.is_dir():
        return []
    entries = []
    for top in sorted(root.iterdir()):
        if top.name.startswith("."):
            continue
        if not top.is_dir():
            entries.append(CacheEntry(top, "", top.stat().st_size, False, {}))
            continue
        for item in sorted(top.iterdir()):
            if item.name.startswith("."):
                continue
            recorded = item.is_file() and record_path(item).exists()
            versions = _versions_of(item) if recorded else {}
            entries.append(CacheEntry(item, top.name, _size(item), recorded, versions))
    return entries


def _versions_of(path: Path) -> dict[str, str]:
    try:
        return dict(json.loads(record_path(path).read_text()).get("versions", {}))
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:  # gone meanwhile
                pass
    return total


def verify_cache(root: Path | None = None) -> list[tuple[Path, str]]:
    """Check every recorded entry against its record; remove those that do not match (they are rebuilt when next
    needed) and the temporary files of killed writers. Returns what was removed and why."""
    root = cache_root() if root is None else Path(root)
    removed: list[tuple[Path, str]] = []
    for kind in RECORDED_KINDS:
        folder = root / kind
        if not folder.is_dir():
            continue
        for item in sorted(folder.iterdir()):
            if item.name.endswith(TEMPORARY_SUFFIX) and time.time() - item.stat().st_mtime > STALE_TEMPORARY_S:
                item.unlink(missing_ok=True)
                removed.append((item, "a temporary file of a writer that did not finish"))
            if item.name.startswith(".") or not item.is_file():
                continue
            with entry_lock(item):
                problem = entry_problem(item) if item.exists() else None
                if problem is not None:
                    _remove(item)
                    removed.append((item, problem))
    return removed


def clear_cache(root: Path | None = None) -> int:
    """Remove the entries edgeprune rebuilds by itself: exports, teachers, head scores and wheels (a folder of them
    linked in from elsewhere keeps its link and loses its files). What else is there stays — the emulated board's
    root and state (`python -m edgeprune.devices.emulated_board`), anything not edgeprune's. Returns the bytes freed."""
    root = cache_root() if root is None else Path(root)
    freed = 0
    for kind in RECORDED_KINDS:
        folder = root / kind
        if not folder.is_dir():
            continue
        for item in folder.iterdir():
            freed += _size(item)
            if item.is_dir() and not item.is_symlink():
                shutil.rmtree(item)
            else:
                item.unlink(missing_ok=True)
    return freed
