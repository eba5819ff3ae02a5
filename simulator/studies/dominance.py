"""Backends that serve no slower than others, and the fleets a simulated miss settles with them.

Backend ``a`` *serves no slower than* backend ``b`` (``a >= b``, :func:`serves_no_slower`) when a
replica of ``a`` can stand in for one of ``b`` and take no longer over any step:

- the same model and the same batching behaviour: scheduler, priority, chunked prefill,
  admission, tokens per iteration, KV block size and prefix caching; neither side speculates,
  keeps KV tiers or a swap tier, is reached through an API, or serves one half of a split pair;
- at least as many sequences per iteration and KV tokens per replica, as long a longest request,
  and no longer a path to it (one-way network and front-end time);
- no pass slower: ``s_a t_a(x) <= s_b t_b(x)`` (``t`` the step-time model, ``s`` the power cap's
  stretch) for every batch shape ``x`` of a fixed grid (:func:`batch_grid`: decode batches of
  1 to 4,096 sequences at contexts from 1 to 128 k tokens, prefill chunks of 16 to 128 k
  tokens beside 0 to 256 decodes) that a replica of ``b`` can hold (its batch cap, tokens per
  iteration, longest request and KV tokens). The grid is fixed and each side's limits only
  shrink it, so the relation is transitive (a preorder).

Where the planner reads it (:class:`~simulator.studies.planning.Planner`: a router that treats
every replica alike, no failures and no N+k), it *assumes* what it assumes of one more replica
(monotone feasibility): swapping a replica for one of a backend that serves no slower never makes
a fleet miss. The search checks that on what it simulated
(:func:`~simulator.studies.planning.non_monotone`).

**Covering.** Fleet ``u`` is served no better than fleet ``m`` (``u <= m``) when each replica of
``u`` can be matched to its own replica of ``m`` of a backend that serves no slower. By Hall's
theorem that holds iff ``sum_{b in U} u_b <= sum_{b in U} m_b`` for every *up-set* ``U`` (a set of
backends holding every backend that serves no slower than one in it). With no pairs every set is
an up-set and this is ``u_b <= m_b`` backend by backend. A simulated miss at ``m`` settles every
``u <= m`` as a miss.

**A cheaper swap.** A fleet with a replica of ``b`` is beaten when a backend ``a >= b`` has a
cheaper replica and room under its replica limit: swapping that one replica gives a cheaper fleet
that meets whenever it does (``Planner._beaten``). So it is never the cheapest fleet
that meets, and the planner never simulates one. Swaps from a fleet end at one with no cheaper
swap, cheaper still and served no worse, so a floor on the fleets not beaten is a floor on all.

**Slower replicas.** A replica can also make a fleet worse. Every replica policy but
``least-predicted-latency`` balances load (queue, outstanding tokens, free KV), not speed, and a
session sticks to its replica, so a slow
replica takes its share of tasks and runs all their calls slowly. Measured on
``scenarios/plan-coding-agents.yaml``: 4 x h100 + 8 x b300 + 1 x b200 meets its p95 task-time
bound (593 s against 600 s); one MI300X more misses it (629 s), three more too (620 s). So a
backend ``x`` is *slower than* ``y`` (:func:`runs_slower`) when ``y`` runs every pass of the grid
that both can hold no slower, and some faster; this compares passes only, across stacks too. A
fleet ``u`` then *may be hurt by* the backends slower than one it holds (:meth:`ServiceOrder.slow_in`),
and a miss at ``m`` *settles* ``u`` (:meth:`ServiceOrder.settles`) only when ``m`` holds exactly
``u``'s replicas of those and covers the rest: ``m`` is ``u`` with only replicas added (or
swapped up) that are slower than nothing ``u`` holds. That is what the planner assumes: adding such a
replica never makes a fleet miss. Under ``least-predicted-latency`` no backend is compared for
speed (the planner passes none as ``compared``), so every miss settles all below it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.analytic.step_time import BatchAggregates
from simulator.plan.resolve import BackendPlan

Counts = tuple[int, ...]

#: The grid's decode batches (sequences) and contexts (tokens each holds).
DECODE_BATCHES = tuple(2**k for k in range(13))
DECODE_CONTEXTS = (1, 256, 1024, 4096, 16384, 65536, 131071)
#: The grid's prefill chunks (tokens), the context before them (tokens), and the decodes beside them.
PREFILL_CHUNKS = (16, 128, 512, 2048, 8192, 32768, 131072)
PREFILL_CACHED = (0, 1024, 16384, 65536)
DECODES_BESIDE = (0, 1, 16, 256)


@dataclass(frozen=True)
class BatchGrid:
    """The fixed batch shapes, as per-shape aggregates, and what a replica needs to run each."""

    batch: BatchAggregates
    sequences: np.ndarray  # per shape
    new_tokens: np.ndarray  # tokens processed in the pass
    longest: np.ndarray  # the most tokens one sequence holds after the pass
    held: np.ndarray  # KV tokens the batch holds after the pass


def batch_grid(window: int | None) -> BatchGrid:
    """Decode batches (``B`` sequences at context ``c``) and prefill chunks (one chunk of ``q`` new
    tokens after ``c`` cached, beside ``B`` decodes at context ``c``), for a model's ``window``."""
    shapes = [([1.0] * b, [float(c)] * b) for b in DECODE_BATCHES for c in DECODE_CONTEXTS]
    shapes += [([float(q)] + [1.0] * b, [float(c)] * (b + 1))
               for q in PREFILL_CHUNKS for c in PREFILL_CACHED for b in DECODES_BESIDE]  # fmt: skip
    rows = [BatchAggregates.of(new, cached, window) for new, cached in shapes]
    fields = BatchAggregates.__dataclass_fields__
    batch = BatchAggregates(*(np.concatenate([getattr(r, f) for r in rows]) for f in fields))
    return BatchGrid(
        batch,
        np.array([len(new) for new, _ in shapes], dtype=float),
        np.array([sum(new) for new, _ in shapes]),
        np.array([max(q + c for q, c in zip(new, cached, strict=True)) for new, cached in shapes]),
        np.array([sum(q + c for q, c in zip(new, cached, strict=True)) for new, cached in shapes]),
    )


