"""Progress for people on stderr: the current stage, counts, elapsed time. Results go to stdout."""

import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sized
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Bar:
    progress: "Progress"
    label: str
    total: int
    done: int = 0
    last_print: float = 0.0

    def track(self, batches: Iterable[Mapping[str, Sized]]) -> Iterator[Mapping[str, Sized]]:
        """Pass batches through, advancing by each batch's size."""
        for batch in batches:
            yield batch
            self.advance(len(next(iter(batch.values()))))

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.progress.enabled and (now - self.last_print >= self.progress.interval_s or self.done >= self.total):
            self.last_print = now
            self.progress.write(f"  {self.label}: {self.done}/{self.total}")


@dataclass
class Progress:
    enabled: bool = True
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    interval_s: float = 5.0
    started: float = field(default_factory=time.monotonic)

    def write(self, message: str) -> None:
        if self.enabled:
            elapsed = time.monotonic() - self.started
            self.stream.write(f"[{int(elapsed // 60):02d}:{elapsed % 60:04.1f}] {message}\n")
            self.stream.flush()

    def note(self, message: str) -> None:
        self.write(message)

    def warn(self, message: str) -> None:
        """Always shown, even with progress off (--quiet): something the user must know about the result."""
        if self.enabled:
            self.note(f"WARNING: {message}")
        else:
            self.stream.write(f"edgeprune: warning: {message}\n")
            self.stream.flush()

    @contextmanager
    def task(self, label: str, total: int) -> Iterator[Bar]:
        self.write(f"{label} ({total})")
        bar = Bar(self, label, total, last_print=time.monotonic())
        started = time.monotonic()
        yield bar
        self.write(f"  {label}: done in {time.monotonic() - started:.1f} s")
