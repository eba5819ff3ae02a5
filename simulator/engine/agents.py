"""Agent tasks as SimPy processes: a chain of model calls with tool calls in between.

Call k sends the whole conversation so far: ``context_k = system + first input +
sum_{j<k} (output_j + tool result_j)``, and waits for its last token; a tool call then takes a
sampled latency. A call is retried (same prompt) with ``retry_probability``. At the context
limit the policy truncates (keep the newest tokens) or compacts (replace the history by a
summary); either starts a new session, so the prefix cache misses once. Each task's
conversation is one session: its calls reuse their own earlier KV on the replica they stick to.

Task time splits into model time (admission to last token of each call), queueing (arrival
to admission of each call) and tool time; closed-loop agents think between tasks.
"""

from __future__ import annotations

import itertools
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from simulator.config.distributions import Distribution
from simulator.config.workload import AgentsLoad, AgentTaskSpec, FanOutSpec
from simulator.engine import ProcessGenerator
from simulator.engine.clients import REFUSED_BACKOFF_S, ClassRun, ClassSource, TaskCounter, start_load
from simulator.engine.recorder import Recorder
from simulator.engine.request import Request
from simulator.records.store import TaskRecord


def _draw(spec: Distribution, rng: np.random.Generator, minimum: float = 0.0) -> float:
    return max(minimum, spec.draw(rng))


def _tokens(spec: Distribution, rng: np.random.Generator) -> int:
    return max(1, round(_draw(spec, rng)))


@dataclass(frozen=True)
class AgentRuntime:
    """What every agent process of one workload class shares."""

    env: simpy.Environment
    source: ClassSource
    recorder: Recorder
    counter: TaskCounter
    max_context_tokens: int
    stop_s: float
    klass: int = 0


@dataclass
class TaskTally:
    """Where one task's time went, call by call."""

    task_id: int
    agent: int
    start_s: float
    calls: int = 0
    model_s: float = 0.0
    queue_s: float = 0.0
    tool_s: float = 0.0
    subagent_s: float = 0.0  # waiting at a join for sub-agents
    network_s: float = 0.0  # round trips to the backends
    parent: int = -1  # the task that spawned this one (-1: a top-level task)
    klass: int = 0  # the workload class
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    failed: bool = False

    def call(self, request: Request, now: float) -> None:
        """Account a finished call."""
        self.calls += 1
        self.network_s += 2.0 * request.one_way_s
        self.model_s += now - request.one_way_s - request.admitted_s
        self.queue_s += request.admitted_s - request.one_way_s - request.arrival_s
        self.input_tokens += request.input_tokens
        self.output_tokens += request.output_tokens
        self.cached_tokens += request.cached_tokens

    def record(self, recorder: Recorder, end_s: float) -> None:
        recorder.task(TaskRecord(
            self.task_id, self.agent, self.start_s, end_s, self.calls, self.model_s, self.queue_s, self.tool_s,
            self.subagent_s, self.network_s, self.input_tokens, self.output_tokens, self.cached_tokens,
            float(self.failed), self.parent, self.klass,
        ))  # fmt: skip


def _attempts(spec: AgentTaskSpec, rng: np.random.Generator) -> int:
    """How many times a step's call is sent: one, plus a retry per draw under ``retry_probability``."""
    attempts = 1
    while rng.random() < spec.retry_probability:
        attempts += 1
    return attempts


def _send(
    rt: AgentRuntime, tally: TaskTally, agent: int, tokens: tuple[int, int], session: int, attempts: int
) -> Generator[simpy.Event, Any, None]:
    """Send one step's call ``attempts`` times in a row, waiting for each; marks the task failed
    and stops at the first call refused (by the source, or by an API after its retries)."""
    for _ in range(attempts):
        request = rt.source.submit(agent, tokens, session=session, task=tally.task_id)
        if not (yield from await_call(rt.env, request, tally)):
            return


def await_call(env: simpy.Environment, request: Request | None, tally: TaskTally) -> Generator[simpy.Event, Any, bool]:
    """Wait for a call a task submitted and account it; False (the task marked failed) when it was
    refused: by the source (None, or never to finish), or by an API after the client's retries."""
    if request is None or request.done is None:
        tally.failed = True
        return False
    yield request.done
    if request.failed:  # an API refused it until the client's retries ran out
        tally.failed = True
        return False
    tally.call(request, env.now)
    return True


def _fan_out(
    rt: AgentRuntime, fanout: FanOutSpec, agent: int, rng: np.random.Generator, tally: TaskTally
) -> Generator[simpy.Event, Any, int]:
    """Run the sub-agents as tasks of their own and wait for all; the tokens their findings add."""
    env = rt.env
    start = env.now
    branches = [
        env.process(run_task(rt, fanout.subagent, agent, np.random.default_rng(rng.integers(2**63)), tally.task_id))
        for _ in range(_tokens(fanout.branches, rng))
    ]
    yield simpy.AllOf(env, branches)
    tally.subagent_s += env.now - start
    return sum(_tokens(fanout.result_tokens, rng) for _ in branches)