def _holds(plan: BackendPlan, grid: BatchGrid) -> np.ndarray:
    """Which of the grid's shapes a replica of ``plan`` can run."""
    kv_tokens = plan.kv_blocks * plan.kv_block_tokens
    return (
        (grid.sequences <= plan.batch_cap) & (grid.new_tokens <= plan.max_batched_tokens)
        & (grid.longest <= plan.max_tokens) & (grid.held <= kv_tokens)
    )  # fmt: skip


def pass_seconds(plan: BackendPlan, grid: BatchGrid) -> np.ndarray:
    """A replica's seconds per pass of each of the grid's shapes, its power cap's stretch included."""
    stretch = plan.power.stretch if plan.power is not None else 1.0
    return np.asarray(plan.cost.iteration_times(grid.batch).total_s, dtype=float) * stretch


def _window_key(plan: BackendPlan) -> tuple[type, int | None]:
    """The model's window with its kind: a chunked window equals a sliding one of its length as an int."""
    return type(plan.window), plan.window


def _behaviour(plan: BackendPlan) -> tuple[object, ...]:
    """What a replica must share with another for either to stand in for the other: the model and
    how it batches (each stack default its scheduler leaves empty resolved)."""
    sched, stack = plan.scheduler, plan.deployment.stack
    resolved = tuple(
        getattr(stack, name) if getattr(sched, name, None) is None else getattr(sched, name)
        for name in ("priority", "chunked_prefill", "admission")
    )
    return (
        plan.deployment.model.id, type(sched), sched.model_dump(exclude={"max_batch_size"}), resolved,
        plan.max_batched_tokens, plan.kv_block_tokens, plan.prefix_caching,
    )  # fmt: skip


def _standalone(plan: BackendPlan) -> bool:
    """A replica with no speculation, KV tiers, swap tier, API or split role."""
    return (
        plan.deployment.speculative is None and not plan.kv_tiers and plan.swap_tier is None and plan.api is None
        and plan.decode_backend is None and plan.decodes_for is None
    )  # fmt: skip


def runs_slower(x: BackendPlan, y: BackendPlan, grid: BatchGrid, seconds_x: np.ndarray,
                seconds_y: np.ndarray) -> bool:  # fmt: skip
    """Whether a replica of ``x`` is slower than one of ``y`` (module docstring): on every shape of
    ``grid`` both can hold ``y``'s pass takes no longer, on some less; ``seconds_*`` are
    :func:`pass_seconds`. Batching, KV and path are not compared: only how fast a call runs once there."""
    both = _holds(x, grid) & _holds(y, grid)
    return bool(both.any() and np.all(seconds_y[both] <= seconds_x[both]) and np.any(seconds_y[both] < seconds_x[both]))


def serves_no_slower(a: BackendPlan, b: BackendPlan, grid: BatchGrid, seconds_a: np.ndarray,
                     seconds_b: np.ndarray) -> bool:  # fmt: skip
    """Whether a replica of ``a`` serves no slower than one of ``b`` (module docstring); ``seconds_*``
    are :func:`pass_seconds` on ``grid``."""
    if not (_standalone(a) and _standalone(b)) or _behaviour(a) != _behaviour(b):
        return False
    if a.batch_cap < b.batch_cap or a.kv_blocks < b.kv_blocks or a.max_tokens < b.max_tokens:
        return False
    if a.one_way_s > b.one_way_s or a.front_end_s > b.front_end_s:
        return False
    held = _holds(b, grid)
    return bool(np.all(seconds_a[held] <= seconds_b[held]))


