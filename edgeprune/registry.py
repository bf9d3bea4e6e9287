"""A name → member registry shared by every family of parts (adapters, criteria, recipes, ...).

A registry made with `plugins=GROUP` imports, when it is first read, the modules of that entry-point group
(edgeprune.plugins): the runtimes, transports and model families of every installed package, edgeprune's own among
them, each registering itself as it is imported."""

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from edgeprune.errors import UserInputError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, plugins: str | None = None) -> None:
        self.kind = kind
        self.plugins = plugins  # the entry-point group whose modules register members, loaded on first read
        self._members: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(member: T) -> T:
            if name in self._members:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._members[name] = member
            return member

        return add

    @property
    def members(self) -> dict[str, T]:
        if self.plugins:
            from edgeprune.plugins import load_plugins  # here: the plugins import modules that import this one

            load_plugins(self.plugins)
        return self._members

    def get(self, name: str) -> T:
        try:
            return self.members[name]
        except KeyError:
            raise UserInputError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(sorted(self.members))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self.members)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self.members