def _use_tools(
    rt: AgentRuntime, spec: AgentTaskSpec, rng: np.random.Generator, tally: TaskTally
) -> Generator[simpy.Event, Any, int]:
    """Call the step's tools at once and wait for the slowest; the tokens their outputs add."""
    calls_at_once = _tokens(spec.parallel_tools, rng)
    latency = max(_draw(spec.tool.latency_s, rng) for _ in range(calls_at_once))
    tally.tool_s += latency
    if latency > 0:
        yield rt.env.timeout(latency)
    return sum(_tokens(spec.step_input_tokens, rng) for _ in range(calls_at_once))


def run_task(
    rt: AgentRuntime, spec: AgentTaskSpec, agent: int, rng: np.random.Generator, parent: int = -1
) -> Generator[simpy.Event, Any, bool]:
    """One task from its first call to its answer; records the task when it ends; True if it failed."""
    env = rt.env
    tally = TaskTally(next(rt.counter.tasks), agent, env.now, parent=parent, klass=rt.klass)
    session = next(rt.counter.sessions)
    steps = _tokens(spec.steps, rng)
    running = None if parent != -1 else rt.recorder.task_started(tally.task_id, env.now, rt.klass,
                                                                 spec.tool_waits(steps))  # fmt: skip
    context = _tokens(spec.system_prompt_tokens, rng) + _tokens(spec.first_input_tokens, rng)
    limit = spec.context_limit(rt.max_context_tokens)
    for step in range(steps):
        output = _tokens(spec.output_tokens, rng)
        if context + output > limit:
            context = spec.compacted_context(limit, output)
            session = next(rt.counter.sessions)
        yield from _send(rt, tally, agent, (int(context), output), session, _attempts(spec, rng))
        if tally.failed:
            break
        context += output
        if step == steps - 1:
            break
        fanout = spec.fanout
        if fanout is not None and step + 1 == fanout.after_step:
            context += yield from _fan_out(rt, fanout, agent, rng, tally)
        else:
            if running is not None:
                running.waits_left -= 1
            context += yield from _use_tools(rt, spec, rng, tally)
    tally.record(rt.recorder, env.now)
    return tally.failed


def closed_loop_agent(
    rt: AgentRuntime, load: AgentsLoad, spec: AgentTaskSpec, agent: int, rng: np.random.Generator
) -> ProcessGenerator:
    """Join at :meth:`~simulator.config.workload.AgentsLoad.joins_s`, then think, run a task, repeat
    (the interactive response-time loop, one task per cycle).

    After a failed task (a call refused) the agent backs off ``REFUSED_BACKOFF_S``.
    """
    joins_s = load.joins_s(agent)
    if joins_s > 0:
        yield rt.env.timeout(joins_s)
    while True:
        think = _draw(load.think_time_s, rng)
        if think > 0:
            yield rt.env.timeout(think)
        if rt.env.now >= rt.stop_s or rt.source.exhausted:
            return
        failed = yield rt.env.process(run_task(rt, spec, agent, rng))
        if failed:
            yield rt.env.timeout(REFUSED_BACKOFF_S)


def open_loop_tasks(
    rt: AgentRuntime, load: AgentsLoad, spec: AgentTaskSpec, rng: np.random.Generator
) -> ProcessGenerator:
    """Tasks arrive as a Poisson process at ``tasks_per_s``; each is its own process and agent."""
    assert load.tasks_per_s is not None
    for agent in itertools.count():
        yield rt.env.timeout(rng.exponential(1.0 / load.tasks_per_s))
        if rt.env.now >= rt.stop_s or rt.source.exhausted:  # checked after the wait, at the arrival
            return
        rt.env.process(run_task(rt, spec, agent, np.random.default_rng(rng.integers(2**63))))


def _agents(load: AgentsLoad, run: ClassRun) -> None:
    """Closed loop: one process per agent, each on its own stream; open loop: one arrival process."""
    task = run.plan.task
    assert task is not None
    rt = AgentRuntime(run.env, run.source, run.recorder, run.counter, run.plan.max_tokens, run.stop_s, run.plan.index)
    if load.agents is None:
        rt.env.process(open_loop_tasks(rt, load, task, np.random.default_rng(run.arrivals)))
        return
    for agent, ss in enumerate(run.clients.spawn(load.agents)):
        rt.env.process(closed_loop_agent(rt, load, task, agent, np.random.default_rng(ss)))


# registered by a call, not ``@start_load.register``: mypyc cannot compile that decorator in this module
start_load.register(AgentsLoad, _agents)
