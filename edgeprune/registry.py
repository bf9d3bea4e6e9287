"""A name → member registry shared by every family of parts (adapters, criteria, recipes, ...)."""

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from edgeprune.errors import UserInputError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._members: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(member: T) -> T:
            if name in self._members:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._members[name] = member
            return member

        return add

    def get(self, name: str) -> T:
        try:
            return self._members[name]
        except KeyError:
            raise UserInputError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(sorted(self._members))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._members)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._members
