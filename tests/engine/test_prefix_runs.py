"""The prefix cache keeps a session's blocks as runs; it must behave exactly as a per-block cache.

The reference below is the per-block LRU cache (vLLM's block manager): a reference count per
block in use, one LRU entry per idle block, blocks freed tail first. Random admissions,
publications, decodes, releases and allocation pressure drive both. Every prefix hit, every
reclaimed block (in order), every published key and every count must agree.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from simulator.engine.kv.blocks import BlockManager, extended
from simulator.engine.request import SessionKeys


class PerBlockCache:
    """One dict entry per block: the specification the runs must match."""

    def __init__(self, total: int) -> None:
        self.free = total
        self.idle: OrderedDict[Hashable, None] = OrderedDict()
        self.in_use: dict[Hashable, int] = {}
        self.evicted: list[Hashable] = []

    def leading(self, keys: Sequence[Hashable]) -> tuple[int, int]:
        idle = 0
        for index, key in enumerate(keys):
            if key in self.idle:
                idle += 1
            elif key not in self.in_use:
                return index, idle
        return len(keys), idle

    def allocate(self, blocks: int) -> bool:
        if blocks > self.free + len(self.idle):
            return False
        while self.free < blocks:
            self.evicted.append(self.idle.popitem(last=False)[0])
            self.free += 1
        self.free -= blocks
        return True

    def acquire(self, keys: Sequence[Hashable]) -> None:
        for key in keys:
            if self.idle.pop(key, False) is None:
                self.in_use[key] = 1
            else:
                self.in_use[key] = self.in_use.get(key, 0) + 1

    def publish(self, keys: Sequence[Hashable]) -> list[Hashable]:
        published = []
        for key in keys:
            if key in self.in_use or key in self.idle:
                break
            self.in_use[key] = 1
            published.append(key)
        return published

    def cache_loaded(self, keys: list[Hashable]) -> int:
        room = min(len(keys), self.free + len(self.idle))
        self.allocate(room)
        for key in keys[:room]:
            self.idle[key] = None
        return room

    def release(self, shared: Sequence[Hashable], owned: int, keys: Sequence[Hashable]) -> None:
        cached = 0
        for key in reversed(list(keys)[:owned]):
            if key not in self.idle and key not in self.in_use:
                self.idle[key] = None
                cached += 1
        for key in reversed(list(shared)):
            self.in_use[key] -= 1
            if not self.in_use[key]:
                del self.in_use[key]
                self.idle[key] = None
        self.free += owned - cached


@dataclass
class Running:
    """A running sequence as the scheduler tracks it: its keys, what it shares, what it owns."""

    keys: Sequence[Hashable]  # every full block of its context, in order
    shared: Sequence[Hashable]
    blocks: int  # blocks it holds, shared ones included
    reference: list[Hashable] = field(default_factory=list)  # the same shared keys, for the reference


def _keys(session: int, blocks: int, bases: list[int | None]) -> Sequence[Hashable]:
    """A session's first ``blocks`` keys: a range for a numbered session, hash tuples otherwise."""
    base = bases[session]
    return range(base, base + blocks) if base is not None else [("trace", session, i) for i in range(blocks)]


def _drive(seed: int, steps: int = 400) -> tuple[int, int]:
    rng = np.random.default_rng(seed)
    total = int(rng.integers(20, 120))
    runs, reference = BlockManager(total, 16, caching=True), PerBlockCache(total)
    evicted: list[Hashable] = []
    runs.on_evict = evicted.extend
    session_keys = SessionKeys()
    bases = [session_keys.base(s) for s in range(5)] + [None, None]  # five sessions, two traces' hashes
    running: list[Running] = []
    hits = 0
    for _ in range(steps):
        op = rng.random()
        if op < 0.4:  # admit: look up the prefix, reuse it, compute and publish the rest
            session = int(rng.integers(len(bases)))
            prompt = int(rng.integers(1, 40))
            keys = _keys(session, prompt + int(rng.integers(0, 20)), bases)
            lookup = keys[:prompt]
            hit, idle = runs.leading(lookup)
            assert (hit, idle) == reference.leading(list(lookup))
            need = prompt - hit + 1  # the rest of the prompt and a partial block
            if need > runs.available - idle:
                continue
            hits += hit
            runs.acquire(lookup[:hit])
            reference.acquire(list(lookup[:hit]))
            assert runs.allocate(need) == reference.allocate(need)
            sequence = Running(keys, lookup[:hit], hit + need, list(lookup[:hit]))
            new = keys[hit:prompt]
            published = runs.publish(new)
            assert list(published) == reference.publish(list(new))
            sequence.shared = extended(sequence.shared, published)
            sequence.reference += list(published)
            assert list(sequence.shared) == sequence.reference
            running.append(sequence)
        elif op < 0.55 and running:  # a decode step crosses into new blocks
            sequence = running[int(rng.integers(len(running)))]
            more = int(rng.integers(1, 4))
            if runs.allocate(more):
                assert reference.allocate(more)
                sequence.blocks += more
            else:
                assert not reference.allocate(more)
        elif op < 0.85 and running:  # a sequence leaves, caching its full blocks
            sequence = running.pop(int(rng.integers(len(running))))
            full = min(len(sequence.keys), sequence.blocks - 1)
            owned = sequence.blocks - len(sequence.shared)
            cache = rng.random() < 0.8  # a swapped-out sequence caches nothing
            keys = sequence.keys[len(sequence.shared) : full] if cache else []
            runs.release(sequence.shared, owned, keys)
            reference.release(sequence.reference, owned, list(keys))
        elif op < 0.9:  # blocks loaded from a lower tier: those of a stretch not resident here
            keys = _keys(int(rng.integers(len(bases))), 60, bases)
            start = int(rng.integers(0, 50))
            loaded = [k for k in keys[start : start + int(rng.integers(1, 12))] if not runs.resident(k)]
            assert runs.cache_loaded(loaded) == reference.cache_loaded(loaded)
        else:  # pressure from a sequence without a cacheable prefix, freed at once
            blocks = int(rng.integers(1, total))
            if runs.allocate(blocks):
                assert reference.allocate(blocks)
                runs.release([], blocks, [])
                reference.release([], blocks, [])
        assert evicted == reference.evicted
        assert (runs.free, runs.idle) == (reference.free, len(reference.idle))
    for session in range(len(bases)):
        keys = _keys(session, 60, bases)
        assert [runs.resident(k) for k in keys] == [k in reference.idle or k in reference.in_use for k in keys]
    for sequence in running:  # everything leaves, then a whole-cache allocation evicts every block
        runs.release(sequence.shared, sequence.blocks - len(sequence.shared), [])
    assert runs.allocate(total) and runs.idle == 0
    assert not runs._sessions  # no bookkeeping outlives its blocks: memory does not grow with sessions
    return hits, len(evicted)


@pytest.mark.parametrize("seed", range(40))
def test_runs_hit_and_evict_exactly_as_a_per_block_cache(seed: int) -> None:
    _drive(seed)


def test_the_random_drive_reuses_and_evicts_cached_prefixes() -> None:
    """The comparison above is not vacuous: prefixes are found again, and evictions happen."""
    hits, evicted = np.sum([_drive(seed) for seed in range(5)], axis=0)
    assert hits > 100 and evicted > 100
