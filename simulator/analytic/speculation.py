"""Speculative decoding as 2025-26 stacks run it: a draft proposes, the target verifies in one pass.

Assumptions:

- **Drafts.** ``model``: a separate small model (e.g. Llama-3.1-8B for a 70B target, as
  SambaNova pairs them), on the same chips, in the same memory tier, with its own KV cache;
  ``eagle``: an EAGLE-3 head, one decoder layer of the target's width (its dense FFN, or an
  MoE target's active expert width) plus an LM head; ``mtp``: a multi-token-prediction module,
  one more layer of the target's own architecture (an MoE layer for DeepSeek) sharing its LM
  head. A draft's cost is its shape's pass on the same deployment, never a free fraction.
- **A step** runs ``gamma`` draft passes of one token per sequence, then one target pass of
  ``gamma + 1`` tokens per sequence.
- **Acceptance.** Draft token ``i`` is accepted with probability ``a_i`` given the earlier ones
  were (a constant ``a`` for drafts whose acceptance does not decay), so a verify emits
  ``1 + sum_i prod_{j <= i} a_j`` tokens on average, which for constant ``a`` is
  ``(1 - a^(gamma+1)) / (1 - a)`` (Leviathan et al. 2023, eq. 1). Defaults per draft kind and
  workload are published figures (:data:`ACCEPTANCE`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simulator.config.model import ModelSpec
from simulator.config.speculation import DraftKind, SpeculationWorkload, SpeculativeSpec

FloatArray = npt.NDArray[np.float64]

#: Per-token acceptance by draft kind and workload, from published measurements. A tuple gives
#: the acceptance of each draft position in turn (the last value repeats beyond it).
ACCEPTANCE: dict[tuple[DraftKind, SpeculationWorkload], tuple[float, ...]] = {
    # EAGLE-3 heads at K = 7: Llama-3.1-8B and 3.3-70B MT-bench acceptance length 2.77 / 2.88,
    # HumanEval 3.49 / 3.62, GSM8K 3.34 / 3.29 (yuhuili and RedHatAI heads, reported on
    # huggingface.co/nebius/EAGLE3-Llama-3.3-70B-Instruct), i.e. a per-token 0.65 / 0.75 / 0.72.
    ("eagle", "chat"): (0.65,),
    ("eagle", "code"): (0.75,),
    ("eagle", "reasoning"): (0.72,),
    # DeepSeek-R1's MTP module reused autoregressively on 8 x B200, ISL 1k / OSL 2k: acceptance
    # lengths 1.92 / 2.58 / 2.82 / 2.99 / 3.01 for 1-5 drafts (NVIDIA/TensorRT-LLM
    # docs/source/blogs/tech_blog/blog1 @ 5685103), i.e. positions accepted 0.92, 0.72, 0.36,
    # 0.71, 0.12 given the earlier ones; the DeepSeek-V3 report gives 85-90 % for the first.
    ("mtp", "chat"): (0.92, 0.72, 0.36, 0.71, 0.12),
    ("mtp", "code"): (0.92, 0.72, 0.36, 0.71, 0.12),
    ("mtp", "reasoning"): (0.92, 0.72, 0.36, 0.71, 0.12),
    # A same-family small draft for a 70B target: Llama-3-8B drafting Llama-3-70B (llama.cpp,
    # greedy, four prompts of prose, code and essays) accepted 58.7 % of 8 drafted tokens
    # (devquasar.com/uncategorized/speculative-decoding-tradeoffs-gpu-with-large-models-llama-70b-8b),
    # i.e. a per-token 0.88 (sum_{i=1..8} 0.88^i = 4.7 of 8) with a Q4 draft; taken as 0.88 for
    # every workload (derived, one source). The SRAM services that pair these models run the draft
    # in 16 bits (Cerebras and SambaNova serve Llama-3.1-8B in bf16), which agrees with its target
    # at least as often as a Q4 copy.
    ("model", "chat"): (0.88,),
    ("model", "code"): (0.88,),
    ("model", "reasoning"): (0.88,),
}


def acceptance(spec: SpeculativeSpec) -> tuple[float, ...]:
    """Acceptance of each of the ``gamma`` draft positions: the spec's, else the published default."""
    given = spec.acceptance_rate
    values = ACCEPTANCE[(spec.draft, spec.workload)] if given is None else (
        tuple(given) if isinstance(given, list) else (given,)
    )  # fmt: skip
    return tuple(values[min(i, len(values) - 1)] for i in range(spec.tokens_proposed))


def tokens_per_verify(accepted: Sequence[float]) -> float:
    """Expected tokens one verify pass emits: ``1 + sum_i prod_{j <= i} a_j``.

    Examples
    --------
    >>> tokens_per_verify([0.0, 0.0, 0.0, 0.0])
    1.0
    >>> round(tokens_per_verify([0.8, 0.8, 0.8]), 4)  # (1 - 0.8^4) / (1 - 0.8)
    2.952
    """
    return 1.0 + float(np.cumprod(np.asarray(accepted, dtype=np.float64)).sum())


def draw_emitted(rng: np.random.Generator, accepted: Sequence[float], sequences: int) -> FloatArray:
    """Tokens each of ``sequences`` verify passes emits: 1 + the drafts accepted before the first rejection."""
    probabilities = np.asarray(accepted, dtype=np.float64)
    if probabilities.size == 0:
        return np.ones(sequences)
    success = rng.random((sequences, probabilities.size)) < probabilities
    leading = np.where(success.all(axis=1), probabilities.size, np.argmin(success, axis=1))
    return 1.0 + leading.astype(np.float64)


def draft_architecture(target: ModelSpec, spec: SpeculativeSpec, draft_model: ModelSpec | None) -> ModelSpec:
    """The draft as a model shape: the separate model, or a one-layer head built from the target."""
    if spec.draft == "model":
        assert draft_model is not None
        return draft_model
    moe = target.moe
    if spec.draft == "mtp":
        one_moe_layer = moe.model_copy(update={"num_moe_layers": 1}) if moe else None
        return target.model_copy(update={
            "id": f"{target.id}-mtp", "num_layers": 1, "moe": one_moe_layer,
            "attention": target.attention.model_copy(update={"sliding_window_layers": 0}),
        })  # fmt: skip
    width = target.intermediate_size
    if moe is not None:  # an EAGLE head's FFN has the target's active width
        width = moe.expert_intermediate_size * (moe.experts_per_token + moe.num_shared_experts)
    return target.model_copy(update={
        "id": f"{target.id}-eagle", "num_layers": 1, "moe": None, "intermediate_size": width,
        "attention": target.attention.model_copy(update={"sliding_window_layers": 0}),
    })  # fmt: skip
