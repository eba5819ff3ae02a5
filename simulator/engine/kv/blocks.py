"""Paged KV: a replica's KV budget in blocks, and a prefix cache of reusable full blocks.

The budget is ``floor(kv_budget / (block_tokens * kv bytes per token))`` blocks; a sequence
holding ``n`` tokens of KV owns ``ceil(n / block_tokens)`` blocks.

Layer kinds. A model whose ``L_w`` of ``L`` layers attend over a sliding window of ``W``
tokens (gpt-oss: 18 of 36, W = 128) keeps KV per layer kind, as vLLM's hybrid KV-cache
manager does: its ``L_f = L - L_w`` full-attention layers hold the whole context, its windowed
layers at most ``W`` tokens. A block is then ``block_tokens`` tokens of the full-attention
layers, so the budget is ``floor(kv_budget / (block_tokens * kv bytes per token * L_f / L))``
blocks; a sequence owns ``ceil(n / block_tokens)`` of them for its context (the prefix
cache's keyed blocks) plus, for its windowed layers, ``ceil(ceil(min(W, n_max) / block_tokens)
* L_w / L_f)`` taken when it is admitted, ``n_max`` its prompt plus output (at most one window
early: the windowed layers of a sequence shorter than ``W`` fill as it grows). A model whose
every layer is windowed (``L_f = 0``) is charged its whole context in every layer
(conservative). The closed form counts the same bytes (``Deployment.kv_bytes_for_context``).

The prefix cache behaves as a per-block cache (vLLM's): each full block has a key, blocks in
use are reference-counted, idle ones are reclaimed in LRU order. It *stores* a session's
blocks as runs. Block ``i`` of a session's context has the integer key ``base + i``
(:class:`~simulator.engine.request.SessionKeys`), and every sequence references a prefix
``base .. stop-1`` of its session (what it hit, then what it published). So the reference
count of a key is the number of reference ``stop``\\ s above it. A key is in use iff it is below
the session's highest ``stop``. The idle blocks are runs ``lo .. hi-1`` kept in the order
they entered the LRU. One call then costs a few operations per run, not one per 16-token
block. Keys given one by one in a list (a trace's block hashes) are kept per key, in the same
LRU.
"""

from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from simulator.plan.resolve import BackendPlan

BlockKey = Hashable
SESSION_BITS = 32  # a session's keys are base + i, bases 2^32 apart


class _Run:
    """Idle cached blocks ``lo .. hi-1`` of one session that entered the LRU in one push."""

    __slots__ = ("hi", "lo", "push")

    def __init__(self, lo: int, hi: int, push: _Push) -> None:
        self.lo, self.hi, self.push = lo, hi, push


class _Push:
    """Idle blocks that entered the LRU together, in their eviction order: session runs
    (``descending``: each run is evicted from its last block down) or keys one by one."""

    __slots__ = ("descending", "keys", "runs", "stamp")

    def __init__(self, descending: bool) -> None:
        self.descending = descending
        self.stamp = 0  # its place in the LRU
        self.runs: list[_Run] = []
        self.keys: OrderedDict[BlockKey, None] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self.runs) or bool(self.keys)


class _Session:
    """A session's references (their stops, ascending) and its idle runs (ascending, disjoint)."""

    __slots__ = ("runs", "stops")

    def __init__(self) -> None:
        self.stops: list[int] = []
        self.runs: list[_Run] = []

    def in_use_below(self, base: int) -> int:
        """Keys ``base .. (returned) - 1`` are referenced by a running sequence."""
        return self.stops[-1] if self.stops else base

    def run_from(self, key: int) -> int:
        """Index of the first idle run ending above ``key``: ``bisect_right`` by the runs' ends, its
        loop written out (compiled, not a Python call of the key for every probe)."""
        runs = self.runs
        low, high = 0, len(runs)
        while low < high:
            mid = (low + high) // 2
            if key < runs[mid].hi:
                high = mid
            else:
                low = mid + 1
        return low


