"""Hardware profiles: one parameterised template for wafer-scale, LPU, dataflow and GPU systems.

A new device is a new YAML file, never a new class. Numbers are *per chip* (a chip is one
GPU, one LPU, one SN40L socket, one CS-3 wafer) unless the field says otherwise. Peaks
(datasheet) and achievable efficiencies (derived or assumed) are separate sourced numbers.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import Discriminator, Field, Tag, model_validator

from simulator.config.base import Precision, Profile, Sourced, Spec, reference_tag
from simulator.units import MAX_LATENCY_S, Bytes, BytesPerSecond, FlopsPerSecond, Seconds, Watts

#: An achievable share of a peak or a capacity: at least 1 % (below it a number is mistyped, not
#: measured: the lowest in any profile is 0.32) and at most all of it.
MIN_FRACTION = 0.01
Fraction = Annotated[float, Field(ge=MIN_FRACTION, le=1.0)]
PositiveInt = Annotated[int, Field(ge=1)]
PositiveBytes = Annotated[Bytes, Field(gt=0.0)]
PositiveBandwidth = Annotated[BytesPerSecond, Field(gt=0.0)]
PositiveFlops = Annotated[FlopsPerSecond, Field(gt=0.0)]
#: A fixed latency: at most a day (:data:`simulator.units.MAX_LATENCY_S`).
NonNegativeSeconds = Annotated[Seconds, Field(ge=0.0, le=MAX_LATENCY_S)]


#: Largest roofline exponent: at p = 16 the blend is within 4.4 % of max(t_memory, t_compute) (2^(1/16)),
#: the ideal roofline; a larger p changes nothing but overflows the power.
MAX_ROOFLINE_EXPONENT = 16.0


class AdaptiveTile(Spec):
    """M tiles a grouped expert kernel chooses from by the mean rows per expert (the power of two at or
    above it, clamped to ``[smallest, largest]``) instead of one fixed tile."""

    smallest: Sourced[PositiveInt] = Field(description="the tile at few rows per expert (decode)")
    largest: Sourced[PositiveInt] = Field(description="the tile at many rows per expert (prefill)")

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveTile:
        if self.largest.value < self.smallest.value:
            raise ValueError(f"largest: {self.largest.value} is below smallest ({self.smallest.value})")
        return self


class WeightOnlyPath(Spec):
    """A weight format the matrix engine does not run natively: dequantised on the fly to ``compute``."""

    compute: Precision = Field(description="precision the matmul runs in (a key of compute.peak)")
    efficiency: Sourced[Fraction] = Field(description="achievable / peak of the compute precision on this path")
    expert_tile: AdaptiveTile | None = Field(
        None, description="the M tiles of this format's grouped expert kernel; empty: grouped_gemm.m_tile"
    )


class GroupedGemmSpec(Spec):
    """The expert kernel of a MoE layer: one grouped GEMM per projection over the experts a batch hits.

    Its rates are the dense matmul's times these fractions (measured kernels stream expert weights and
    multiply ragged groups well below a dense GEMM), and each hit expert's rows are padded up to the
    kernel's M tile (a ``weight_only`` format with its own ``expert_tile`` chooses its tile instead). An
    efficiency is looked up by the experts' weight precision, else the precision their matmul runs in,
    else ``bf16``.
    """

    m_tile: Sourced[PositiveInt] = Field(description="rows of one expert's tile: its rows are padded up to a multiple")
    streaming_efficiency: dict[Precision, Sourced[Fraction]] = Field(
        min_length=1, description="expert weights' read rate / the weight tier's achievable (streaming) read rate"
    )
    compute_efficiency: dict[Precision, Sourced[Fraction]] = Field(
        min_length=1, description="grouped GEMM FLOP/s / the dense matmul's achievable FLOP/s on the same path"
    )

    @model_validator(mode="after")
    def _has_bf16(self) -> GroupedGemmSpec:
        for name in ("streaming_efficiency", "compute_efficiency"):
            if "bf16" not in getattr(self, name):
                raise ValueError(f"{name}: give bf16 (the entry a precision without its own falls back to)")
        return self

    def streaming(self, weights: Precision, path: Precision) -> float:
        return _by_precision(self.streaming_efficiency, weights, path)

    def compute(self, weights: Precision, path: Precision) -> float:
        return _by_precision(self.compute_efficiency, weights, path)


def _by_precision(table: dict[Precision, Sourced[float]], weights: Precision, path: Precision) -> float:
    entry = table.get(weights) or table.get(path) or table["bf16"]
    return entry.value


class ComputeSpec(Spec):
    """Matrix-engine peaks per precision (dense, no sparsity) and the achievable fraction.

    A weight precision with a peak runs natively; one listed under ``weight_only`` is
    dequantised to that path's compute precision; any other is dequantised to the
    activations' precision at the chip's efficiency (weight-only quantisation, e.g. W4A16).
    """

    #: A peak may be named by its precision alone in field paths (``compute.bf16``).
    path_aliases: ClassVar[dict[str, str]] = {precision: f"peak.{precision}" for precision in get_args(Precision)}

    peak: dict[Precision, Sourced[PositiveFlops]] = Field(
        min_length=1, description="dense peak FLOP/s per chip for each precision the chip computes in"
    )
    efficiency: Sourced[Fraction] = Field(description="achievable / peak for large matmuls")
    cores: Sourced[PositiveInt] = Field(description="cores / SMs / PEs per chip")
    weight_only: dict[Precision, WeightOnlyPath] = Field(
        default_factory=dict, description="weight formats run by dequantising (no native engine), with their efficiency"
    )
    roofline_exponent: Sourced[Annotated[float, Field(ge=1.0, le=MAX_ROOFLINE_EXPONENT)]] | None = Field(
        None,
        description="an operator takes (t_memory^p + t_compute^p)^(1/p); empty: the ideal max(t_memory, "
        "t_compute). Measured kernels sit near p = 2: memory and compute overlap imperfectly near the ridge",
    )

    grouped_gemm: GroupedGemmSpec | None = Field(
        None, description="the MoE expert kernel's efficiencies and tile; empty: experts run as dense matmuls"
    )
    kernel_latency: Sourced[NonNegativeSeconds] | None = Field(
        None,
        description="fixed time of one kernel launched on its own beyond its roofline (an isolated kernel's "
        "floor); in a served step the stack's per-layer latency carries the launches",
    )

    @model_validator(mode="after")
    def _paths_computable(self) -> ComputeSpec:
        for fmt, path in self.weight_only.items():
            if path.compute not in self.peak:
                raise ValueError(f"weight_only.{fmt}.compute: {path.compute} has no peak under compute.peak")
            if fmt in self.peak:
                raise ValueError(f"weight_only.{fmt}: the chip runs {fmt} natively (it has a peak); remove one")
        return self


class MemoryTier(Spec):
    """One level of the memory hierarchy, per chip."""

    name: str = Field(description="e.g. sram, hbm, ddr, l2")
    capacity: Sourced[PositiveBytes]
    bandwidth: Sourced[PositiveBandwidth] = Field(description="peak bandwidth per chip")
    efficiency: Sourced[Fraction] = Field(description="achievable / peak bandwidth")
    usable_fraction: Sourced[Fraction] = Field(
        description="share of capacity the serving stack can plan with (rest: runtime, activations)"
    )
    holds_weights: bool = Field(
        True, description="False for caches and scratchpads that cannot hold resident weights or KV"
    )


class TorusSpec(Spec):
    """Chips wired only to their neighbours on a torus (TPU ICI): no switch, so a collective
    crosses its slice hop by hop (:mod:`simulator.analytic.torus`). Each chip has two links per
    axis; the interconnect's bandwidth and latency are then the chip's total over its ``2 d``
    links (one direction) and the time of one hop."""

    dimensions: Sourced[Annotated[int, Field(ge=1, le=3)]] = Field(description="axes of the torus (2: v6e, 3: TPU7x)")
    wraparound_min_chips: Sourced[PositiveInt] = Field(
        description="slices of at least this many chips close every axis into a ring (a full v6e pod, whole "
        "4x4x4 cubes on TPU7x); smaller slices are open lines along each axis"
    )


class InterconnectSpec(Spec):
    """Chip-to-chip links inside the scale-up domain (NVLink, RDU links, LPU C2C, SwarmX, TPU ICI)."""

    bandwidth: Sourced[PositiveBandwidth] = Field(description="per chip, one direction")
    latency: Sourced[NonNegativeSeconds] = Field(description="per message step (alpha); on a torus, per hop")
    efficiency: Sourced[Fraction]
    domain_chips: Sourced[PositiveInt] = Field(description="chips in one scale-up domain")
    alltoall_latency: Sourced[NonNegativeSeconds] | None = Field(
        None, description="fixed time of one expert-parallel dispatch or combine (empty: latency)"
    )
    torus: TorusSpec | None = Field(None, description="empty: a switch joins every chip of the domain in one hop")


class FabricSpec(Spec):
    """On-chip 2D mesh of a spatial architecture (wafer-scale): where traversal time is set."""

    hop_latency: Sourced[NonNegativeSeconds] = Field(
        description="time per core-to-core hop on the on-chip mesh, including the compute pipelined behind it"
    )


class ExecutionSpec(Spec):
    """How the serving stack runs a step on this hardware."""

    layer_pipelined: bool = Field(
        description="True: layers are mapped spatially, each layer a pipeline stage, several "
        "micro-batches in flight (wafer-scale, LPU). False: a step runs layer after layer "
        "on all chips of a stage (GPU, RDU)."
    )
    layer_latency: Sourced[NonNegativeSeconds] = Field(
        description="hardware time per layer per step beyond the operators' own (a deterministic "
        "schedule's per-layer slot, synchronisation across a fused block); the serving stack's software "
        "time per layer is the stack's"
    )
    default_stack: str = Field(description="serving stack profile id this hardware runs unless told otherwise")
    deployment_unit_chips: Sourced[PositiveInt] | None = Field(
        None, description="chips are deployed in multiples of this (e.g. a rack sold as a unit)"
    )


#: Longest mean time between failures a unit may state: a century of hours (a typo beyond it).
MAX_MTBF_HOURS = 876_000.0
#: A repair or restart: positive, at most a year (a repair may wait weeks for a part).
RepairSeconds = Annotated[Seconds, Field(gt=0.0)]


class ReliabilitySpec(Spec):
    """How a system of this hardware fails and comes back (:mod:`simulator.analytic.availability`).

    A *failure unit* is the smallest part whose fault stops every replica on it: a ``chip`` (one GPU
    whose fault is isolated to it), a ``node`` (a host of ``unit_chips`` chips that fails and is
    drained as one), or a ``system`` (a wafer-scale system, a rack sold as a unit). Each unit fails
    at the constant rate ``1 / mtbf_hours`` (exponential times between failures; wear-in and
    wear-out are not modelled), and is back ``restart`` after a failure (detection, drain, a spare
    swapped in or the unit rebooted) before its replica reloads its weights.
    """

    unit: Literal["chip", "node", "system"] = Field(description="the part whose fault stops its replicas")
    unit_chips: Sourced[PositiveInt] = Field(description="chips in one failure unit (1 for a chip)")
    mtbf_hours: Sourced[Annotated[float, Field(gt=0.0, le=MAX_MTBF_HOURS)]] = Field(
        description="mean time between failures of one unit, in hours (unplanned interruptions of any cause)"
    )
    restart: Sourced[RepairSeconds] = Field(
        description="from a unit's failure until its replica can load weights again (repair, swap or reboot)"
    )
    reload_bandwidth: Sourced[PositiveBandwidth] | None = Field(
        None,
        description="per chip, the rate weights reach it after a restart (host or storage link); empty: the "
        "slowest memory tier's bandwidth (the host link of a GPU)",
    )


class PowerCapCurve(Spec):
    """Throughput against a chip's power limit (DVFS): at ``caps[i]`` the chip keeps ``throughput[i]``
    of its uncapped throughput; linear between points (:mod:`simulator.analytic.power`)."""

    caps: list[Annotated[Watts, Field(gt=0.0)]] = Field(min_length=2, description="power limits, ascending")
    throughput: list[Annotated[float, Field(gt=0.0, le=1.0)]] = Field(
        min_length=2, description="share of the uncapped throughput at each cap, non-decreasing"
    )

    @model_validator(mode="after")
    def _monotone(self) -> PowerCapCurve:
        if len(self.caps) != len(self.throughput):
            raise ValueError(f"caps ({len(self.caps)}) and throughput ({len(self.throughput)}) differ in length")
        if any(b <= a for a, b in zip(self.caps, self.caps[1:], strict=False)):
            raise ValueError("caps must be strictly ascending")
        if any(b < a for a, b in zip(self.throughput, self.throughput[1:], strict=False)):
            raise ValueError("throughput must not fall as the cap rises")
        return self


class PowerSpec(Spec):
    """A chip's draw: at full load, at idle, and its throughput against a power limit (DVFS).

    A curve ends at the full-load power with the whole throughput (1.0) and starts above the idle
    power; a chip that takes no power limit says why in ``no_cap_reason`` instead of a curve."""

    chip: Sourced[Annotated[Watts, Field(gt=0.0)]] = Field(description="power per chip")
    idle: Sourced[Annotated[Watts, Field(gt=0.0)]] | None = Field(
        None, description="power per chip while it serves nothing (a power cap's energy figures need it)"
    )
    cap_curve: Sourced[PowerCapCurve] | None = Field(
        None, description="throughput against the chip's power limit (a deployment's power_cap needs it)"
    )
    no_cap_reason: str | None = Field(
        None, description="why this chip takes no power limit below its full power (no cap_curve then)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> PowerSpec:
        full_w = self.chip.value
        if self.idle is not None and self.idle.value >= full_w:
            raise ValueError(f"idle ({self.idle.value:g} W) must be below chip ({full_w:g} W)")
        if self.cap_curve is None:
            return self
        if self.no_cap_reason is not None:
            raise ValueError("give cap_curve or no_cap_reason, not both")
        curve = self.cap_curve.value
        if curve.caps[-1] != full_w or curve.throughput[-1] != 1.0:
            raise ValueError(f"cap_curve must end at the chip's full power ({full_w:g} W) with throughput 1.0, "
                             f"not {curve.caps[-1]:g} W and {curve.throughput[-1]:g}")  # fmt: skip
        if self.idle is not None and curve.caps[0] <= self.idle.value:
            raise ValueError(f"cap_curve must start above idle ({self.idle.value:g} W), not at {curve.caps[0]:g} W")
        return self


#: A price in US dollars: a millionth of a dollar to a billion (a chip-hour, a chip, a million tokens).
PositiveUsd = Annotated[float, Field(ge=1e-6, le=1e9)]


class TokenPrice(Spec):
    """A public per-token API price for one model served on this hardware (USD per 1M tokens)."""

    provider: str = Field(description="who sells it, e.g. Cerebras Inference, GroqCloud, Together AI")
    input_usd_per_million_tokens: Sourced[PositiveUsd]
    output_usd_per_million_tokens: Sourced[PositiveUsd]


class PriceSpec(Spec):
    """Published prices: per chip (hourly rental, capex) and per token (API, by model id)."""

    rental_usd_per_chip_hour: Sourced[PositiveUsd] | None = None
    capex_usd_per_chip: Sourced[PositiveUsd] | None = None
    api: dict[str, TokenPrice] = Field(
        default_factory=dict, description="model id -> per-token API price of a provider serving it on this hardware"
    )

    @model_validator(mode="after")
    def _one_price(self) -> PriceSpec:
        if self.rental_usd_per_chip_hour is None and self.capex_usd_per_chip is None and not self.api:
            raise ValueError("give rental_usd_per_chip_hour, capex_usd_per_chip or api prices")
        return self


class HardwareProfile(Profile):
    """A chip and the system it is sold or rented in."""

    family: Literal["gpu", "wafer-scale", "lpu", "dataflow", "tpu", "other"] = Field(
        description="descriptive only: the physics never branches on it"
    )
    compute: ComputeSpec
    memory: list[MemoryTier] = Field(min_length=1, description="ordered fastest -> largest")
    interconnect: InterconnectSpec
    fabric: FabricSpec | None = None
    execution: ExecutionSpec
    power: PowerSpec
    price: PriceSpec
    reliability: ReliabilitySpec | None = Field(
        None, description="failure unit, MTBF and restart time (empty: failures cannot be simulated on it)"
    )
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> HardwareProfile:
        bandwidths = [tier.bandwidth.value for tier in self.memory]
        if bandwidths != sorted(bandwidths, reverse=True):
            raise ValueError("memory tiers must be ordered fastest first (bandwidth non-increasing)")
        if not any(tier.holds_weights for tier in self.memory):
            raise ValueError("at least one memory tier must hold weights (holds_weights: true)")
        names = [tier.name for tier in self.memory]
        if len(set(names)) != len(names):
            raise ValueError(f"memory tier names must be unique, got {names}")
        used = {q.source for q in _sourced_values(self)}
        missing = sorted(used - self.sources.keys())
        if missing:
            raise ValueError(f"source keys {missing} are used but not defined under `sources`")
        return self

    def tier(self, name: str) -> MemoryTier:
        return next(tier for tier in self.memory if tier.name == name)

    @property
    def weight_tiers(self) -> list[MemoryTier]:
        """Tiers that can hold weights and KV, fastest first."""
        return [tier for tier in self.memory if tier.holds_weights]


def _sourced_values(spec: Spec) -> list[Sourced[object]]:
    """Every Sourced number anywhere inside a spec (for the provenance checks)."""
    found: list[Sourced[object]] = []
    for name in type(spec).model_fields:
        value = getattr(spec, name)
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, Sourced):
                found.append(item)
            elif isinstance(item, Spec):
                found.extend(_sourced_values(item))
    return found


#: A hardware profile by id, or the profile itself (inline, as a resolved scenario writes it).
HardwareRef = Annotated[
    Annotated[str, Tag("id")] | Annotated[HardwareProfile, Tag("profile")], Discriminator(reference_tag)
]
