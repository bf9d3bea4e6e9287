"""Progress for people on stderr: the current stage, counts, elapsed time. Results go to stdout.

On a terminal a counted stage (the teacher's pass, scoring, distillation, evaluation) is a bar with its rate and
ETA (tqdm); anywhere else (a log file, CI, a pipe) every message is a plain line stamped with the time since the
start, a counted stage one line every `interval_s`. `--quiet` turns progress off (errors, and warnings about the
result, still show); `quiet_third_party` hides what the libraries underneath print unless `--verbose`.
"""

import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sized
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class Verbosity:
    """How chatty the command line is: set once by the CLI from --quiet and --verbose."""

    quiet: bool = False
    verbose: bool = False


VERBOSITY = Verbosity()
# the libraries whose logging and warnings are noise to an edgeprune user: load reports, optional kernels not found
NOISY_LIBRARIES = ("transformers", "torchao", "torch", "executorch", "huggingface_hub", "sentence_transformers",
                   "datasets", "absl", "tensorflow", "litert_torch", "ai_edge_litert", "ai_edge_torch", "jax", "ray")


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or a bare file-like stream
        return False


def terminal_width(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


@dataclass
class Bar:
    progress: "Progress"
    label: str
    total: int
    done: int = 0
    last_print: float = 0.0
    drawn: Any = None  # the tqdm bar on a terminal; None when progress is written as lines

    def track(self, batches: Iterable[Mapping[str, Sized]]) -> Iterator[Mapping[str, Sized]]:
        """Pass batches through, advancing by each batch's size."""
        for batch in batches:
            yield batch
            self.advance(len(next(iter(batch.values()))))

    def advance(self, count: int = 1) -> None:
        self.done += count
        if self.drawn is not None:
            self.drawn.update(count)
            return
        now = time.monotonic()
        if self.progress.enabled and (now - self.last_print >= self.progress.interval_s or self.done >= self.total):
            self.last_print = now
            self.progress.write(f"  {self.label}: {self.done}/{self.total}")


@dataclass
class Progress:
    enabled: bool = field(default_factory=lambda: not VERBOSITY.quiet)
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    interval_s: float = 5.0
    started: float = field(default_factory=time.monotonic)
    bars: bool | None = None  # None: bars when the stream is a terminal

    @property
    def draws_bars(self) -> bool:
        return self.enabled and (is_terminal(self.stream) if self.bars is None else self.bars)

    def write(self, message: str) -> None:
        if not self.enabled:
            return
        line = f"[{stamp(time.monotonic() - self.started)}] {message}"
        if self.draws_bars:
            from tqdm import tqdm

            tqdm.write(line, file=self.stream)  # above the bar being drawn, not through it
        else:
            self.stream.write(line + "\n")
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
        started = time.monotonic()
        if self.draws_bars:
            from tqdm import tqdm

            sized = terminal_width(self.stream) > 0  # a terminal that reports no size gets a fixed one: tqdm
            with tqdm(total=total, desc=label, file=self.stream, dynamic_ncols=sized,  # draws no bar in 0 rows
                      ncols=None if sized else 100, nrows=None if sized else 24, mininterval=0.5,
                      bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                 "[{elapsed}<{remaining} ETA, {rate_fmt}]") as drawn:
                yield Bar(self, label, total, drawn=drawn)
        else:
            self.write(f"{label} ({total})")
            yield Bar(self, label, total, last_print=time.monotonic())
        self.write(f"  {label}: done in {time.monotonic() - started:.1f} s")


def quiet_third_party(verbose: bool = False) -> None:
    """Hide the libraries' own chatter (load reports, optional kernels not found, their progress bars and
    warnings) unless `verbose`; their errors still surface as edgeprune's one-line errors."""
    if verbose:
        return
    import logging

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # also transformers' own bars
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read when transformers is imported
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GLOG_minloglevel", "3")
    os.environ.setdefault("TORCH_LOGS", "-all")  # read when torch is imported, which resets its loggers' levels
    for name in NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="|".join(rf"{name}(\.|$)" for name in NOISY_LIBRARIES))
    if "transformers" in sys.modules:
        silence_transformers()


@contextmanager
def library_output_hidden() -> Iterator[None]:
    """What native code prints while it runs — ExecuTorch's cpuinfo probes when a program loads, the LiteRT
    converter's stage lines, TensorFlow's C++ log, warnings raised from deep inside — kept out of the user's
    terminal unless `--verbose`; replayed to stderr if the block fails, so an error keeps its context.

    The writes go straight to file descriptors 1 and 2 from C++, past Python's `sys.stderr`, so the descriptors
    themselves are pointed at a temporary file for the block (wurlitzer). Keep the block around the library call
    alone: edgeprune's own progress written inside it would be hidden too."""
    if VERBOSITY.verbose or sys.__stderr__ is None or sys.__stdout__ is None:
        yield
        return
    import tempfile

    from wurlitzer import pipes

    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as sink:
        try:
            with pipes(stdout=sink, stderr=sink):
                yield
        except BaseException:
            sink.seek(0)
            said = sink.read()
            if said.strip():  # its last 4,000 characters: where the library said what went wrong
                sys.stderr.write(said[-4000:].rstrip("\n") + "\n")
            raise


def silence_transformers() -> None:
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()


def stamp(elapsed_s: float) -> str:
    """A progress line's time, minutes and seconds to a tenth: "03:59.9"; rounded before it is split, so that
    239.96 s reads "04:00.0", not "03:60.0"."""
    tenths = round(elapsed_s * 10)
    return f"{tenths // 600:02d}:{tenths % 600 / 10:04.1f}"


def elapsed_text(started: float) -> str:
    """Minutes and seconds since `started` (a `time.perf_counter()` reading): "3m07s"."""
    seconds = int(time.perf_counter() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"
