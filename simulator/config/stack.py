"""Serving-stack profiles: how a serving engine batches, admits and what each step costs it.

The same GPU batches 4,096 sequences under TensorRT-LLM's benchmark and 256 under an older
vLLM; a kernel launch per operator costs more without CUDA graphs than with them. Those are
properties of the software, not of the chip, so they live here, one YAML per stack in
``stack_profiles/``, and a deployment selects one (its hardware names a default). Numbers are
``{value, source, confidence}`` like any profile's; a parameter fitted across every chip that
runs the stack (``layer_latency``) is one number, shared, not copied into each hardware file.

- ``max_batch_size`` / ``max_batched_tokens``: sequences and tokens per iteration, per
  data-parallel attention rank (the scheduler's caps; KV capacity may bind first), as the
  stack's engine arguments default them (vLLM's ``max_num_seqs`` / ``max_num_batched_tokens``,
  SGLang's ``max_running_requests`` / ``chunked_prefill_size``, TensorRT-LLM's
  ``max_batch_size`` / ``max_num_tokens``). ``by_hardware`` holds the defaults a stack picks
  for particular chips (vLLM: smaller on A100 and on GPUs under 70 GiB).
- ``kv_cache``: the KV-cache precision the stack stores when the deployment does not say:
  ``auto`` is the activation dtype (vLLM's and SGLang's ``--kv-cache-dtype auto``, whatever
  the weights); ``checkpoint`` is FP8 when the checkpoint quantises its KV cache (NVIDIA's
  ModelOpt FP8 and NVFP4 checkpoints do, TensorRT-LLM's ``kv_cache_config.dtype`` ``auto``
  takes it from there), else the activation dtype (gpt-oss's MXFP4 checkpoint leaves KV in
  BF16); ``narrow-weights`` is FP8 when the weights are 8-bit or narrower, else the
  activation dtype (an assumption for stacks that document no default); a precision: that
  precision always.
- ``kv_memory``: how the stack sizes its KV cache from a chip's memory ``C`` (the weights
  tier's capacity) once its share of the weights ``W`` and its runtime ``reserve`` ``R``
  (activation peak of the profiling forward pass, CUDA graphs, communication buffers) are
  taken, per chip: ``of-free`` gives KV ``fraction x (C - W - R)`` (TensorRT-LLM's
  ``free_gpu_memory_fraction``: a share of the memory still free after the weights and the
  profiled peak); ``of-total`` gives ``fraction x C - W - R`` (vLLM's
  ``gpu_memory_utilization``: the engine's share of total memory, less weights and profiled
  peak; SGLang's ``mem_fraction_static`` with ``fraction`` 1 and ``R`` the reserve its rule
  leaves outside the static pool). None: the weights tier's ``usable_fraction`` of capacity
  less the weights (machines whose stack documents no rule).
- ``chunked_prefill``: a prompt may be split across iterations (Sarathi, vLLM V1); without it a
  prompt's prefill runs whole in one iteration (TensorRT-LLM's benchmark default).
- ``priority``: ``decode-first`` runs every decode and fills the rest of the token budget with
  prefill; ``prefill-first`` runs pending prefills alone and lets decodes wait (vLLM V0).
- ``admission``: ``on-demand`` allocates KV as it grows and preempts when it runs out (vLLM);
  ``reserve-full`` admits a request only when KV for its whole prompt and output fits
  (TensorRT-LLM's GUARANTEED_NO_EVICT), so nothing is ever preempted.
- ``layer_latency`` / ``step_overhead``: software time per layer per iteration (kernel
  launches and synchronisation the stack does not hide) and per iteration (scheduling,
  sampling, host round trip), added to the hardware's own per-layer latency.
- ``expert_latency``: software time per distinct expert a chip runs in one MoE layer, however
  few tokens it gets: a grouped-GEMM kernel sets up and schedules each expert's problem on a
  GPU; a dataflow chip starts each expert's weight stream. A chip that holds a slice of every
  expert (tensor-parallel experts) runs every expert its tokens hit.
- ``moe_comm_overlap``: the share of expert-parallel all-to-all time hidden behind compute by
  two-batch overlap (DeepSeek, SGLang), applied when an attention rank holds at least 128 tokens.
- ``speculation``: how the operator is documented to decode speculatively, per model and by
  default, with the source; ``infersim validate`` runs a measurement as it was served.
- ``api``: a hosted service reached only through its public API (Cerebras Inference,
  GroqCloud, SambaNova Cloud): every request pays the network ``round_trip`` (half before the
  replica sees it, half before the client sees its first and last token) and the provider's
  ``front_end`` time (admission, authentication, tokenisation, routing to a replica) before the
  replica sees it. So ``api time = round_trip + front_end`` adds to TTFT and E2E and nothing
  to the gaps between tokens (``Deployment.api_s``; the engine's arrival and delivery delays).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag

from simulator.config.base import Precision, Profile, Sourced, Spec, reference_tag
from simulator.config.speculation import SpeculativeSpec
from simulator.units import MAX_LATENCY_S, Bytes, Seconds

PositiveInt = Annotated[int, Field(ge=1)]
#: A fixed latency: at most a day (:data:`simulator.units.MAX_LATENCY_S`).
NonNegativeSeconds = Annotated[Seconds, Field(ge=0.0, le=MAX_LATENCY_S)]


class StackSpeculation(Spec):
    """How the stack's operator is documented to speculate, so measurements run as they were served."""

    source: str = Field(description="key into the profile's sources: where the serving configuration is documented")
    by_model: dict[str, SpeculativeSpec] = Field(
        default_factory=dict, description="model id -> the speculation documented for it"
    )
    default: SpeculativeSpec | None = Field(
        None, description="what a measurement marked speculative runs with when its model is not listed"
    )


