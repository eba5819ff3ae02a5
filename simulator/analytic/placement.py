"""The memory plan: where weights and KV live, how many chips, which layout, how much KV.

Assumptions:

- Weights and KV are served from one tier: the fastest tier with ``holds_weights`` in
  which weights plus a KV floor (``min_kv_tokens`` of the deployment, default 4,096) fit within
  ``usable_fraction`` of capacity, on at most ``max_chips`` chips. Slower weight-holding tiers
  beneath it hold further *resident* models (SambaNova's DDR); they are reported, not read.
- Automatic layout. Spatial (``layer_pipelined``) machines pipeline over layers and split a
  layer over chips only when one layer does not fit on one chip. Other machines split
  tensor-parallel up to the scale-up domain (a power of two that divides the KV heads), then
  add pipeline stages across domains.
- Experts: spread over every chip of a stage unless the deployment says otherwise, never over
  more ranks than there are routed experts (then each expert is split over the rest).
- Chips come in multiples of ``execution.deployment_unit_chips`` where the product is sold
  as a unit (a rack).
- KV replication: with tensor parallelism wider than the KV heads each chip keeps the heads
  it needs, so the KV is stored ``tp / min(tp, kv_heads)`` times; an MLA latent is stored
  ``tp`` times (every chip needs the whole latent).

Capacity law (Vidur's MemoryPlanner, generalised over tiers): the serving stack's documented
rule where it has one (``StackProfile.kv_memory``: TensorRT-LLM a fraction of the memory free
after weights and its runtime reserve, vLLM and SGLang a fraction of total memory less both),
else the weights tier's usable share less the weights::

    kv_budget = chips * capacity * usable_fraction - weight_bytes
    max_tokens = floor(kv_budget / kv_bytes_per_token)

The tier's ``usable_fraction`` still decides where the weights fit and how many chips they need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from simulator.analytic.architecture import group_params, kv_tokens_held, layer_shapes, moe_layer_params
from simulator.analytic.precision import BYTES_PER_ELEMENT, group_precisions
from simulator.config.base import Precision
from simulator.config.deployment import DeploymentSpec
from simulator.config.hardware import HardwareProfile, MemoryTier
from simulator.config.model import ModelSpec, TensorGroup
from simulator.config.speculation import SpeculativeSpec
from simulator.config.stack import StackProfile
from simulator.errors import InfersimError

#: Largest system the automatic placement will consider, in scale-up domains.
MAX_DOMAINS = 64
#: Re-layouts allowed while growing a deployment whose replicated KV does not fit.
MAX_LAYOUT_ATTEMPTS = 8


class PlacementError(InfersimError):
    """The model cannot be placed as asked; the message says what it would need. ``field``: the
    deployment field the message starts with, when it concerns one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Deployment:
    """A resolved deployment: everything the step-time model needs, as SI floats."""

    hardware: HardwareProfile
    model: ModelSpec
    stack: StackProfile
    chips: int
    tensor_parallel: int
    pipeline_parallel: int
    expert_parallel: int
    weights: Precision  # the headline weight format (the quantised groups')
    kv_cache: Precision
    activations: Precision
    speculative: SpeculativeSpec | None
    weights_tier: MemoryTier
    resident_tiers: tuple[MemoryTier, ...]
    weight_bytes: float  # whole model, all chips
    kv_bytes_per_token: float  # all layers, one token of context, stored (with replication)
    kv_budget_bytes: float  # all chips
    chips_per_replica_domain: int
    precision: dict[TensorGroup, Precision] = field(default_factory=dict)  # storage precision per group
    attention_dp: int = 1  # data-parallel attention ranks (1: attention is tensor-parallel)
    draft: Deployment | None = None  # the speculative draft: beside the target (its memory taken here) or apart
    draft_chips: int = 0  # chips of a draft on chips of its own (0: none, or the draft is beside the target)
    spilled: dict[TensorGroup, tuple[MemoryTier, float]] = field(default_factory=dict)  # (slower tier, share)

    def read_rate(self, group: TensorGroup) -> float:
        """Achievable bytes/s per chip at which a group's weights are read: a share ``f`` in a slower
        tier makes it ``1 / ((1 - f) / r_fast + f / r_slow)`` (the two parts read one after the other)."""
        fast = self.weights_tier
        rate = fast.bandwidth.value * fast.efficiency.value
        if group not in self.spilled:
            return rate
        slow, share = self.spilled[group]
        return 1.0 / ((1.0 - share) / rate + share / (slow.bandwidth.value * slow.efficiency.value))

    def bytes_per_param(self, group: TensorGroup) -> float:
        return BYTES_PER_ELEMENT[self.precision[group]]

    @property
    def layers_per_stage(self) -> float:
        return self.model.num_layers / self.pipeline_parallel

    @property
    def max_kv_tokens(self) -> int:
        return int(self.kv_budget_bytes // self.kv_bytes_per_token)

    def kv_bytes_for_context(self, context_tokens: float) -> float:
        """Stored KV bytes of one sequence with this context (sliding windows applied), plus a hybrid
        model's recurrent state: ``hybrid.state_elements_per_sequence`` in the KV cache's precision,
        whatever the context (the state is split across the ranks, not replicated)."""
        per_token_layer = self.kv_bytes_per_token / self.model.num_layers
        hybrid = self.model.hybrid
        state = hybrid.state_elements_per_sequence * BYTES_PER_ELEMENT[self.kv_cache] if hybrid else 0.0
        return float(kv_tokens_held(self.model, context_tokens)) * per_token_layer + state

    @property
    def max_batch_size(self) -> int:
        """Sequences one replica runs at once, at most: the stack's cap on this chip per attention rank."""
        return self.stack.batch_cap(self.hardware.id) * self.attention_dp

    @property
    def max_batched_tokens(self) -> int:
        """Tokens one replica batches in an iteration, at most: the stack's cap on this chip per attention rank."""
        return self.stack.token_budget(self.hardware.id) * self.attention_dp

    @property
    def layout(self) -> str:
        """The parallel layout in the serving stacks' words, e.g. ``TP8``, ``DP8 EP8``, ``TP4 EP4 PP2``."""
        parts = [f"DP{self.attention_dp}" if self.attention_dp > 1 else f"TP{self.tensor_parallel}"]
        if self.model.moe is not None and self.expert_parallel > 1:
            parts.append(f"EP{self.expert_parallel}")
        if self.pipeline_parallel > 1:
            parts.append(f"PP{self.pipeline_parallel}")
        return " ".join(parts)

    def max_sequences(self, context_tokens: float) -> int:
        """Sequences of this context whose KV fits, capped by the batch limit."""
        fit = int(self.kv_budget_bytes // self.kv_bytes_for_context(context_tokens))
        return min(fit, self.max_batch_size)

    @property
    def replica_chips(self) -> int:
        """Chips one replica occupies and is paid for: the target's, plus a draft's own chips."""
        return self.chips + self.draft_chips

    @property
    def api_s(self) -> float:
        """Seconds each request pays outside the replica on a hosted API (its stack's ``api``), else 0."""
        return self.stack.api.total_s if self.stack.api is not None else 0.0

    @property
    def resident_models_capacity_bytes(self) -> float:
        """Capacity of slower weight tiers that can hold further resident models."""
        return sum(t.capacity.value * t.usable_fraction.value for t in self.resident_tiers) * self.chips


#: Which groups leave the fastest tier first when the weights do not fit it: the embedding (only
#: the rows of the step's tokens are read), then the experts (a step reads the ones it routes to),
#: then the rest, streamed every step.
SPILL_ORDER: tuple[TensorGroup, ...] = ("embeddings", "experts", "dense_ffn", "lm_head", "router", "attention")


def _group_bytes(model: ModelSpec, precision: dict[TensorGroup, Precision], group: TensorGroup) -> float:
    return group_params(model)[group] * BYTES_PER_ELEMENT[precision[group]]


def spill(
    model: ModelSpec, precision: dict[TensorGroup, Precision], chips: int, kv_floor: float, tiers: list[MemoryTier]
) -> dict[TensorGroup, tuple[MemoryTier, float]]:
    """The share of each group moved to the next weight tier, in :data:`SPILL_ORDER`, just enough
    that the rest and the KV floor fit the fastest tier on ``chips`` chips; empty when even that
    does not fit (SambaNova keeps part of the experts in DDR and the rest in HBM this way)."""
    fast, slow = tiers[0], tiers[1]
    excess = (
        sum(_group_bytes(model, precision, g) for g in SPILL_ORDER)
        + kv_floor
        - (chips * fast.capacity.value * fast.usable_fraction.value)
    )
    slow_room = chips * slow.capacity.value * slow.usable_fraction.value
    if excess > slow_room:
        return {}
    moved: dict[TensorGroup, tuple[MemoryTier, float]] = {}
    for group in SPILL_ORDER:
        size = _group_bytes(model, precision, group)
        if excess <= 0:
            break
        if size > 0:
            share = min(1.0, excess / size)
            moved[group] = (slow, share)
            excess -= share * size
    return moved if excess <= 0 else {}


def routed_expert_params(model: ModelSpec) -> float:
    """Parameters of the routed experts, the only weights data-parallel attention does not replicate."""
    moe = model.moe
    return moe.num_moe_layers * moe.num_routed_experts * layer_shapes(model).expert_params if moe else 0.0


def weight_bytes_of(model: ModelSpec, precision: dict[TensorGroup, Precision], attention_dp: int = 1) -> float:
    """Stored weight bytes on all chips: every group's parameters at its precision; with
    data-parallel attention every rank keeps its own copy of all but the routed experts."""
    routed = routed_expert_params(model) * BYTES_PER_ELEMENT[precision["experts"]]
    total = sum(params * BYTES_PER_ELEMENT[precision[group]] for group, params in group_params(model).items())
    return attention_dp * (total - routed) + routed


def _data_parallel_attention(model: ModelSpec, stage_chips: int) -> tuple[int, int]:
    """(attention ranks, tensor parallel) when every chip of a stage runs attention on its own sequences."""
    if model.moe is None:
        raise PlacementError(
            f"{model.id} is dense: data-parallel attention only pays for MoE experts; for a dense model "
            "use more replicas instead"
        )
    return stage_chips, 1


def _default_expert_parallel(model: ModelSpec, stage_chips: int) -> int:
    """Experts spread over every chip of a stage, or over the most chips that divide it and leave
    each rank at least one expert (8 experts on 16 chips: EP8, each expert split over 2)."""
    if model.moe is None:
        return 1
    return max(d for d in range(1, stage_chips + 1) if stage_chips % d == 0 and d <= model.moe.num_routed_experts)


def _check_replicated_fit(
    model: ModelSpec,
    precision: dict[TensorGroup, Precision],
    tier: MemoryTier,
    dp: int,
    pp: int,
    spec: DeploymentSpec,
    hardware: HardwareProfile,
) -> None:
    """Each chip must hold its copy of the replicated weights and its share of the experts."""
    ep = spec.expert_parallel or dp
    routed = routed_expert_params(model) * BYTES_PER_ELEMENT[precision["experts"]]
    replicated = weight_bytes_of(model, precision) - routed
    per_chip = (replicated + routed / ep) / pp
    room = tier.capacity.value * tier.usable_fraction.value
    if per_chip > room:
        raise PlacementError(
            f"{model.id} with data-parallel attention on {dp * pp} x {hardware.id}: each chip needs "
            f"{per_chip / 1e9:.1f} GB (its own copy of attention, dense layers and embeddings plus 1/{ep} of the "
            f"experts) but has {room / 1e9:.1f} GB of {tier.name}"
        )


def kv_budget_bytes(stack: StackProfile, tier: MemoryTier, chips: int, weight_bytes: float) -> float:
    """KV bytes on ``chips`` chips of ``tier`` holding ``weight_bytes`` of weights: the stack's rule, else
    ``chips * capacity * usable_fraction - weight_bytes`` (module docstring)."""
    if stack.kv_memory is not None:
        return stack.kv_memory.kv_bytes(chips, tier.capacity.value, weight_bytes)
    return chips * tier.capacity.value * tier.usable_fraction.value - weight_bytes


def kv_replication(model: ModelSpec, tensor_parallel: int) -> float:
    if model.attention.mla is not None:
        return float(tensor_parallel)
    return tensor_parallel / min(tensor_parallel, model.attention.num_kv_heads)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _largest_layer_bytes(model: ModelSpec, precision: dict[TensorGroup, Precision]) -> float:
    shapes = layer_shapes(model)
    dense = shapes.dense_ffn_params * BYTES_PER_ELEMENT[precision["dense_ffn"]] if model.num_dense_layers else 0.0
    moe = moe_layer_params(model, shapes) * BYTES_PER_ELEMENT[precision["experts"]]
    return shapes.attention_params * BYTES_PER_ELEMENT[precision["attention"]] + max(dense, moe)


def _auto_layout(
    hardware: HardwareProfile, model: ModelSpec, chips: int, tier: MemoryTier, precision: dict[TensorGroup, Precision]
) -> tuple[int, int]:
    """(tensor_parallel, pipeline_parallel) for ``chips`` chips, as the module docstring says."""
    domain = hardware.interconnect.domain_chips.value
    if hardware.execution.layer_pipelined:
        per_chip = tier.capacity.value * tier.usable_fraction.value
        tp = max(1, math.ceil(_largest_layer_bytes(model, precision) / per_chip))
        pp = min(model.num_layers, math.ceil(chips / tp))
        return max(tp, math.ceil(chips / pp)), pp
    tp = 1
    while tp * 2 <= min(chips, domain) and model.attention.num_kv_heads % (tp * 2) == 0:
        tp *= 2
    while tp * 2 <= min(chips, domain) and model.attention.num_heads % (tp * 2) == 0:
        tp *= 2
    pp = math.ceil(chips / tp)
    return tp, pp


def _chips_needed(weight_bytes: float, kv_floor_bytes: float, tier: MemoryTier) -> int:
    return max(1, math.ceil((weight_bytes + kv_floor_bytes) / (tier.capacity.value * tier.usable_fraction.value)))


def _round_chips(hardware: HardwareProfile, chips: int) -> int:
    """Round a chip count to what can be deployed: units, powers of two inside a GPU domain."""
    unit = hardware.execution.deployment_unit_chips
    if unit is not None:
        return _round_up(chips, unit.value)
    if hardware.execution.layer_pipelined:
        return chips
    domain = hardware.interconnect.domain_chips.value
    if chips <= domain:
        return 1 << (chips - 1).bit_length()
    return _round_up(chips, domain)


def _layout(
    hardware: HardwareProfile,
    model: ModelSpec,
    spec: DeploymentSpec,
    chips: int,
    tier: MemoryTier,
    precision: dict[TensorGroup, Precision],
) -> tuple[int, int]:
    """(tensor_parallel, pipeline_parallel): as the spec pins them, or automatic."""
    if not (spec.tensor_parallel or spec.pipeline_parallel):
        return _auto_layout(hardware, model, chips, tier, precision)
    tp = spec.tensor_parallel or max(1, chips // (spec.pipeline_parallel or 1))
    pp = spec.pipeline_parallel or max(1, chips // tp)
    if tp * pp != chips:
        raise PlacementError(f"tensor_parallel {tp} x pipeline_parallel {pp} = {tp * pp} != chips {chips}")
    return tp, pp


def _served_model(model: ModelSpec, spec: DeploymentSpec) -> ModelSpec:
    """The model as served: with the deployment's context window when it sets one."""
    if spec.context_tokens is None:
        return model
    return model.model_copy(update={"max_context_tokens": spec.context_tokens})


def _storage_precisions(model: ModelSpec, spec: DeploymentSpec, stack: StackProfile) -> tuple[Precision, Precision]:
    """(weights, KV cache) precisions: as the spec pins them, else the model's native weights and the
    stack's default KV precision for them."""
    weights: Precision = spec.weights or model.native_precision
    kv: Precision = spec.kv_cache or stack.kv_precision(weights, spec.activations)
    return weights, kv


def _max_chips(hardware: HardwareProfile) -> int:
    """Largest system the automatic placement considers: :data:`MAX_DOMAINS` scale-up domains."""
    return hardware.interconnect.domain_chips.value * MAX_DOMAINS


def _spill_fit(
    hardware: HardwareProfile,
    model: ModelSpec,
    chips: int,
    candidate: MemoryTier,
    precision: dict[TensorGroup, Precision],
    kv_floor: float,
) -> dict[TensorGroup, tuple[MemoryTier, float]]:
    """Groups spilled from the fastest tier to the next so that the rest fits ``chips`` chips, with
    the KV floor replicated over the widest split of a domain; empty when ``candidate`` is not the
    fastest of several weight tiers or even spilling does not fit."""
    tiers = hardware.weight_tiers
    if candidate is not tiers[0] or len(tiers) <= 1:
        return {}
    domain = hardware.interconnect.domain_chips.value
    widest = kv_floor * kv_replication(model, min(chips, domain))  # KV replicated over a split
    return spill(model, precision, chips, widest, tiers)


def _fit_on_tier(
    hardware: HardwareProfile,
    model: ModelSpec,
    spec: DeploymentSpec,
    candidate: MemoryTier,
    precision: dict[TensorGroup, Precision],
    weight_bytes: float,
    kv_floor: float,
) -> tuple[int, dict[TensorGroup, tuple[MemoryTier, float]]] | None:
    """(chips, spilled groups) when weights plus the KV floor fit ``candidate``: the fewest deployable
    chips up to :func:`_max_chips`, or the spec's chips, on which the fastest tier may spill part of
    the weights to the next (:func:`spill`); None when they do not fit."""
    needed = _chips_needed(weight_bytes, kv_floor, candidate)
    if spec.chips is None:
        return (_round_chips(hardware, needed), {}) if needed <= _max_chips(hardware) else None
    if needed <= spec.chips:
        return spec.chips, {}
    spilled = _spill_fit(hardware, model, spec.chips, candidate, precision, kv_floor)
    return (spec.chips, spilled) if spilled else None


def _choose_tier(
    hardware: HardwareProfile,
    model: ModelSpec,
    spec: DeploymentSpec,
    precision: dict[TensorGroup, Precision],
    weights: Precision,
    weight_bytes: float,
    kv_floor: float,
) -> tuple[MemoryTier, int, dict[TensorGroup, tuple[MemoryTier, float]]]:
    """(weights tier, chips, spilled groups): the fastest weight tier that fits (module docstring).

    Raises
    ------
    PlacementError
        If no tier fits on the spec's chips or on up to :func:`_max_chips` chips.
    """
    tiers = hardware.weight_tiers
    for candidate in tiers:
        fit = _fit_on_tier(hardware, model, spec, candidate, precision, weight_bytes, kv_floor)
        if fit is not None:
            return candidate, fit[0], fit[1]
    needed = _chips_needed(weight_bytes, kv_floor, tiers[-1])
    where = f"on {spec.chips} chips" if spec.chips else f"on up to {_max_chips(hardware)} chips"
    raise PlacementError(
        f"{model.id} ({weight_bytes / 1e9:.1f} GB of {weights} weights + "
        f"{kv_floor / 1e9:.1f} GB KV floor) does not fit {where} of {hardware.id}; "
        f"it needs at least {needed} chips of {tiers[-1].name}"
    )


def _spilled_bytes(
    model: ModelSpec, precision: dict[TensorGroup, Precision], spilled: dict[TensorGroup, tuple[MemoryTier, float]]
) -> float:
    """Weight bytes read from the slower tier: each spilled group's bytes times its moved share."""
    return sum(_group_bytes(model, precision, g) * share for g, (_, share) in spilled.items())


@dataclass(frozen=True)
class _Sizing:
    """A layout and the KV it leaves room for."""

    tensor_parallel: int
    pipeline_parallel: int
    chips: int
    attention_dp: int
    weight_bytes: float
    kv_bytes_per_token: float
    kv_budget_bytes: float


def _check_may_grow(
    hardware: HardwareProfile,
    model: ModelSpec,
    spec: DeploymentSpec,
    tier: MemoryTier,
    chips: int,
    weight_bytes: float,
    kv_budget: float,
    floor: float,
) -> None:
    """A deployment whose chips or layout the spec pins cannot grow to make room for the KV floor.

    Raises
    ------
    PlacementError
        If the spec pins chips, tensor_parallel or pipeline_parallel.
    """
    if spec.chips is not None or spec.tensor_parallel or spec.pipeline_parallel:
        raise PlacementError(
            f"{model.id} on {chips} x {hardware.id}: {weight_bytes / 1e9:.1f} GB of weights leave "
            f"{max(kv_budget, 0) / 1e9:.2f} GB for KV in {tier.name}, less than {spec.min_kv_tokens} "
            f"tokens need; use at least {_chips_needed(weight_bytes, floor, tier)} chips"
        )


def _size_layout(
    hardware: HardwareProfile,
    model: ModelSpec,
    spec: DeploymentSpec,
    stack: StackProfile,
    tier: MemoryTier,
    chips: int,
    precision: dict[TensorGroup, Precision],
    weight_bytes: float,
    elsewhere: float,
    kv_per_token_unreplicated: float,
) -> _Sizing:
    """Lay out ``chips`` chips and size the KV; where the replicated KV floor does not fit, grow the
    chips and lay out again, at most :data:`MAX_LAYOUT_ATTEMPTS` times."""
    for _ in range(MAX_LAYOUT_ATTEMPTS):
        tp, pp = _layout(hardware, model, spec, chips, tier, precision)
        chips = tp * pp
        kv_per_token = kv_per_token_unreplicated * kv_replication(model, tp)
        kv_budget = kv_budget_bytes(stack, tier, chips, weight_bytes - elsewhere)
        floor = kv_per_token * spec.min_kv_tokens
        if kv_budget >= floor:
            break
        _check_may_grow(hardware, model, spec, tier, chips, weight_bytes, kv_budget, floor)
        # KV replicated across a wider tensor split needs more room: grow and lay out again.
        chips = _round_chips(hardware, max(_chips_needed(weight_bytes, floor, tier), chips + 1))
    return _Sizing(tp, pp, chips, 1, weight_bytes, kv_per_token, kv_budget)


def _check_stage_count(model: ModelSpec, spec: DeploymentSpec, sizing: _Sizing) -> None:
    """A pipeline cannot have more stages than the model has layers.

    Raises
    ------
    PlacementError
        Naming ``pipeline_parallel`` when the spec pins it, else ``chips``.
    """
    tp, pp = sizing.tensor_parallel, sizing.pipeline_parallel
    if pp > model.num_layers:
        field = "pipeline_parallel" if spec.pipeline_parallel else "chips"
        raise PlacementError(
            f"{field}: {sizing.chips} chips as {tp} x {pp} stages need {pp} pipeline stages, more than "
            f"the model's {model.num_layers} layers (at most {tp * model.num_layers} chips here)",
            field=field,
        )


def _attention_sizing(
    hardware: HardwareProfile,
    model: ModelSpec,
    spec: DeploymentSpec,
    stack: StackProfile,
    tier: MemoryTier,
    precision: dict[TensorGroup, Precision],
    sizing: _Sizing,
    kv_per_token_unreplicated: float,
) -> _Sizing:
    """The sizing as the spec's attention parallelism leaves it: unchanged for tensor-parallel
    attention; with data-parallel attention every chip of a stage is its own attention rank, keeps
    its own copy of the replicated weights and each sequence's KV once."""
    if spec.attention_parallel != "data":
        return sizing
    dp, tp = _data_parallel_attention(model, sizing.tensor_parallel)
    weight_bytes = weight_bytes_of(model, precision, dp)
    _check_replicated_fit(model, precision, tier, dp, sizing.pipeline_parallel, spec, hardware)
    return replace(
        sizing,
        tensor_parallel=tp,
        attention_dp=dp,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_per_token_unreplicated,  # each sequence's KV lives on its own rank, once
        kv_budget_bytes=kv_budget_bytes(stack, tier, sizing.chips, weight_bytes),
    )


def _expert_parallel(model: ModelSpec, spec: DeploymentSpec, stage_chips: int) -> int:
    """Expert-parallel ranks: as the spec pins them, else :func:`_default_expert_parallel`.

    Raises
    ------
    PlacementError
        If they do not divide the stage's chips, or outnumber the routed experts.
    """
    ep = spec.expert_parallel or _default_expert_parallel(model, stage_chips)
    if ep > stage_chips or stage_chips % ep:
        raise PlacementError(f"expert_parallel {ep} must divide the {stage_chips} chips of a stage")
    if model.moe is not None and ep > model.moe.num_routed_experts:
        raise PlacementError(
            f"expert_parallel {ep} exceeds {model.id}'s {model.moe.num_routed_experts} routed experts (a rank "
            "needs at least one; split experts over more chips with a smaller expert_parallel)"
        )
    return ep


def _slower_tiers(hardware: HardwareProfile, tier: MemoryTier) -> tuple[MemoryTier, ...]:
    """Weight tiers slower than ``tier``: they hold further resident models, not read."""
    return tuple(t for t in hardware.weight_tiers if t.bandwidth.value < tier.bandwidth.value)


def plan(hardware: HardwareProfile, model: ModelSpec, spec: DeploymentSpec, stack: StackProfile) -> Deployment:
    """Resolve a deployment: precisions, tier, chips, layout and KV budget.

    Raises
    ------
    PlacementError
        If the weights do not fit on the chips given, or on any system of this hardware.
    """
    model = _served_model(model, spec)
    weights, kv = _storage_precisions(model, spec, stack)
    precision = group_precisions(model, spec)
    weight_bytes = weight_bytes_of(model, precision)
    kv_per_token_unreplicated = layer_shapes(model).kv_elements_per_token * model.num_layers * BYTES_PER_ELEMENT[kv]
    kv_floor = kv_per_token_unreplicated * spec.min_kv_tokens

    tier, chips, spilled = _choose_tier(hardware, model, spec, precision, weights, weight_bytes, kv_floor)
    elsewhere = _spilled_bytes(model, precision, spilled)
    sizing = _size_layout(
        hardware, model, spec, stack, tier, chips, precision, weight_bytes, elsewhere, kv_per_token_unreplicated
    )
    _check_stage_count(model, spec, sizing)
    sizing = _attention_sizing(hardware, model, spec, stack, tier, precision, sizing, kv_per_token_unreplicated)
    tp, dp = sizing.tensor_parallel, sizing.attention_dp
    ep = _expert_parallel(model, spec, tp * dp)
    return Deployment(
        hardware=hardware,
        model=model,
        stack=stack,
        chips=sizing.chips,
        tensor_parallel=tp,
        pipeline_parallel=sizing.pipeline_parallel,
        expert_parallel=ep,
        attention_dp=dp,
        weights=weights,
        kv_cache=kv,
        activations=spec.activations,
        speculative=spec.speculative,
        weights_tier=tier,
        resident_tiers=_slower_tiers(hardware, tier),
        weight_bytes=sizing.weight_bytes,
        kv_bytes_per_token=sizing.kv_bytes_per_token,
        kv_budget_bytes=sizing.kv_budget_bytes,
        chips_per_replica_domain=min(sizing.chips, hardware.interconnect.domain_chips.value),
        precision=precision,
        spilled=spilled,
    )
