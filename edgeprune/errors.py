"""Errors that the CLI turns into one clean line and a distinct exit code."""

import errno
import os


class EdgepruneError(Exception):
    """Base class for errors edgeprune reports to users."""

    exit_code = 1


class UserInputError(EdgepruneError, ValueError):
    """Bad input from the user: a flag, a path, a profile. Exit code 2."""

    exit_code = 2


class BudgetNotMetError(EdgepruneError):
    """No candidate met the budget; carries the closest result. Exit code 3."""

    exit_code = 3

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class VerificationError(EdgepruneError):
    """An exported artifact disagreed with its PyTorch source beyond the recipe's tolerance."""

    exit_code = 4


class DeviceUnreachableError(EdgepruneError):
    """A device could not be reached, refused its host key, or dropped the connection twice. Exit code 5."""

    exit_code = 5


class Interrupted(KeyboardInterrupt, EdgepruneError):
    """Ctrl-C during long work, with where the finished part was kept. Exit code 130 (128 + SIGINT).

    Still a KeyboardInterrupt, so Python callers that stop on Ctrl-C keep doing so."""

    exit_code = 130


class DiskFullError(EdgepruneError, OSError):
    """A write that the disk (or the user's quota) has no room for. Exit code 2: the user frees space and runs again
    (`edgeprune fit --resume` continues a fit where it stopped); whatever was written before is kept whole.

    Still an OSError (ENOSPC), so callers that handle a full disk as the OS reports it keep doing so."""

    exit_code = 2

    def __init__(self, path: "str | os.PathLike[str] | None", needed_bytes: int | None = None) -> None:
        self.path = None if path is None else str(path)
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes_near(self.path)
        needed = size_text(needed_bytes) if needed_bytes else "more room"
        free = f", {size_text(self.free_bytes)} free there" if self.free_bytes is not None else ""
        where = f"to write {self.path}" if self.path else "on the disk"
        super().__init__(errno.ENOSPC, f"no space left {where} (it needed {needed}{free}); free some space "
                                       "and run the command again")

    def __str__(self) -> str:
        return str(self.strerror)

    @classmethod
    def is_disk_full(cls, error: BaseException) -> bool:
        """True for the OS's own 'no space left on device' and 'disk quota exceeded'."""
        return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def free_bytes_near(path: "str | None") -> int | None:
    """Free bytes on the filesystem holding `path` (or its nearest existing parent); None when unknown."""
    if path is None:
        return None
    import shutil
    from pathlib import Path

    place = Path(path)
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        return shutil.disk_usage(place).free
    except OSError:
        return None


def size_text(size: int | None) -> str:
    """Bytes as a person reads them: 512 B, 3.4 kB, 12.0 MB, 1.20 GB."""
    if size is None:
        return "?"
    if size < 1000:
        return f"{size} B"
    for unit, scale in (("kB", 1e3), ("MB", 1e6)):
        if size < scale * 1000:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 1e9:.2f} GB"
