"""A thread's own view of a shared mapping (the per-thread tensor store and bindings of a Graph)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping


class Overlay(MutableMapping):
    """A thread's view of a shared mapping: its own writes and deletions on top of the shared values."""

    __slots__ = ("own", "base", "hidden")

    def __init__(self, base: Mapping):
        self.own: dict = {}
        self.base = base
        self.hidden: set = set()  # shared keys this thread deleted

    def __getitem__(self, key):
        own = self.own
        if key in own:
            return own[key]
        if key in self.hidden:
            raise KeyError(key)
        return self.base[key]

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key) -> bool:
        return key in self.own or (key not in self.hidden and key in self.base)

    def __setitem__(self, key, value) -> None:
        self.own[key] = value
        self.hidden.discard(key)

    def __delitem__(self, key) -> None:
        found = self.own.pop(key, _MISSING) is not _MISSING
        if key in self.base and key not in self.hidden:
            self.hidden.add(key)
            found = True
        if not found:
            raise KeyError(key)

    def __iter__(self):
        yield from list(self.own)
        for key in list(self.base):
            if key not in self.own and key not in self.hidden:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


_MISSING = object()