class ApiTime(Spec):
    """What a request to a hosted API pays outside the replica (module docstring)."""

    round_trip: Sourced[NonNegativeSeconds] = Field(description="client <-> provider network round trip")
    front_end: Sourced[NonNegativeSeconds] = Field(
        description="the provider's time before a replica sees the request: admission, tokenisation, routing"
    )

    @property
    def total_s(self) -> float:
        """Seconds a request's TTFT and E2E gain: ``round_trip + front_end``."""
        return self.round_trip.value + self.front_end.value


#: How a stack chooses the KV-cache precision when the deployment does not (see the module docstring).
KvCacheRule = Literal["auto", "checkpoint", "narrow-weights"] | Precision

#: Weight formats whose NVIDIA (ModelOpt) checkpoints quantise the KV cache to FP8 as well.
KV_QUANTISED_CHECKPOINTS: frozenset[Precision] = frozenset({"fp8", "fp4"})
#: Weight formats of 8 bits or fewer.
NARROW_WEIGHTS: frozenset[Precision] = frozenset({"fp8", "int8", "fp4", "mxfp4"})


class KvMemory(Spec):
    """How the stack sizes its KV cache from a chip's memory (module docstring, ``kv_memory``)."""

    rule: Literal["of-free", "of-total"] = Field(
        description="of-free: fraction x (memory - weights - reserve); of-total: fraction x memory - weights - reserve"
    )
    fraction: Sourced[Annotated[float, Field(gt=0.0, le=1.0)]] = Field(description="the stack's default memory share")
    reserve: Sourced[Annotated[Bytes, Field(ge=0.0)]] = Field(
        description="per chip, neither weights nor KV: activation peak, CUDA graphs, communication buffers"
    )

    def kv_bytes(self, chips: int, capacity_bytes: float, weight_bytes: float) -> float:
        """KV bytes on ``chips`` chips of ``capacity_bytes`` each holding ``weight_bytes`` of weights in all."""
        reserve = chips * self.reserve.value
        if self.rule == "of-free":
            return self.fraction.value * (chips * capacity_bytes - weight_bytes - reserve)
        return chips * self.fraction.value * capacity_bytes - weight_bytes - reserve


class StackCaps(Spec):
    """Batching caps a stack defaults to on particular chips, where they differ from its own."""

    max_batch_size: Sourced[PositiveInt] | None = None
    max_batched_tokens: Sourced[PositiveInt] | None = None