class BlockManager:
    """Paged KV: free blocks, blocks in use, and a prefix cache of reusable full blocks.

    A cached block is identified by its key (a session's ``base + i``, or a trace's block
    hash); blocks in use by running sequences are reference-counted, so sequences sharing a
    prefix share its blocks. Unreferenced cached blocks are kept in LRU order and are
    reclaimed, oldest first, only when an allocation finds no free block.

    A sequence of session keys is passed as a ``range`` (:meth:`Request.block_keys`), other
    keys as a list.
    """

    def __init__(
        self,
        total_blocks: int,
        block_tokens: int,
        caching: bool = False,
        window_tokens: int = 0,
        window_blocks_per_block: float = 0.0,
        full_share: float = 1.0,
    ) -> None:
        self.total = total_blocks
        self.free = total_blocks
        self.block_tokens = block_tokens
        self.caching = caching
        self.window_tokens = window_tokens  # W of the windowed layers (0: none)
        self.window_blocks_per_block = window_blocks_per_block  # L_w / L_f: windowed layers per full one
        self.full_share = full_share  # L_f / L: the share of all layers' KV bytes a block of tokens is
        self.idle = 0  # cached blocks no running sequence references (reclaimable)
        self.on_evict: Callable[[list[BlockKey]], None] | None = None  # where reclaimed cached blocks go (KV tiers)
        self.version = 0  # changes whenever the set of resident cached blocks may have changed
        self._lru: OrderedDict[int, _Push] = OrderedDict()  # pushes, oldest first
        self._pushes = 0
        self._sessions: dict[int, _Session] = {}
        self._idle_keys: dict[BlockKey, _Push] = {}  # keys given one by one: the push holding each idle one
        self._in_use_keys: dict[BlockKey, int] = {}  # ... and the reference count of each in use

    def blocks_of(self, tokens: float) -> float:
        """Blocks ``tokens`` of one sequence's context take: ``ceil(tokens / block_tokens)``."""
        return float(math.ceil(tokens / self.block_tokens))

    def window_blocks(self, tokens: float) -> float:
        """Blocks the windowed layers of a sequence reaching ``tokens`` of context hold, in blocks of
        the full-attention layers: ``ceil(ceil(min(W, tokens) / block_tokens) * L_w / L_f)``; 0 without."""
        if not self.window_tokens:
            return 0.0
        window = math.ceil(min(float(self.window_tokens), tokens) / self.block_tokens)
        return float(math.ceil(window * self.window_blocks_per_block))

    @property
    def used(self) -> int:
        """Blocks holding KV of running sequences (cached, unreferenced blocks excluded)."""
        return self.total - self.free - self.idle

    @property
    def available(self) -> int:
        return self.free + self.idle

    # -- lookups ----------------------------------------------------------------------------------
    def resident(self, key: BlockKey | None) -> bool:
        """Whether the block of ``key`` is in the cache (in use or idle)."""
        if key is None:
            return False
        if not isinstance(key, int):
            return key in self._idle_keys or key in self._in_use_keys
        session = self._sessions.get(key >> SESSION_BITS)
        if session is None:
            return False
        if key < session.in_use_below(_base(key)):
            return True
        i = session.run_from(key)
        return i < len(session.runs) and session.runs[i].lo <= key

    def leading(self, keys: Sequence[BlockKey | None]) -> tuple[int, int]:
        """(How many leading ``keys`` are resident, how many of those are idle)."""
        if isinstance(keys, range):
            return self._leading_run(keys)
        hit, idle = len(keys), 0
        for index, key in enumerate(keys):
            # blocks without a key (past a trace's hashes) cannot be matched; the hit ends at a miss
            if key is not None and key in self._idle_keys:
                idle += 1
            elif key is None or key not in self._in_use_keys:
                hit = index
                break
        return hit, idle

    def _leading_run(self, keys: range) -> tuple[int, int]:
        if not keys:
            return 0, 0
        session = self._sessions.get(keys.start >> SESSION_BITS)
        if session is None:
            return 0, 0
        in_use = session.in_use_below(_base(keys.start))
        end = max(in_use, keys.start)
        runs, i = session.runs, session.run_from(end)
        while end < keys.stop and i < len(runs) and runs[i].lo <= end:
            end = runs[i].hi
            i += 1
        hit = min(end, keys.stop) - keys.start
        return hit, max(keys.start + hit - max(in_use, keys.start), 0)

    # -- allocation --------------------------------------------------------------------------------
    def allocate(self, blocks: int) -> bool:
        """Take ``blocks`` free blocks, reclaiming LRU cached ones if needed."""
        if blocks > self.available:
            return False
        short = blocks - self.free
        if short > 0:
            reclaimed = self._evict(short, keep_keys=self.on_evict is not None)
            self.free += short
            self.version += 1
            if self.on_evict is not None:
                self.on_evict(reclaimed)
        self.free -= blocks
        return True

    def _evict(self, count: int, keep_keys: bool) -> list[BlockKey]:
        """Reclaim the ``count`` least recently cached idle blocks; their keys in that order
        when ``keep_keys``."""
        self.idle -= count
        reclaimed: list[BlockKey] = []
        while count:
            push = next(iter(self._lru.values()))
            if push.keys:
                key, _ = push.keys.popitem(last=False)
                del self._idle_keys[key]
                reclaimed.append(key)
                count -= 1
            else:
                run = push.runs[0]
                taken = min(count, run.hi - run.lo)
                if push.descending:
                    if keep_keys:
                        reclaimed.extend(range(run.hi - 1, run.hi - 1 - taken, -1))
                    run.hi -= taken
                else:
                    if keep_keys:
                        reclaimed.extend(range(run.lo, run.lo + taken))
                    run.lo += taken
                count -= taken
                if run.lo == run.hi:
                    self._drop_run(run)
            if not push:
                del self._lru[push.stamp]
        return reclaimed

    def _drop_run(self, run: _Run) -> None:
        """An emptied run leaves its session and its push."""
        number = run.lo >> SESSION_BITS
        session = self._sessions[number]
        runs = session.runs
        i = session.run_from(run.hi - 1)  # the first run ending at or above its end
        while runs[i] is not run:
            i += 1
        del runs[i]
        run.push.runs.remove(run)
        self._forget_if_empty(number)

    def _forget_if_empty(self, number: int) -> None:
        """A session with nothing cached and nothing referenced is dropped (memory stays flat)."""
        session = self._sessions[number]
        if not session.runs and not session.stops:
            del self._sessions[number]

    # -- references ---------------------------------------------------------------------------------
    def acquire(self, keys: Sequence[BlockKey]) -> None:
        """Reference resident blocks for a sequence that reuses them."""
        self.version += 1
        if isinstance(keys, range):
            if keys:
                session = self._session(keys.start)
                self.idle -= self._take_idle(session, keys.start, keys.stop)
                bisect.insort(session.stops, keys.stop)
            return
        in_use = self._in_use_keys
        for key in keys:
            push = self._idle_keys.pop(key, None)
            if push is not None:  # an idle cached block (never also in use)
                self._forget_key(push, key)
                in_use[key] = 1
            else:
                in_use[key] = in_use.get(key, 0) + 1

    def publish(self, keys: Sequence[BlockKey | None]) -> Sequence[BlockKey]:
        """Make freshly computed full blocks shareable; returns the keys now referenced.

        A key another sequence already published stays that sequence's; this copy remains a
        private block of its owner (it was computed twice). A session's ``keys`` continue the
        prefix its sequence references.
        """
        self.version += 1
        if isinstance(keys, range):
            if not keys:
                return keys
            session = self._session(keys.start)
            base = _base(keys.start)
            if keys.start < session.in_use_below(base):
                return keys[:0]
            i = session.run_from(keys.start)
            stop = min(keys.stop, session.runs[i].lo) if i < len(session.runs) else keys.stop
            if stop <= keys.start:  # its first block is cached idle already
                return keys[:0]
            if keys.start > base:  # the sequence's reference grows
                session.stops.remove(keys.start)
            bisect.insort(session.stops, stop)
            return range(keys.start, stop)
        published = []
        for key in keys:
            if key is None or self.resident(key):
                break
            self._in_use_keys[key] = 1
            published.append(key)
        return published

    def release(self, shared: Sequence[BlockKey], owned: int, keys: Sequence[BlockKey | None]) -> None:
        """A sequence leaves: drop its references, cache its full ``keys`` blocks, free the rest.

        ``keys`` names the owned full blocks in order (None: not cacheable); owned blocks beyond
        them (a partial last block) are freed. Blocks enter the LRU tail first (as vLLM frees
        them in reverse), so eviction trims a cached context from its end and keeps its prefix.
        """
        self.version += 1
        if not shared and not keys:
            cached = 0
        elif isinstance(shared, range) or isinstance(keys, range):
            cached = self._release_run(shared, owned, keys)
        else:
            cached = self._release_keys(shared, owned, keys)
        self.free += owned - cached

    def _release_run(self, shared: Sequence[BlockKey], owned: int, keys: Sequence[BlockKey | None]) -> int:
        first = shared if isinstance(shared, range) and shared else keys
        assert isinstance(first, range) and (shared or keys)
        session = self._session(first.start)
        base = _base(first.start)
        pieces: list[tuple[int, int]] = []  # (lo, hi) to cache, highest first
        if self.caching and isinstance(keys, range) and owned:
            owned_keys = keys[:owned]
            lo = max(owned_keys.start, session.in_use_below(base))
            pieces = self._gaps(session, lo, owned_keys.stop)
        cached = sum(hi - lo for lo, hi in pieces)
        if isinstance(shared, range) and shared:
            session.stops.remove(shared.stop)
            lo = max(session.in_use_below(base), shared.start)
            if lo < shared.stop:  # the last references to these blocks
                if pieces and pieces[-1][0] == shared.stop:
                    pieces[-1] = (lo, pieces[-1][1])
                else:
                    pieces.append((lo, shared.stop))
        self._push_runs(session, pieces, descending=True)
        self._forget_if_empty(first.start >> SESSION_BITS)
        return cached

    def _release_keys(self, shared: Sequence[BlockKey], owned: int, keys: Sequence[BlockKey | None]) -> int:
        push = _Push(descending=True)
        if self.caching:
            for key in reversed(keys[:owned]):
                if key is not None and not self.resident(key):
                    push.keys[key] = None
        cached = len(push.keys)
        in_use = self._in_use_keys
        for key in reversed(shared):
            count = in_use[key] - 1
            if count:
                in_use[key] = count
            else:
                del in_use[key]
                push.keys[key] = None
        self._push_keys(push)
        return cached

    def cache_loaded(self, keys: Sequence[BlockKey]) -> int:
        """Blocks loaded from a lower tier join the cache as its most recent, in order, as many as
        there is room for; returns how many did."""
        room = min(len(keys), self.available)
        self.allocate(room)
        self.version += 1
        loaded = keys[:room]
        numbers = [key for key in loaded if isinstance(key, int)]  # one call's: one session
        if numbers:  # consecutive runs, ascending
            pieces: list[tuple[int, int]] = []
            for number in numbers:
                if pieces and pieces[-1][1] == number:
                    pieces[-1] = (pieces[-1][0], number + 1)
                else:
                    pieces.append((number, number + 1))
            self._push_runs(self._session(numbers[0]), pieces, descending=False)
        push = _Push(descending=False)
        for key in loaded:
            if not isinstance(key, int):
                push.keys[key] = None
        self._push_keys(push)
        return room

    # -- helpers ------------------------------------------------------------------------------------
    def _session(self, key: int) -> _Session:
        number = key >> SESSION_BITS
        session = self._sessions.get(number)
        if session is None:
            session = self._sessions[number] = _Session()
        return session

    def _take_idle(self, session: _Session, lo: int, hi: int) -> int:
        """Remove the idle keys ``lo .. hi-1`` of a session from its runs; returns how many.

        ``lo .. hi-1`` is a prefix being referenced: every key of it below the first idle one is
        in use, so it never cuts a run in two (it takes whole runs, then the head of one).
        """
        runs, taken = session.runs, 0
        i = session.run_from(lo)
        while i < len(runs) and runs[i].lo < hi:
            run = runs[i]
            assert run.lo >= lo, "idle blocks below a referenced prefix's end are all in it"
            if run.hi > hi:
                taken += hi - run.lo
                run.lo = hi
                break
            taken += run.hi - run.lo
            del runs[i]
            run.push.runs.remove(run)
            if not run.push:
                del self._lru[run.push.stamp]
        return taken

    def _gaps(self, session: _Session, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``lo .. hi-1`` not idle in the session's runs, highest first."""
        gaps: list[tuple[int, int]] = []
        runs, i, at = session.runs, session.run_from(lo), lo
        while at < hi and i < len(runs) and runs[i].lo < hi:
            if runs[i].lo > at:
                gaps.append((at, runs[i].lo))
            at = runs[i].hi
            i += 1
        if at < hi:
            gaps.append((at, hi))
        gaps.reverse()
        return gaps

    def _push_runs(self, session: _Session, pieces: list[tuple[int, int]], descending: bool) -> None:
        """Idle runs enter the LRU as its most recent push, in eviction order."""
        if not pieces:
            return
        push = _Push(descending)
        for lo, hi in pieces:
            run = _Run(lo, hi, push)
            push.runs.append(run)
            session.runs.insert(session.run_from(hi), run)  # after the runs ending at or below it
            self.idle += hi - lo
        self._append(push)

    def _push_keys(self, push: _Push) -> None:
        if not push.keys:
            return
        for key in push.keys:
            self._idle_keys[key] = push
        self.idle += len(push.keys)
        self._append(push)

    def _append(self, push: _Push) -> None:
        self._pushes += 1
        push.stamp = self._pushes
        self._lru[push.stamp] = push

    def _forget_key(self, push: _Push, key: BlockKey) -> None:
        del push.keys[key]
        self.idle -= 1
        if not push:
            del self._lru[push.stamp]


class PrefixHit:
    """The leading prompt blocks of a request already resident, and how many of them are idle
    (cached, referenced by no running sequence: reusing one takes it out of the reclaimable pool)."""

    def __init__(self, keys: Sequence[Hashable], idle: int) -> None:
        self.keys = keys  # a range for a session's keys (:class:`BlockManager`)
        self.idle = idle


NO_HIT = PrefixHit([], 0)


def paged_kv(backend: BackendPlan) -> BlockManager:
    """One replica's KV blocks, with the prefix cache when the scenario asks for it; with
    sliding-window layers a block holds the full-attention layers' KV (the module docstring)."""
    model = backend.deployment.model
    windowed = model.attention.sliding_window_layers
    full = model.num_layers - windowed
    if not windowed or not full or model.attention.sliding_window is None:
        return BlockManager(backend.kv_blocks, backend.kv_block_tokens, caching=backend.prefix_caching)
    share = full / model.num_layers
    block_bytes = backend.kv_block_tokens * backend.deployment.kv_bytes_per_token * share
    return BlockManager(int(backend.deployment.kv_budget_bytes // block_bytes), backend.kv_block_tokens,
                        caching=backend.prefix_caching, window_tokens=model.attention.sliding_window,
                        window_blocks_per_block=windowed / full, full_share=share)  # fmt: skip


def extended(shared: Sequence[BlockKey], published: Sequence[BlockKey]) -> Sequence[BlockKey]:
    """A sequence's referenced keys ``shared`` followed by the ``published`` keys that continue them."""
    if isinstance(published, range):
        return range(published.stop - len(shared) - len(published), published.stop)
    return [*shared, *published]


def _base(key: int) -> int:
    """The first key of ``key``'s session."""
    return key >> SESSION_BITS << SESSION_BITS
