"""A few values kept between runs of one process, each found by a key *equal* to its own.

For results that depend on their inputs alone where the inputs are unhashable (profiles, resolved
deployments): a lookup compares the key with each held one (``==``), so a value is reused for an
equal request however its inputs were built, and never for a different one. The least recently
used goes once ``size`` are held. A lock guards the list: a Dask worker may run simulations in
threads, and two that keep a value under equal keys at once get the first one kept.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

Key = TypeVar("Key")
Value = TypeVar("Value")


class Kept(Generic[Key, Value]):
    """At most ``size`` values by equal keys, least recently used out (module docstring)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: list[tuple[Key, Value]] = []  # most recently used last
        self._lock = threading.Lock()

    def get(self, key: Key) -> Value | None:
        """The value kept under a key equal to ``key`` (now the most recently used), else None."""
        with self._lock:
            return self._found(key)

    def keep(self, key: Key, value: Value) -> Value:
        """Keep ``value`` under ``key`` and return it; the value already kept where a key equal to
        ``key`` is held (another thread kept it first)."""
        with self._lock:
            found = self._found(key)
            if found is not None:
                return found
            if len(self._held) >= self.size:
                del self._held[0]
            self._held.append((key, value))
            return value

    def keys(self) -> list[Key]:
        """The keys held, least recently used first."""
        with self._lock:
            return [key for key, _ in self._held]

    def _found(self, key: Key) -> Value | None:
        for index, (held, value) in enumerate(self._held):
            if held == key:
                self._held.append(self._held.pop(index))
                return value
        return None