class StackProfile(Profile):
    """One serving engine's batching limits, admission rule and per-step software costs."""

    description: str
    max_batch_size: Sourced[PositiveInt] = Field(description="sequences per iteration, per attention rank")
    max_batched_tokens: Sourced[PositiveInt] = Field(description="tokens per iteration, per attention rank")
    by_hardware: dict[str, StackCaps] = Field(
        default_factory=dict, description="hardware id -> the caps the stack defaults to on that chip"
    )
    kv_cache: Sourced[KvCacheRule] = Field(
        description="KV-cache precision when the deployment does not say: auto (the activations'), "
        "checkpoint (fp8 for FP8/NVFP4 checkpoints, else the activations'), narrow-weights (fp8 for 8-bit or "
        "narrower weights, else the activations'), or a precision"
    )
    kv_memory: KvMemory | None = Field(
        None, description="how the KV cache is sized from a chip's memory; none: the weights tier's usable_fraction"
    )
    chunked_prefill: bool = Field(description="a prompt may be split across iterations")
    priority: Literal["decode-first", "prefill-first"]
    admission: Literal["on-demand", "reserve-full"]
    layer_latency: Sourced[NonNegativeSeconds] = Field(description="software time per layer per iteration")
    step_overhead: Sourced[NonNegativeSeconds] = Field(description="software time per iteration")
    expert_latency: Sourced[NonNegativeSeconds] = Field(
        description="software time per distinct expert a chip runs in one MoE layer (grouped-GEMM problem "
        "set-up, an expert's weight stream started)"
    )
    moe_comm_overlap: Sourced[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        description="share of the expert-parallel dispatch and combine hidden behind compute (two-batch "
        "overlap) once each attention rank holds enough tokens"
    )
    matmul_share: Sourced[Annotated[float, Field(gt=0.0, le=1.0)]] | None = Field(
        None,
        description="share of the hardware's kernel matmul rate (compute.efficiency, a GEMM benchmark's) that "
        "a serving step reaches between its other operators (norms, activations, rotary, sampling, mixed "
        "prefill-decode batches); none: 1",
    )
    speculation: StackSpeculation | None = Field(
        None, description="documented speculative decoding (validate runs rows marked yes or unknown with it)"
    )
    api: ApiTime | None = Field(
        None, description="a hosted service reached through its public API: the time a request pays outside the replica"
    )
    notes: str = ""

    def batch_cap(self, hardware_id: str) -> int:
        """Sequences per iteration per attention rank on this chip: its own default, else the stack's."""
        caps = self.by_hardware.get(hardware_id)
        cap = caps.max_batch_size if caps is not None else None
        return (cap or self.max_batch_size).value

    def token_budget(self, hardware_id: str) -> int:
        """Tokens per iteration per attention rank on this chip: its own default, else the stack's."""
        caps = self.by_hardware.get(hardware_id)
        budget = caps.max_batched_tokens if caps is not None else None
        return (budget or self.max_batched_tokens).value

    def kv_precision(self, weights: Precision, activations: Precision) -> Precision:
        """The KV-cache precision this stack stores for these weights and activations (``kv_cache``)."""
        rule = self.kv_cache.value
        if rule == "auto":
            return activations
        if rule == "checkpoint":
            return "fp8" if weights in KV_QUANTISED_CHECKPOINTS else activations
        if rule == "narrow-weights":
            return "fp8" if weights in NARROW_WEIGHTS else activations
        return rule

    def speculation_for(self, model_id: str, marked: str) -> SpeculativeSpec | None:
        """The speculation a measurement ran with: ``yes`` -> the model's documented one, else the
        stack's default; ``unknown`` -> the model's documented one, else none; ``none`` -> none."""
        if marked == "none" or self.speculation is None:
            return None
        documented = self.speculation.by_model.get(model_id)
        return documented or (self.speculation.default if marked == "yes" else None)


#: A serving stack profile by id, or the profile itself (inline, as a resolved scenario writes it).
StackRef = Annotated[Annotated[str, Tag("id")] | Annotated[StackProfile, Tag("profile")], Discriminator(reference_tag)]