@dataclass(frozen=True)
class ServiceOrder:
    """Which backends serve no slower than which, as up-sets for covering (module docstring).

    ``above[b]``: the backends other than ``b`` that serve no slower than ``b``; ``upsets``: the
    up-sets of backends that some pair joins, and every other backend alone, as a 0/1 matrix
    (one row per up-set, one column per backend); ``slower[x]``: the backends ``x`` is slower
    than (:func:`runs_slower`)."""

    above: tuple[frozenset[int], ...]
    upsets: np.ndarray
    slower: tuple[frozenset[int], ...]

    @classmethod
    def of(cls, plans: Sequence[BackendPlan], eligible: Sequence[bool], compared: Sequence[bool]) -> ServiceOrder:
        """The order among the ``eligible`` backends of ``plans`` (the others serve as themselves
        only), and which of the ``compared`` ones is slower than which."""
        grids: dict[object, BatchGrid] = {}  # by the window and its kind (a chunked one is an int too)
        seconds = []
        for plan in plans:
            grid = grids.setdefault(_window_key(plan), batch_grid(plan.window))
            seconds.append(pass_seconds(plan, grid) if eligible[plan.index] or compared[plan.index] else np.empty(0))

        def alike(a: BackendPlan, b: BackendPlan, wanted: Sequence[bool]) -> bool:
            return a.index != b.index and wanted[a.index] and wanted[b.index] and _window_key(a) == _window_key(b)

        above = tuple(
            frozenset(a.index for a in plans if alike(a, b, eligible)
                      and serves_no_slower(a, b, grids[_window_key(b)], seconds[a.index], seconds[b.index]))
            for b in plans
        )  # fmt: skip
        slower = tuple(
            frozenset(y.index for y in plans if alike(x, y, compared)
                      and runs_slower(x, y, grids[_window_key(x)], seconds[x.index], seconds[y.index]))
            for x in plans
        )  # fmt: skip
        return cls.from_above(above, slower)

    @classmethod
    def from_above(cls, above: Sequence[frozenset[int]],
                   slower: Sequence[frozenset[int]] | None = None) -> ServiceOrder:  # fmt: skip
        """The order with ``above`` closed transitively (a stand-in's stand-in stands in), and its
        up-sets; ``slower`` as given (none slower than another when not)."""
        closed = [set(s) for s in above]
        changed = True
        while changed:
            changed = False
            for b, over in enumerate(closed):
                wider = set().union(over, *(closed[a] for a in over)) - {b}
                if wider != over:
                    closed[b], changed = wider, True
        slow = tuple(slower) if slower is not None else tuple(frozenset() for _ in above)
        return cls(tuple(frozenset(s) for s in closed), _upset_matrix([frozenset(s) for s in closed]), slow)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        """``(a, b)``: every backend ``a`` that serves no slower than another backend ``b``."""
        return [(a, b) for b, over in enumerate(self.above) for a in sorted(over)]

    def covers(self, miss: Counts, counts: Counts) -> bool:
        """Whether fleet ``counts`` is served no better than fleet ``miss`` (``counts <= miss``)."""
        return bool(np.all(self.upsets @ np.asarray(counts) <= self.upsets @ np.asarray(miss)))

    def slow_in(self, counts: Counts) -> list[int]:
        """The backends slower than one fleet ``counts`` holds: replicas that may make it worse."""
        held = {b for b, n in enumerate(counts) if n}
        return [x for x, over in enumerate(self.slower) if over & held]

    def settles(self, miss: Counts, counts: Counts) -> bool:
        """Whether a miss at fleet ``miss`` settles fleet ``counts`` (module docstring): the same
        replicas of every backend slower than one ``counts`` holds, and the rest covered."""
        slow = self.slow_in(counts)
        if any(miss[x] != counts[x] for x in slow):
            return False
        return self.covers(_without(miss, slow), _without(counts, slow))

    def slow_mask(self, fleets: np.ndarray) -> np.ndarray:
        """:meth:`slow_in` of each row of ``fleets`` (one fleet a row) as a boolean matrix of the
        same shape: entry ``(f, x)`` whether backend ``x`` is slower than one fleet ``f`` holds."""
        held = fleets > 0
        mask = np.zeros(fleets.shape, dtype=bool)
        for x, over in enumerate(self.slower):
            if over:
                mask[:, x] = held[:, sorted(over)].any(axis=1)
        return mask

    def mixes(self, fleets: np.ndarray) -> np.ndarray:
        """Whether each row of ``fleets`` holds a backend slower than another it holds."""
        held_slow: np.ndarray = np.any(self.slow_mask(fleets) & (fleets > 0), axis=1)
        return held_slow

    def settles_each(self, miss: Counts, fleets: np.ndarray, slow: np.ndarray) -> np.ndarray:
        """:meth:`settles` of a miss at ``miss`` for each row of ``fleets`` at once (``slow``: their
        :meth:`slow_mask`): the same replicas of the row's slow backends, and the rest covered."""
        given = np.asarray(miss)
        same: np.ndarray = np.all(~slow | (fleets == given), axis=1)
        kept = ~slow
        covered: np.ndarray = np.all((fleets * kept) @ self.upsets.T <= (given * kept) @ self.upsets.T, axis=1)
        settled: np.ndarray = same & covered
        return settled

    def settled_by_each(self, counts: Counts, fleets: np.ndarray) -> np.ndarray:
        """Whether a miss at each row of ``fleets`` would settle fleet ``counts`` (:meth:`settles`)."""
        slow = self.slow_in(counts)
        kept = np.ones(len(counts), dtype=bool)
        kept[slow] = False
        same: np.ndarray = np.ones(len(fleets), dtype=bool)
        if slow:
            same = np.all(fleets[:, slow] == np.asarray(counts)[slow], axis=1)
        covering: np.ndarray = np.all(
            self.upsets @ (np.asarray(counts) * kept) <= (fleets * kept) @ self.upsets.T, axis=1
        )
        settling: np.ndarray = same & covering
        return settling

    def most_of(self, misses: Sequence[Counts], counts: Counts, index: int) -> int:
        """The most replicas ``n`` of backend ``index`` beside ``counts`` (its own count there ignored)
        such that one of ``misses`` settles the fleet with ``n``, and with each fewer; -1 when none
        settles it with 0. Where ``index`` is slower than a backend the fleet holds, more of it may make the
        fleet worse, so at most 0 (a miss settles one count, not those below)."""
        if not misses:
            return -1
        given = list(counts)
        given[index] = 0
        held = self._most_settled(misses, given, index, present=True)
        if held >= 1:
            return held
        return 0 if self._most_settled(misses, given, index, present=False) >= 0 else -1

    def _most_settled(self, misses: Sequence[Counts], given: list[int], index: int, present: bool) -> int:
        """:meth:`most_of` among the counts of ``index`` that hold it (``present``) or not: the
        misses holding the fleet's replicas of its slow backends exactly, covering the rest."""
        slow = self.slow_in((*given[:index], int(present), *given[index + 1 :]))
        if present and index in slow:
            return -1
        rows = np.asarray(misses)
        same = np.all(rows[:, slow] == np.asarray(given)[slow], axis=1) if slow else np.ones(len(rows), dtype=bool)
        if not same.any():
            return -1
        have = self.upsets @ np.asarray(_without(tuple(given), slow))
        bound = np.asarray([_without(tuple(m), slow) for m in rows[same]]) @ self.upsets.T  # a row per miss
        with_index = self.upsets[:, index] == 1
        fits = np.all(have[~with_index] <= bound[:, ~with_index], axis=1)
        room = np.min(bound[:, with_index] - have[with_index], axis=1)  # the up-set of index alone is one
        most = int(max(room[fits].max(initial=-1), -1))
        return most if present or most < 0 else 0


