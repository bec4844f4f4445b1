"""Named constructors for the pieces people swap, in the style of MetaSchedule's `create(kind)`.

    MODELS = Registry("model")

    @MODELS.register("graphsage")
    class GraphSAGECostModel(nn.Module): ...

    MODELS.create("graphsage", hidden=64)     # an instance
    MODELS.names()                            # ("graphsage",) for choices and help texts

Adding a model, a loss, a BO surrogate or a tuner is one decorated definition in the module
that owns the registry, plus its test. An unknown name is a `UserError` that lists the known
ones.
"""

from __future__ import annotations

from typing import Any, Callable

from datagen.errors import UserError


class Registry:
    """Constructors of one kind of piece, by name (in registration order)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable:
        """Decorator: file `obj` (a class or function) under `name`."""
        def add(obj):
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj
        return add

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> Callable[..., Any]:
        """The constructor filed under `name`.

        Raises:
            UserError: no such name.
        """
        if name not in self._entries:
            raise UserError(f"unknown {self.kind} {name!r}; choose one of "
                            f"{', '.join(self._entries)}")
        return self._entries[name]

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the constructor filed under `name`."""
        return self.get(name)(*args, **kwargs)
