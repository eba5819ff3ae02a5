"""Which parallel layout to serve a model with, chosen for the question asked.

A mixture-of-experts model on a GPU domain can be served three ways (TensorRT-LLM, SGLang and
vLLM all ship them):

- ``TPn EPn``: attention split tensor-parallel over the n chips (two all-reduces per layer);
  the experts spread over the same chips, every chip holding every token after the attention
  all-reduce, so the expert outputs are all-reduced too;
- ``TPn`` with each expert split over all n chips (``EP1``), the dense-model layout;
- ``DPn EPn``: every chip runs attention on its own sequences (no all-reduce, no replicated KV,
  n copies of attention and embeddings), experts spread over the chips and reached by a
  dispatch and a combine all-to-all per MoE layer.

Latency at one user favours the layout that moves the fewest bytes per token; throughput
favours the one that holds the most sequences and communicates least per token. The choice
is made by the closed-form estimate (:mod:`simulator.analytic.estimate`):

- concurrency 1: the highest per-user output tok/s;
- otherwise the highest output tok/s per chip at the stated concurrency, or at saturation
  (the most sequences whose KV fits) when none is stated.

A layout the deployment pins (``attention_parallel``, ``expert_parallel``, ``tensor_parallel``)
is not searched. Dense models and layer-pipelined machines have one candidate.

The choice depends on the spec, the question and the profiles it reads (hardware, model, stack,
a separate draft model) alone, so the last :data:`CHOICES_KEPT` are kept and an equal request is
answered from them (a plan resolves the same backends for every candidate it simulates).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.kept import Kept
from simulator.analytic.placement import Deployment, PlacementError, plan
from simulator.analytic.speculation import draft_architecture
from simulator.config.deployment import DEFAULT_MIN_KV_TOKENS, DeploymentSpec
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from simulator.config.model import ModelSpec
from simulator.config.stack import StackProfile

#: The question a layout is chosen for when none is given: throughput at saturation on a
#: 1,000-token prompt and a 1,000-token answer (the demo's and Artificial Analysis's lengths).
DEFAULT_INPUT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 1000


@dataclass(frozen=True)
class Question:
    """What a deployment is laid out for: request lengths and a concurrency (None: saturation)."""

    input_tokens: int = DEFAULT_INPUT_TOKENS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    concurrency: int | None = None

    @property
    def metric(self) -> str:
        return "per-user output tok/s" if self.concurrency == 1 else "output tok/s per chip"


@dataclass(frozen=True)
class Candidate:
    deployment: Deployment
    score: float  # the question's metric


@dataclass(frozen=True)
class LayoutChoice:
    """The layout that won, the metric it maximised, and every layout tried (best first)."""

    question: Question
    ranked: tuple[Candidate, ...]

    @property
    def deployment(self) -> Deployment:
        return self.ranked[0].deployment

    @property
    def runner_up(self) -> Candidate | None:
        """The best layout that differs from the winner (specs that place alike, such as data- and
        tensor-parallel attention on one chip, are one layout)."""
        best = self.ranked[0].deployment.layout
        return next((c for c in self.ranked[1:] if c.deployment.layout != best), None)

    def describe(self) -> str:
        """The winner and the runner-up in words."""
        best = self.ranked[0]
        text = f"layout {best.deployment.layout} ({best.score:,.4g} {self.question.metric})"
        if self.runner_up is not None:
            text += f"; runner-up {self.runner_up.deployment.layout} ({self.runner_up.score:,.4g})"
        return text


def layout_specs(spec: DeploymentSpec, moe: bool, layer_pipelined: bool) -> list[DeploymentSpec]:
    """The layouts to try: the spec itself when pinned, dense or layer-pipelined; else the three MoE layouts."""
    pinned = spec.attention_parallel is not None or spec.expert_parallel is not None or spec.tensor_parallel
    if pinned or not moe or layer_pipelined:
        return [spec]
    return [
        spec.model_copy(update={"attention_parallel": "tensor"}),
        spec.model_copy(update={"attention_parallel": "tensor", "expert_parallel": 1}),
        spec.model_copy(update={"attention_parallel": "data"}),
    ]


def _score(deployment: Deployment, question: Question) -> float:
    prompt, answer = question.input_tokens, question.output_tokens
    users = question.concurrency or saturation_concurrency(deployment, prompt, answer)
    result = estimate(deployment, prompt, answer, users, strict=False)
    if question.concurrency == 1:
        return result.per_user_output_tok_s or 1.0 / result.ttft_s
    return result.aggregate_output_tok_s / deployment.replica_chips


#: Layout choices kept (:func:`choose_layout`), least recently used out.
CHOICES_KEPT = 64
_choices: Kept[tuple[object, ...], LayoutChoice] = Kept(CHOICES_KEPT)  # by what was asked


def choose_layout(catalog: Catalog, spec: DeploymentSpec, question: Question | None = None) -> LayoutChoice:
    """Every layout that fits, scored for ``question`` and ranked (module docstring); an equal
    request (the same spec and question of equal profiles) gets the choice kept from before.

    Raises
    ------
    PlacementError
        If no layout fits (the first candidate's reason).
    """
    question = question or Question()
    hardware = catalog.hardware(spec.hardware)
    model = catalog.model(spec.model)
    stack = catalog.stack(spec.stack or hardware.execution.default_stack)
    draft = spec.speculative.draft_model if spec.speculative is not None else None
    asked = (spec, question, hardware, model, stack, catalog.model(draft) if draft is not None else None)
    choice = _choices.get(asked)
    if choice is None:
        choice = _choices.keep(asked, _choose(catalog, spec, question, hardware, model, stack))
    return choice


def _choose(
    catalog: Catalog, spec: DeploymentSpec, question: Question, hardware: HardwareProfile, model: ModelSpec,
    stack: StackProfile,
) -> LayoutChoice:  # fmt: skip
    candidates: list[Candidate] = []
    first_error: PlacementError | None = None
    for variant in layout_specs(spec, model.moe is not None, hardware.execution.layer_pipelined):
        try:
            deployment = with_draft(plan(hardware, model, variant, stack), catalog)
        except PlacementError as exc:
            first_error = first_error or exc
            continue
        candidates.append(Candidate(deployment, _score(deployment, question)))
    if not candidates:
        assert first_error is not None
        raise first_error
    ranked = sorted(candidates, key=lambda c: -c.score)
    return LayoutChoice(question, tuple(ranked))


def with_draft(deployment: Deployment, catalog: Catalog) -> Deployment:
    """The deployment with its speculative draft placed as the spec says (:mod:`simulator.analytic.speculation`).

    ``beside``: on the same chips and tier; the draft's weights and KV come out of the target's KV
    budget. ``own-chips``: on chips of its own (``draft_chips``, or the fewest whose memory holds
    the draft and KV for as many tokens as the target's budget); the target's KV budget is
    untouched, the replica occupies (and pays for) both sets of chips, and the draft's passes run
    at its own chips' speed.
    """
    spec = deployment.speculative
    if spec is None:
        return deployment
    separate = catalog.model(spec.draft_model) if spec.draft_model is not None else None
    shape = draft_architecture(deployment.model, spec, separate)
    weights = None if separate is not None else deployment.activations  # heads ship in 16-bit
    if spec.placement == "own-chips":
        apart = DeploymentSpec(
            hardware=deployment.hardware.id, model=shape.id, chips=spec.draft_chips, weights=weights,
            min_kv_tokens=max(1, deployment.max_kv_tokens), stack=deployment.stack.id,
        )  # fmt: skip
        try:
            draft = plan(deployment.hardware, shape, apart, deployment.stack)
        except PlacementError as exc:
            raise PlacementError(f"speculative.draft_chips: the draft on its own chips: {exc}") from None
        return replace(deployment, draft=draft, draft_chips=draft.chips)
    draft_spec = DeploymentSpec(
        hardware=deployment.hardware.id, model=shape.id, chips=deployment.chips, weights=weights,
        min_kv_tokens=1, stack=deployment.stack.id,
    )  # fmt: skip
    draft = plan(deployment.hardware, shape, draft_spec, deployment.stack)
    kv_per_token = deployment.kv_bytes_per_token + draft.kv_bytes_per_token
    budget = deployment.kv_budget_bytes - draft.weight_bytes
    if budget < kv_per_token * DEFAULT_MIN_KV_TOKENS:
        raise PlacementError(
            f"the {spec.draft} draft ({draft.weight_bytes / 1e9:.1f} GB) leaves too little KV room beside "
            f"{deployment.model.id} on {deployment.chips} x {deployment.hardware.id}"
        )
    return replace(
        deployment, draft=draft, kv_bytes_per_token=kv_per_token, kv_budget_bytes=budget,
        weight_bytes=deployment.weight_bytes + draft.weight_bytes,
    )  # fmt: skip


def deploy(catalog: Catalog, spec: DeploymentSpec, question: Question | None = None) -> Deployment:
    """The deployment ``spec`` asks for, its layout chosen for ``question`` when not pinned
    (the stack: the spec's, else the hardware's default)."""
    return choose_layout(catalog, spec, question).deployment
