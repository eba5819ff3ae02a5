"""Agentic workloads: a task is a chain of model calls with tool calls in between.

Each call re-sends the conversation so far (system prompt, user turn, every earlier output and
tool result), so the prompt grows call after call up to the context limit, where a
``truncate`` policy keeps the newest tokens and a ``compact`` policy replaces the history by a
summary of ``compact_to_tokens``. Either way the cached prefix is lost at that point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from simulator.config.base import Profile, Spec, reference_tag
from simulator.config.distributions import Constant, Distribution, TokenCounts
from simulator.units import Seconds

Probability = Annotated[float, Field(ge=0.0, lt=1.0)]


class ToolSpec(Spec):
    kind: str = Field(description="code-execution, web-search, file-read, ...")
    latency_s: Distribution


class ContextPolicy(Spec):
    policy: Literal["truncate", "compact"] = "truncate"
    max_tokens: Annotated[int, Field(ge=1)] | None = Field(None, description="empty: the model's context window")
    compact_to_tokens: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _compact_size(self) -> ContextPolicy:
        if self.policy == "compact" and self.compact_to_tokens is None:
            raise ValueError("compact needs compact_to_tokens")
        return self


class FanOutSpec(Spec):
    """Sub-agents the lead spawns after one of its calls; its next call waits for all of them.

    Each sub-agent is a task of its own with its own context; each adds ``result_tokens`` of
    findings to the lead's context at the join.
    """

    after_step: Annotated[int, Field(ge=1)] = Field(description="fan out after this call (1 = the first)")
    branches: Distribution = Field(description="sub-agents spawned (rounded, at least 1)")
    subagent: AgentTaskSpec
    result_tokens: TokenCounts


class AgentTaskSpec(Spec):
    steps: Distribution = Field(description="model calls per task (rounded, at least 1)")
    system_prompt_tokens: TokenCounts
    first_input_tokens: TokenCounts = Field(description="the user's turn that starts the task")
    step_input_tokens: TokenCounts = Field(description="tool result appended before each later call")
    output_tokens: TokenCounts = Field(description="reasoning plus a tool call, or the answer, per call")
    tool: ToolSpec
    parallel_tools: Distribution = Field(
        default_factory=lambda: Constant(value=1.0),
        description="tool calls issued together after a call; the step waits for the slowest",
    )
    retry_probability: Probability = Field(0.0, description="a call is sent again (same prompt) with this chance")
    context: ContextPolicy = Field(default_factory=ContextPolicy)
    fanout: FanOutSpec | None = None

    @model_validator(mode="after")
    def _calls_have_tokens(self) -> AgentTaskSpec:
        for name in ("steps", "first_input_tokens", "output_tokens"):
            mean = getattr(self, name).mean
            if mean < 1:
                raise ValueError(f"{name}: must average at least 1 (calls of at least 1 token); got {mean:g}")
        return self

    def tool_waits(self, steps: int) -> int:
        """The tool waits of a task of ``steps`` calls: one after every call but the last, except the
        call the fan-out follows (its step waits for the sub-agents instead)."""
        fans_out = self.fanout is not None and 1 <= self.fanout.after_step <= steps - 1
        return max(0, steps - 1 - fans_out)

    def context_limit(self, max_context_tokens: int) -> int:
        """The most tokens a call may hold: the policy's ``max_tokens``, at most ``max_context_tokens``."""
        return min(self.context.max_tokens or max_context_tokens, max_context_tokens)

    def compacted_context(self, limit: int, output: int) -> int:
        """The context a call starts from when the next ``output`` tokens would pass ``limit``: the
        compaction target under ``compact`` (else the most that fits), never above ``limit - output``."""
        compact = self.context.compact_to_tokens if self.context.policy == "compact" else None
        return max(1, min(compact or limit - output, limit - output))

    def mean_call(self, max_context_tokens: int) -> tuple[float, float]:
        """The mean (prompt, output) tokens of the task's calls on its *mean path*, where every draw
        takes its mean: ``S = max(1, round(E[steps]))`` calls of ``o = max(1, round(E[output]))``
        tokens each, call ``k`` sending the context ``c_k``,

            c_0 = E[system] + E[first input],  c_(k+1) = c_k + o + E[added after call k],

        the added tokens being ``E[parallel_tools] E[step_input]`` after a call (``E[branches]
        E[result]`` at the fan-out), and ``c_k`` replaced by :meth:`compacted_context` where ``c_k +
        o > limit`` (:meth:`context_limit` of the replica's ``max_context_tokens``), as a task's
        context is. The mean prompt is ``sum_k c_k / S``: the context a call
        holds, which grows call after call (the first call's prompt is the task's shortest). Retries
        resend a step's prompt, the same factor on every step, so they leave the mean as it is; a
        sub-agent's own calls are not counted."""
        limit = self.context_limit(max_context_tokens)
        steps = max(1, round(self.steps.mean))
        output = max(1, round(self.output_tokens.mean))
        context = self.system_prompt_tokens.mean + self.first_input_tokens.mean
        fanout = self.fanout
        prompts = 0.0
        for step in range(steps):
            if context + output > limit:
                context = float(self.compacted_context(limit, output))
            prompts += context
            context += output
            if fanout is not None and step + 1 == fanout.after_step:
                context += fanout.branches.mean * fanout.result_tokens.mean
            else:
                context += self.parallel_tools.mean * self.step_input_tokens.mean
        return prompts / steps, float(output)


