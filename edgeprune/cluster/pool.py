"""A pool of boards on Ray: each board is an actor that benchmarks one artifact at a time on it, placed on the
node that reaches it; several boards of one profile share that profile's benchmarks; a board that stops answering
is marked down and its work goes to another board of the profile.

Why actors: a board runs one benchmark at a time (two at once throttle each other and spoil both figures), and a
Ray actor runs its calls one after another; a phone on USB is reachable only from the machine it is plugged into,
and a custom resource (`node_resource`) places its actor there. The artifact travels to the actor through Ray's
object store, so no node needs to see another's files.
"""

import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from edgeprune.bench.benchmark import BenchmarkResult, benchmark_on
from edgeprune.cluster.boards import Board
from edgeprune.devices.setup import device_python
from edgeprune.devices.transports import Transport, open_transport
from edgeprune.errors import DeviceUnreachableError
from edgeprune.progress import Progress


class BoardWorker:
    """What runs inside a board's actor: a connection to the board, opened on first use and reopened after a
    failure, and the benchmark."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.link: Transport | None = None

    def _transport(self) -> Transport:
        if self.link is None:
            self.link = open_transport(self.board.profile.endpoint, device_python(self.board.profile))
        return self.link

    def _reset(self) -> None:
        if self.link is not None:
            try:
                self.link.close()
            except Exception:  # noqa: BLE001 - the connection is already broken; closing is best effort
                pass
            self.link = None

    def ping(self) -> None:
        """Raise DeviceUnreachableError unless the board runs a command."""
        reason = self._transport().unreachable()
        if reason is not None:
            self._reset()
            raise DeviceUnreachableError(f"board {self.board.name}: {reason}")

    def benchmark(self, file_name: str, content: bytes, inputs: tuple[torch.Tensor, ...], runtime: str, warmup: int,
                  runs: int, min_seconds: float = 0.0) -> BenchmarkResult:
        profile = self.board.profile
        with tempfile.TemporaryDirectory(prefix="edgeprune-board-") as scratch:
            artifact = Path(scratch) / file_name
            artifact.write_bytes(content)
            try:
                result = benchmark_on(self._transport(), artifact, inputs, runtime, profile.threads, warmup, runs,
                                      device=profile.name, profile=profile, min_seconds=min_seconds)
            except DeviceUnreachableError:
                self._reset()
                raise
        result.board = self.board.name
        return result

    def close(self) -> None:
        self._reset()


class BoardPool:
    """The lab's boards as Ray actors (the process must be connected to Ray: `connect_ray`).

    `benchmark(profile, ...)` runs on the least busy live board of that profile; calls may come from several
    threads at once (a fleet's devices), each board still running one at a time.
    """

    def __init__(self, boards: list[Board], progress: Progress | None = None) -> None:
        import ray

        self.ray = ray
        self.boards = {board.name: board for board in boards}
        self.progress = progress or Progress(enabled=False)
        self.down: dict[str, str] = {}  # board → why it was marked down
        self.busy: Counter[str] = Counter()  # benchmarks each board is running or has queued
        self.lock = threading.Lock()
        self.actors: dict[str, Any] = {}
        remote = ray.remote(BoardWorker)
        for board in boards:
            options: dict[str, Any] = {"num_cpus": 0}  # waiting on a board takes no CPU of the node
            if board.node_resource:
                options["resources"] = {board.node_resource: 0.01}
            self.actors[board.name] = remote.options(**options).remote(board)

    def covers(self, profile: str) -> bool:
        return any(board.profile_name == profile for board in self.boards.values())

    def boards_of(self, profile: str) -> list[str]:
        return [name for name, board in self.boards.items() if board.profile_name == profile]

    def ping(self, profile: str) -> str | None:
        """None when some board of `profile` answers (those that do not are marked down); else why none does."""
        for name in self.boards_of(profile):
            if name in self.down:
                continue
            try:
                self.ray.get(self.actors[name].ping.remote())
                return None
            except Exception as error:  # noqa: BLE001 - an unreachable board or a dead actor: either way, down
                self._mark_down(name, error)
        return self._none_left(profile)

    def benchmark(self, profile: str, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str, warmup: int,
                  runs: int, min_seconds: float = 0.0) -> BenchmarkResult:
        """Benchmark `artifact` on a board of `profile`; another board of the profile when that one stops
        answering; DeviceUnreachableError when none is left."""
        content = self.ray.put(Path(artifact).read_bytes())  # once into the object store, whichever board runs it
        while True:
            name = self._pick(profile)
            try:
                return self.ray.get(self.actors[name].benchmark.remote(Path(artifact).name, content, inputs, runtime,
                                                                       warmup, runs, min_seconds))
            except Exception as error:
                if not _board_failure(error):
                    raise _cause(error) from None
                self._mark_down(name, error)
            finally:
                with self.lock:
                    self.busy[name] -= 1

    def _pick(self, profile: str) -> str:
        with self.lock:
            live = [name for name in self.boards_of(profile) if name not in self.down]
            if not live:
                raise DeviceUnreachableError(self._none_left(profile))
            # the least busy; among those the first listed, so a fit's figures come from one board while it answers
            name = min(live, key=lambda n: self.busy[n])
            self.busy[name] += 1
            return name

    def _mark_down(self, name: str, error: BaseException) -> None:
        reason = str(_cause(error)).splitlines()[0] if str(_cause(error)) else type(error).__name__
        with self.lock:
            self.down[name] = reason
        others = [n for n in self.boards_of(self.boards[name].profile_name) if n not in self.down]
        self.progress.warn(f"board {name} stopped answering ({reason}); marked down, "
                           + (f"its work goes to {', '.join(others)}" if others else "no other board of "
                              f"{self.boards[name].profile_name} is left"))

    def _none_left(self, profile: str) -> str:
        names = self.boards_of(profile)
        if not names:
            return f"no board of profile {profile} in the pool"
        return f"every board of {profile} is down: " + "; ".join(f"{n}: {self.down.get(n, '?')}" for n in names)

    def close(self) -> None:
        """Close every board's connection and end the actors."""
        for name, actor in self.actors.items():
            try:
                if name not in self.down:
                    self.ray.get(actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - closing is best effort: the actor is killed next anyway
                pass
            self.ray.kill(actor)
        self.actors = {}

    def __enter__(self) -> "BoardPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cause(error: BaseException) -> BaseException:
    """The exception the actor raised, out of Ray's wrapper."""
    return getattr(error, "cause", None) or error


def _board_failure(error: BaseException) -> bool:
    """Whether an error means the board (or its actor) is gone, rather than something wrong with the artifact."""
    from ray.exceptions import RayActorError

    return isinstance(error, RayActorError) or isinstance(_cause(error), DeviceUnreachableError)
