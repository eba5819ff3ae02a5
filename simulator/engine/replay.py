"""Trace replay processes: recorded requests at their arrival times, agent sessions, task graphs.

The trace was read when the scenario was resolved (:func:`simulator.plan.resolve.load_plan`); here
its rows become processes, each format by its replay in :data:`REPLAYS`, after ``sample``
keeps each row (or session, or graph) with its probability.

Request traces (Azure, Mooncake) are open loop: each row arrives at its (windowed, scaled)
time with its lengths and, for Mooncake, its prompt block hashes, which drive prefix reuse.
Agent sessions (WEKA) are closed loop, one task per session: each call is sent
``think_time`` after the previous call's last token; sub-agents attached to a call run in
parallel first and the call waits for the slowest (fan-out, then join). Task graphs
(:mod:`simulator.io.taskgraph`) arrive at their recorded times; each step starts when the steps
it is after have finished.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import simpy

from simulator.config.workload import TraceLoad
from simulator.engine import ProcessGenerator
from simulator.engine.agents import TaskTally, await_call
from simulator.engine.clients import ClassRun, ClassSource, TaskCounter, start_load
from simulator.engine.recorder import Recorder
from simulator.io.taskgraph import GraphStep, TaskGraph
from simulator.io.traces import Session, TraceRequest, sample


def _replay_requests(load: TraceLoad, run: ClassRun, rng: np.random.Generator) -> None:
    rows = run.plan.load_plan.requests
    assert rows is not None
    kept = sample(list(rows), load.sample, rng) if load.sample < 1.0 else list(rows)
    run.env.process(_requests(run.env, kept, run.source, run.stop_s))


def _replay_sessions(load: TraceLoad, run: ClassRun, rng: np.random.Generator) -> None:
    """Sessions start evenly over ``session_spread``, each one task."""
    sessions = run.plan.load_plan.sessions
    assert sessions is not None
    kept = sample(list(sessions), load.sample, rng) if load.sample < 1.0 else list(sessions)
    for index, session in enumerate(kept):
        start = load.session_spread * index / max(1, len(kept))
        run.env.process(_session_task(run.env, session, index, start, load.think_time_scale, run.source,
                                      run.recorder, run.counter, run.plan.index))  # fmt: skip


def _replay_graphs(load: TraceLoad, run: ClassRun, rng: np.random.Generator) -> None:
    graphs = run.plan.load_plan.graphs
    assert graphs is not None
    kept = sample(list(graphs), load.sample, rng) if load.sample < 1.0 else list(graphs)
    run.env.process(_graph_arrivals(run.env, kept, load.rate_scale, run.source, run.recorder, run.counter,
                                    run.plan.index, run.stop_s))  # fmt: skip


#: How each trace format is replayed (its rows were read when the scenario was resolved).
REPLAYS: dict[str, Callable[[TraceLoad, ClassRun, np.random.Generator], None]] = {
    "azure": _replay_requests,
    "mooncake": _replay_requests,
    "weka": _replay_sessions,
    "taskgraph": _replay_graphs,
}


@start_load.register
def _trace(load: TraceLoad, run: ClassRun) -> None:
    REPLAYS[load.format](load, run, np.random.default_rng(run.arrivals))


def _requests(
    env: simpy.Environment, rows: list[TraceRequest], factory: ClassSource, stop_s: float
) -> ProcessGenerator:
    for row in rows:
        if row.arrival_s >= stop_s:
            return
        if row.arrival_s > env.now:
            yield env.timeout(row.arrival_s - env.now)
        if factory.exhausted:
            return
        factory.submit(-1, (row.input_tokens, row.output_tokens), block_hashes=row.block_hashes,
                       hash_block_tokens=row.hash_block_tokens, awaited=False)  # fmt: skip


def _session_task(
    env: simpy.Environment,
    session: Session,
    index: int,
    start_s: float,
    think_scale: float,
    factory: ClassSource,
    recorder: Recorder,
    counter: TaskCounter,
    klass: int,
) -> ProcessGenerator:
    if start_s > 0:
        yield env.timeout(start_s)
    yield from _run_session(env, session, ("session", index), think_scale, factory, recorder, counter, -1, klass)


def _run_session(
    env: simpy.Environment,
    session: Session,
    scope: tuple[object, ...],
    think_scale: float,
    factory: ClassSource,
    recorder: Recorder,
    counter: TaskCounter,
    parent: int,
    klass: int,
) -> ProcessGenerator:
    """One session (or sub-agent) as a task; its hash ids are scoped to this session.

    Its agent id is a checksum of the scope: the same in every process (``hash`` of a string is not).
    """
    tally = TaskTally(
        next(counter.tasks), zlib.crc32(repr(scope).encode()) % 2**31, env.now, parent=parent, klass=klass
    )
    for number, call in enumerate(session.calls):
        if call.subagents:
            branches = [
                env.process(
                    _run_session(
                        env, sub, (*scope, number, i), think_scale, factory, recorder, counter, tally.task_id, klass
                    )
                )
                for i, sub in enumerate(call.subagents)
            ]
            start = env.now
            yield simpy.AllOf(env, branches)
            tally.subagent_s += env.now - start
        think = call.think_s * think_scale if number else 0.0
        if think > 0:
            tally.tool_s += think
            yield env.timeout(think)
        if factory.exhausted:
            break
        request = factory.submit(tally.agent, (call.input_tokens, call.output_tokens), session=scope,
                                 task=tally.task_id, block_hashes=call.block_hashes,
                                 hash_block_tokens=session.hash_block_tokens)  # fmt: skip
        if not (yield from await_call(env, request, tally)):
            break
    tally.record(recorder, env.now)


def _graph_arrivals(
    env: simpy.Environment,
    graphs: list[TaskGraph],
    rate_scale: float,
    factory: ClassSource,
    recorder: Recorder,
    counter: TaskCounter,
    klass: int,
    stop_s: float,
) -> ProcessGenerator:
    for graph in graphs:
        arrival = graph.arrival_s / rate_scale
        if arrival >= stop_s:
            return
        if arrival > env.now:
            yield env.timeout(arrival - env.now)
        env.process(_run_graph(env, graph, factory, recorder, counter, klass))


def _run_graph(
    env: simpy.Environment, graph: TaskGraph, factory: ClassSource, recorder: Recorder, counter: TaskCounter, klass: int
) -> ProcessGenerator:
    """Each step starts when the steps it is after have finished (their call and tool time)."""
    tally = TaskTally(next(counter.tasks), -1, env.now, klass=klass)
    finished: dict[str, simpy.Event] = {}

    def step_process(step: GraphStep) -> ProcessGenerator:
        if step.after:
            yield simpy.AllOf(env, [finished[a] for a in step.after])
        request = factory.submit(-1, (step.input_tokens, step.output_tokens), session=step.session, task=tally.task_id)
        if request is None or request.done is None:
            tally.failed = True
            return
        yield request.done
        if request.failed:
            tally.failed = True
            return
        tally.call(request, env.now)
        if step.tool_s > 0:
            tally.tool_s += step.tool_s
            yield env.timeout(step.tool_s)

    for step in graph.steps:  # topological: every step's prerequisites already have processes
        finished[step.id] = env.process(step_process(step))
    yield simpy.AllOf(env, list(finished.values()))
    tally.record(recorder, env.now)
