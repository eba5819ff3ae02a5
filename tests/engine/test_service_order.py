"""Backends that serve no slower than others, and covering by Hall's theorem.

``covers(m, u)`` must say exactly whether each replica of fleet ``u`` can be matched to its own
replica of fleet ``m`` of a backend that serves no slower (checked against a maximum bipartite
matching), and ``most_of`` must be the most replicas of one backend that keep a fleet settled
(checked by counting up). ``settles(m, u)``, with backends slower than others, must hold exactly
when ``m`` is ``u`` with replicas swapped up or added that are slower than nothing ``u`` holds
(checked by building ``m`` from ``u`` that way). On real profiles, a backend serves no slower than
another only when it batches the same way, holds at least as much and runs no pass slower; it is
slower than another when every pass both hold runs faster on the other.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from simulator.studies.dominance import ServiceOrder, batch_grid, pass_seconds, runs_slower, serves_no_slower
from simulator.studies.planning import on_one_basis
from tests.engine.conftest import CATALOG, scenario

Counts = tuple[int, ...]


def _matched(order: ServiceOrder, miss: Counts, counts: Counts) -> bool:
    """Whether every replica of ``counts`` gets its own replica of ``miss`` of a backend serving no slower."""
    left = [b for b, n in enumerate(counts) for _ in range(n)]
    right = [a for a, n in enumerate(miss) for _ in range(n)]
    if len(left) > len(right):
        return False
    if not left:
        return True
    edges = np.array([[a == b or a in order.above[b] for a in right] for b in left], dtype=float)
    matching = maximum_bipartite_matching(csr_matrix(edges), perm_type="column")
    return bool(np.all(matching >= 0))


@st.composite
def orders(draw: Any) -> ServiceOrder:
    """Up to four backends, each pair related one way or not at all (closed transitively)."""
    n = draw(st.integers(1, 4))
    above: list[set[int]] = [set() for _ in range(n)]
    for a, b in itertools.permutations(range(n), 2):
        if a < b and draw(st.booleans()):
            above[b].add(a)  # only lower indices serve no slower: no cycles drawn
    return ServiceOrder.from_above([frozenset(s) for s in above])


@settings(max_examples=150, deadline=None)
@given(orders(), st.data())
def test_a_fleet_is_covered_exactly_when_its_replicas_match_ones_serving_no_slower(order: ServiceOrder,
                                                                                 data: Any) -> None:  # fmt: skip
    n = len(order.above)
    fleet = st.tuples(*[st.integers(0, 3)] * n)
    miss, counts = data.draw(fleet), data.draw(fleet)
    assert order.covers(miss, counts) == _matched(order, miss, counts)
    index = data.draw(st.integers(0, n - 1))
    fits = [k for k in range(13) if _matched(order, miss, tuple(k if i == index else c for i, c in enumerate(counts)))]
    assert order.most_of([miss], counts, index) == max(fits, default=-1)
    assert order.most_of([], counts, index) == -1


@st.composite
def orders_with_slower(draw: Any) -> ServiceOrder:
    """An order of :func:`orders` and a drawn *slower than* relation (acyclic: only towards lower indices)."""
    order = draw(orders())
    n = len(order.above)
    slower = [frozenset(y for y in range(x) if draw(st.booleans())) for x in range(n)]
    return ServiceOrder.from_above(order.above, slower)


def _grown(order: ServiceOrder, miss: Counts, counts: Counts) -> bool:
    """Whether ``miss`` is ``counts`` with replicas swapped up (to a backend serving no slower) or
    added, none of a backend slower than one ``counts`` holds, and with no replica taken away."""
    held = {b for b, n in enumerate(counts) if n}
    slow = {x for x in range(len(counts)) if order.slower[x] & held}
    if any(miss[x] != counts[x] for x in slow):
        return False  # a slow backend's replicas added, or taken away
    rest = [b for b in range(len(counts)) if b not in slow]
    # the rest of counts' replicas each matched to its own of miss's rest, of a backend serving no slower
    return _matched(order, tuple(miss[b] if b in rest else 0 for b in range(len(miss))),
                    tuple(counts[b] if b in rest else 0 for b in range(len(counts))))  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(orders_with_slower(), st.data())
def test_a_miss_settles_a_fleet_exactly_when_it_only_adds_replicas_slower_than_nothing_the_fleet_holds(
    order: ServiceOrder, data: Any
) -> None:
    n = len(order.above)
    fleet = st.tuples(*[st.integers(0, 3)] * n)
    miss, counts = data.draw(fleet), data.draw(fleet)
    assert order.settles(miss, counts) == _grown(order, miss, counts)
    assert not order.settles(miss, counts) or order.covers(miss, counts)
    # most_of: the most n such that the miss settles the fleet with each of 0 .. n replicas of index
    index = data.draw(st.integers(0, n - 1))
    settled = [_grown(order, miss, tuple(k if i == index else c for i, c in enumerate(counts))) for k in range(13)]
    most = next((k - 1 for k, ok in enumerate(settled) if not ok), 12)
    assert order.most_of([miss], counts, index) == most


@settings(max_examples=100, deadline=None)
@given(orders_with_slower(), st.data())
def test_the_row_wise_settling_the_maximal_first_search_reads_is_the_fleet_by_fleet_rule(
    order: ServiceOrder, data: Any
) -> None:
    """``settles_each(m, F)`` (does a miss at ``m`` settle each fleet of ``F``) and
    ``settled_by_each(u, F)`` (would a miss at each fleet of ``F`` settle ``u``) say row by row what
    the construction ``_grown`` says: ``m`` is the fleet with replicas added or swapped up, none
    slower than one the fleet holds."""
    n = len(order.above)
    fleet = st.tuples(*[st.integers(0, 3)] * n)
    fleets = data.draw(st.lists(fleet, min_size=1, max_size=12))
    rows = np.asarray(fleets, dtype=np.int64)
    one = data.draw(fleet)
    slow = order.slow_mask(rows)
    assert [list(np.flatnonzero(r)) for r in slow] == [order.slow_in(f) for f in fleets]
    assert order.mixes(rows).tolist() == [any(f[x] for x in order.slow_in(f)) for f in fleets]
    assert order.settles_each(one, rows, slow).tolist() == [_grown(order, one, f) for f in fleets]
    assert order.settled_by_each(one, rows).tolist() == [_grown(order, f, one) for f in fleets]


def test_an_added_slower_replica_settles_nothing_below() -> None:
    """Backends 0 (fast) and 1 (slower than 0): a miss with a slow replica more than a fleet holding
    a fast one does not settle it, though it covers it; with no fast one held it does."""
    order = ServiceOrder.from_above([frozenset(), frozenset()], [frozenset(), frozenset({0})])
    assert order.slow_in((4, 0)) == [1] and order.slow_in((0, 3)) == []
    assert order.covers((4, 3), (4, 0)) and not order.settles((4, 3), (4, 0))
    assert order.settles((4, 3), (3, 3)) and order.settles((0, 3), (0, 2)) and order.settles((2, 3), (0, 2))
    assert order.most_of([(4, 3)], (0, 0), 0) == 0  # (k, 0) for k >= 1 holds the fast one: not settled
    assert order.most_of([(4, 3)], (0, 3), 0) == 4
    assert order.most_of([(4, 3)], (4, 0), 1) == -1  # settles (4, 3) alone: fewer slow ones may do better


def test_with_no_pairs_covering_is_backend_by_backend_and_the_order_is_closed_transitively() -> None:
    alone = ServiceOrder.from_above([frozenset(), frozenset()])
    assert alone.pairs == [] and alone.covers((2, 1), (1, 1)) and not alone.covers((2, 0), (1, 1))
    chain = ServiceOrder.from_above([frozenset(), frozenset({0}), frozenset({1})])
    assert chain.pairs == [(0, 1), (0, 2), (1, 2)]  # a >= b >= c, so a >= c
    assert chain.covers((2, 0, 0), (0, 1, 1)) and not chain.covers((0, 0, 2), (1, 0, 0))


def _plans(*backends: dict[str, Any]) -> list[Any]:
    s = scenario(backends=list(backends), router={"policy": "least-outstanding-tokens"},
                 load={"kind": "closed", "users": 4}, run={"seed": 1, "max_requests": 10})  # fmt: skip
    return on_one_basis(s, CATALOG)[1]


def _no_slower(plans: list[Any], a: int, b: int) -> bool:
    grid = batch_grid(plans[0].window)
    return serves_no_slower(plans[a], plans[b], grid, pass_seconds(plans[a], grid), pass_seconds(plans[b], grid))


OSS = {"model": "gpt-oss-120b", "weights": "mxfp4", "min_kv_tokens": 262144}


def test_a_b300_serves_no_slower_than_a_b200_and_not_the_other_way() -> None:
    """The same passes (the profiles' bandwidth and matmul rates agree), but a B300 holds more KV."""
    plans = _plans({"name": "b200", "deployment": {"hardware": "nvidia-b200"} | OSS},
                   {"name": "b300", "deployment": {"hardware": "nvidia-b300"} | OSS})  # fmt: skip
    assert plans[1].kv_blocks > plans[0].kv_blocks
    assert _no_slower(plans, 1, 0) and not _no_slower(plans, 0, 1)


def test_a_backend_that_batches_otherwise_is_never_compared() -> None:
    """An MI300X under vLLM runs every pass slower than a B200 under TensorRT-LLM and holds less, but
    vLLM chunks prefills and admits on demand: a replica of one cannot stand in for the other's."""
    plans = _plans({"name": "b200", "deployment": {"hardware": "nvidia-b200"} | OSS},
                   {"name": "mi300x", "deployment": {"hardware": "amd-mi300x"} | OSS})  # fmt: skip
    grid = batch_grid(plans[0].window)
    assert np.all(pass_seconds(plans[0], grid) < pass_seconds(plans[1], grid))
    assert not _no_slower(plans, 0, 1) and not _no_slower(plans, 1, 0)


@pytest.mark.parametrize("cap", ["500 W", "400 W"])
def test_a_power_capped_replica_serves_no_faster_than_the_same_one_uncapped(cap: str) -> None:
    small = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
    plans = _plans({"name": "free", "deployment": small}, {"name": "capped", "deployment": small | {"power_cap": cap}},
                   {"name": "twin", "deployment": small})  # fmt: skip
    assert _no_slower(plans, 0, 2) and _no_slower(plans, 2, 0)  # the same deployment: each stands in for the other
    assert _no_slower(plans, 0, 1) and not _no_slower(plans, 1, 0)


def _slower(plans: list[Any], x: int, y: int) -> bool:
    grid = batch_grid(plans[0].window)
    return runs_slower(plans[x], plans[y], grid, pass_seconds(plans[x], grid), pass_seconds(plans[y], grid))


def test_an_mi300x_is_slower_than_a_b300_an_h100_is_not_and_equal_passes_are_neither() -> None:
    """Across stacks: every pass both hold runs faster on a B300 than on an MI300X (adding an MI300X
    to 4 x h100 + 8 x b300 + 1 x b200 on scenarios/plan-coding-agents.yaml raises its p95 task time
    from 593 s to 629 s). A 2-chip H100 replica runs some passes faster than a B300 and some slower,
    and a B200 runs the same passes as a B300: neither is slower."""
    plans = _plans({"name": "b300", "deployment": {"hardware": "nvidia-b300"} | OSS},
                   {"name": "mi300x", "deployment": {"hardware": "amd-mi300x"} | OSS},
                   {"name": "h100", "deployment": {"hardware": "nvidia-h100-sxm", "chips": 2} | OSS},
                   {"name": "b200", "deployment": {"hardware": "nvidia-b200"} | OSS})  # fmt: skip
    assert _slower(plans, 1, 0) and not _slower(plans, 0, 1)
    assert not _slower(plans, 2, 0) and not _slower(plans, 0, 2)
    assert not _slower(plans, 3, 0) and not _slower(plans, 0, 3)
    assert ServiceOrder.of(plans, [True] * 4, [True] * 4).slower[1] >= {0, 3}
    assert ServiceOrder.of(plans, [True] * 4, [False] * 4).slower == (frozenset(),) * 4  # none compared