def _without(counts: Counts, backends: Sequence[int]) -> Counts:
    """Fleet ``counts`` with no replica of ``backends``."""
    drop = set(backends)
    return tuple(0 if b in drop else n for b, n in enumerate(counts))


def swapped(counts: Counts, a: int, b: int) -> Counts:
    """Fleet ``counts`` with one replica of backend ``b`` swapped for one of backend ``a``."""
    return tuple(n + (i == a) - (i == b) for i, n in enumerate(counts))


def _upset_matrix(above: Sequence[frozenset[int]]) -> np.ndarray:
    """Rows: the up-sets of each group of backends that pairs join (every set closed under
    ``above``), and each backend alone; columns: backends (Hall's condition needs no other set:
    a union across groups adds the groups' conditions)."""
    n = len(above)
    group = list(range(n))  # union-find over the pairs

    def root(b: int) -> int:
        while group[b] != b:
            b = group[b]
        return b

    for b, over in enumerate(above):
        for a in over:
            group[root(a)] = root(b)
    groups = [sorted(g) for _, g in itertools.groupby(sorted(range(n), key=root), key=root)]
    chosen = [set(c) for members in groups for size in range(1, len(members) + 1)
              for c in itertools.combinations(members, size)]  # fmt: skip
    return np.array([[int(b in c) for b in range(n)] for c in chosen if all(above[b] <= c for b in c)], dtype=np.int64)