class WorkloadSpec(Profile):
    """A named, documented workload (``workloads/<id>.yaml``); ``sources`` say where its numbers come from."""

    description: str
    task: AgentTaskSpec


#: A workload by id, or the workload itself.
WorkloadRef = Annotated[
    Annotated[str, Tag("id")] | Annotated[WorkloadSpec, Tag("profile")], Discriminator(reference_tag)
]


class AgentsLoad(Spec):
    """Agents running tasks: closed loop (``agents`` concurrent) or open loop (``tasks_per_s``)."""

    kind: Literal["agents"] = "agents"
    workload: WorkloadRef = Field(description="workload id in workloads/, or the whole workload (inline)")
    agents: Annotated[int, Field(ge=1)] | None = None
    tasks_per_s: Annotated[float, Field(ge=1e-6, le=1e9)] | None = Field(
        None, description="one task in ~11 days to a billion a second (as a scenario's arrival rate)"
    )
    think_time_s: Distribution = Field(
        default_factory=lambda: Constant(value=0.0), description="closed loop: pause between an agent's tasks"
    )
    ramp_s: Annotated[Seconds, Field(ge=0.0)] = Field(
        0.0,
        description="closed loop: agents join evenly over [0, ramp_s), agent i after i x ramp_s / agents "
        "(0: all start together, a synchronised cold start)",
    )

    @property
    def workload_id(self) -> str:
        return self.workload if isinstance(self.workload, str) else self.workload.id

    @model_validator(mode="after")
    def _one_mode(self) -> AgentsLoad:
        if (self.agents is None) == (self.tasks_per_s is None):
            raise ValueError("give exactly one of agents (closed loop) or tasks_per_s (open loop)")
        if self.ramp_s > 0 and self.agents is None:
            raise ValueError("ramp_s spreads the starts of closed-loop agents: give agents, or drop ramp_s")
        return self

    def joins_s(self, agent: int) -> float:
        """When closed-loop agent ``agent`` (0-based) begins: ``agent x ramp_s / agents``."""
        return self.ramp_s * agent / self.agents if self.agents else 0.0


class TraceLoad(Spec):
    """Replay a recorded trace: requests at their arrival times, or agent sessions closed loop."""

    kind: Literal["trace"] = "trace"
    format: Literal["azure", "mooncake", "weka", "taskgraph"]
    path: Path = Field(description="trace file; for weka a session file or a directory of them")
    rate_scale: Annotated[float, Field(gt=0.0)] = Field(1.0, description="replay at k times the recorded rate")
    window: tuple[Seconds, Seconds] | None = Field(None, description="[start, end) of the trace to replay")
    sample: Annotated[float, Field(gt=0.0, le=1.0)] = Field(1.0, description="keep each request/session w.p.")
    session_spread: Annotated[Seconds, Field(ge=0.0)] = Field(
        0.0, description="weka: sessions start evenly over [0, session_spread] (no absolute times exist)"
    )
    think_time_scale: Annotated[float, Field(ge=0.0)] = Field(
        1.0, description="weka: multiply recorded think times (0 replays back-to-back)"
    )

    @model_validator(mode="after")
    def _window_ordered(self) -> TraceLoad:
        if self.window is not None and not self.window[0] < self.window[1]:
            raise ValueError(f"window: start ({self.window[0]:g} s) must be before end ({self.window[1]:g} s)")
        return self


FanOutSpec.model_rebuild()
