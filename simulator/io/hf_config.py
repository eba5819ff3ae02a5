"""A model profile from a Hugging Face ``config.json`` on disk (no network).

Read by ``model_type`` (``text_config`` for the multimodal wrappers ``llama4``, ``gemma3``,
``qwen3_vl``, ``qwen3_vl_moe``, ``qwen2_5_vl``, ``mistral3``; ``ministral`` read as ``mistral``, Phi-3.5-MoE's
``phimoe`` as ``mixtral``; keys transformers defaults and published files omit, such as Gemma 3's
vocabulary, from :data:`FAMILY_DEFAULTS`):

- dense GQA: ``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``phi3``, ``glm4``, ``gemma2`` / ``gemma3``
  (local layers by ``layer_types``, else every other layer / all but each ``sliding_window_pattern``-th,
  windowed to ``sliding_window``) (``num_hidden_layers``, ``hidden_size``,
  ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim`` or
  hidden / heads, ``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings``);
- MoE: ``mixtral`` (``num_local_experts``, ``num_experts_per_tok``, experts of width
  ``intermediate_size``, every layer), ``qwen2_moe`` / ``qwen3_moe`` (``num_experts``,
  ``moe_intermediate_size``, ``decoder_sparse_step``, ``mlp_only_layers``; Qwen2-MoE's shared
  expert of width ``shared_expert_intermediate_size`` counts as that many expert widths),
  ``gpt_oss`` (``num_local_experts``, ``experts_per_token``, ``sliding_window`` on the
  ``layer_types`` marked ``sliding_attention``, MXFP4 experts from ``quantization_config``),
  ``llama4`` (``interleave_moe_layer_step``, a shared expert, dense layers of
  ``intermediate_size_mlp``, chunked-attention layers as sliding windows of
  ``attention_chunk_size``: every layer but each ``no_rope_layers`` / 4th), ``glm4_moe``;
- MoE with MLA: ``deepseek_v2``, ``deepseek_v3``, ``kimi_k2`` (``n_routed_experts``,
  ``n_shared_experts``, ``moe_intermediate_size``, ``first_k_dense_replace``, ``q_lora_rank``,
  ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``); ``deepseek_v32``
  as V3 (its sparse-attention indexer, < 0.2 % of the weights, is not counted);
- hybrid (``ModelSpec.hybrid``: KV on the attention layers only, the mixers' recurrent state per
  sequence counted apart): ``falcon_h1`` (attention and Mamba-2 side by side in every layer),
  ``nemotron_h`` (``hybrid_override_pattern``: M Mamba-2, * attention, - squared-ReLU FFN),
  ``qwen3_next`` (Gated DeltaNet, full attention every ``full_attention_interval``-th layer; the
  attention's output gate, < 0.2 % of the weights, is not counted; MoE as ``qwen2_moe``),
  ``minimax`` / ``minimax_m1`` (lightning attention, softmax attention where ``attn_type_list`` is 1;
  MoE as ``mixtral``), ``nemotron-nas`` (per-layer ``block_configs``: :func:`_nas_shapes`).

Precision is ``torch_dtype`` (``dtype``), or ``quantization_config`` (``fp8`` block-wise: linear
layers FP8, embeddings, router and LM head BF16; ``mxfp4``: experts MXFP4, the rest BF16).
``hf_repo`` is ``--hf-repo``, else ``_name_or_path`` when that is a Hub id, else a folder named
``org--name``. ``Infinity`` and ``NaN`` tokens are read (the keys the profile takes must still be
integers). The published size is the derived parameter
count (``confidence: derived``): a config states no parameter count; where a
``model.safetensors.index.json`` sits beside it, its ``metadata.total_size`` is recorded as the
checkpoint's bytes.

An architecture not listed is a ConfigError naming the decoder keys its config lacks; a key a listed
one needs, missing, is a ConfigError naming the file and key.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.analytic.architecture import active_params, total_params
from simulator.config.files import read_json
from simulator.config.model import ModelSpec
from simulator.errors import ConfigError
from simulator.units import RANGES

DENSE = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "glm4")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "llama4_text", "glm4_moe")
MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2")
HYBRID = ("falcon_h1", "nemotron_h", "qwen3_next", "minimax", "nemotron-nas")
#: DeciLM / Nemotron-NAS round each FFN width ``2 x ffn_mult x hidden / 3`` up to a multiple of this.
NAS_FFN_MULTIPLE = 256
#: Other names of the families above: the text models of multimodal wrappers, DeepSeek-V3.2 (V3's
#: shapes; its sparse-attention indexer, < 0.2 % of the weights, is not counted), MiniMax-M1.
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
ALIASES = {"gemma3_text": "gemma3", "qwen3_vl_moe_text": "qwen3_moe", "qwen3_vl_text": "qwen3",
           "qwen3_vl_moe": "qwen3_moe", "qwen3_vl": "qwen3", "qwen2_5_vl": "qwen2", "qwen2_5_vl_text": "qwen2",
           "deepseek_v32": "deepseek_v3", "minimax_m1": "minimax", "minimax_text_01": "minimax",
           "ministral": "mistral", "phimoe": "mixtral"}  # fmt: skip
#: Multimodal wrappers whose language model sits under ``text_config``, and its model_type when unnamed.
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
WRAPPERS = {"llama4": "llama4_text", "gemma3": "gemma3_text", "qwen3_vl_moe": "qwen3_vl_moe_text",
            "qwen3_vl": "qwen3_vl_text", "qwen2_5_vl": "qwen2_5_vl_text", "mistral3": "mistral"}  # fmt: skip
SUPPORTED = (*DENSE, *MOE, *MLA, *HYBRID, *WRAPPERS, *ALIASES)
#: Keys transformers' config classes default, so published config.json files leave them out
#: (Gemma 3's text_config states neither its vocabulary nor its context).
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "tie_word_embeddings": True,
               "sliding_window_pattern": 6, "sliding_window": 4096},
    "gemma2": {"tie_word_embeddings": True},
}  # fmt: skip
#: Keys any decoder needs; an unknown architecture's error names those its config lacks.
DECODER_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "max_position_embeddings")
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
#: Llama 4: every 4th layer has no RoPE and attends to everything (transformers' no_rope_layer_interval).
LLAMA4_NOPE_INTERVAL = 4
#: Largest size or count a config may state (2**31 - 1, the int32 of checkpoints' shapes): a width or a
#: layer count beyond it is a damaged file, and its parameter count would overflow downstream sums.
MAX_CONFIG_INTEGER = 2**31 - 1


class _Reader:
    def __init__(self, data: Mapping[str, Any], where: str, prefix: str = "") -> None:
        self.data, self.where, self.prefix = data, where, prefix

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        """The integer at ``key``: at least ``minimum`` (1 for a size or a count, 0 where the
        config counts something that may be absent) and at most :data:`MAX_CONFIG_INTEGER`."""
        value = self.data.get(key, default)
        expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        if value is None:
            raise ConfigError(f"{self.where}: {self.prefix}{key}: missing (expected {expected})")
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_CONFIG_INTEGER:
            raise ConfigError(
                f"{self.where}: {self.prefix}{key}: expected {expected} of at most "
                f"{MAX_CONFIG_INTEGER:,}, got {value!r}"
            )
        return value

    def ints(self, key: str) -> list[builtins.int]:
        """A list of layer indices at ``key`` (empty when absent)."""
        value = self.data.get(key) or []
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise ConfigError(f"{self.where}: {self.prefix}{key}: expected a list of layer indices, got {value!r}")
        return value

    def strings(self, key: str, count: builtins.int) -> list[str] | None:
        """A list of ``count`` names at ``key`` (None when absent)."""
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != count or not all(isinstance(v, str) for v in value):
            raise ConfigError(
                f"{self.where}: {self.prefix}{key}: expected a list of {count} layer types, got {value!r}"
            )
        return value

    def get(self, key: str, default: object = None) -> Any:
        return self.data.get(key, default)


def _precision(r: _Reader) -> tuple[str, dict[str, str]]:
    quant = r.get("quantization_config")
    if isinstance(quant, Mapping):
        method = str(quant.get("quant_method", "")).lower()
        if method == "fp8":
            return "fp8", {"router": "bf16", "embeddings": "bf16", "lm_head": "bf16"}
        if method == "mxfp4":
            return "mxfp4", {"attention": "bf16", "router": "bf16", "embeddings": "bf16", "lm_head": "bf16"}
        raise ConfigError(f"{r.where}: quantization_config.quant_method: expected fp8 or mxfp4, got {method!r}")
    dtype = str(r.get("torch_dtype") or r.get("dtype") or "bfloat16")
    if dtype not in _DTYPES:
        raise ConfigError(f"{r.where}: torch_dtype: expected one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype], {}


def _sliding_layers(r: _Reader, kind: str, layers: builtins.int) -> builtins.int:
    """How many layers attend over the sliding window: ``layer_types`` where the config lists them,
    else each family's rule (gpt-oss and Gemma 2: every other layer starting with the first; Gemma 3:
    all but every ``sliding_window_pattern``-th)."""
    types = r.strings("layer_types", layers)
    if types is not None:
        return sum(t == "sliding_attention" for t in types)
    if kind == "gemma3":
        pattern = r.int("sliding_window_pattern")
        return sum(1 for i in range(layers) if (i + 1) % pattern)
    return sum(1 for i in range(layers) if i % 2 == 0)  # gpt_oss, gemma2


def _attention(r: _Reader, kind: str) -> dict[str, Any]:
    heads = r.int("num_attention_heads")
    kv_heads = r.int("num_key_value_heads", heads)
    if kind in MLA:
        return _mla_attention(r, heads)
    head_dim = r.int("head_dim", r.get("attention_head_dim") or r.int("hidden_size") // heads)
    out: dict[str, Any] = {"kind": "gqa", "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim}
    return out | _sliding_window(r, kind, r.int("num_hidden_layers"))


def _mla_attention(r: _Reader, heads: builtins.int) -> dict[str, Any]:
    """Multi-head latent attention (DeepSeek): the low-rank query and KV projections' shapes."""
    q_rank = r.int("q_lora_rank") if r.get("q_lora_rank") is not None else None
    mla = {
        "q_lora_rank": q_rank,
        "kv_lora_rank": r.int("kv_lora_rank"),
        "qk_nope_head_dim": r.int("qk_nope_head_dim"),
        "qk_rope_head_dim": r.int("qk_rope_head_dim"),
        "v_head_dim": r.int("v_head_dim"),
    }
    return {"kind": "mla", "num_heads": heads, "num_kv_heads": heads, "head_dim": mla["v_head_dim"], "mla": mla}


def _sliding_window(r: _Reader, kind: str, layers: builtins.int) -> dict[str, Any]:
    """The sliding window and how many layers use it (empty for full attention on every layer):
    interleaved on gpt-oss and Gemma, Llama 4's chunked layers (all but every
    :data:`LLAMA4_NOPE_INTERVAL`-th), every layer on Mistral, Qwen and Phi-3 when the window is
    shorter than the context."""
    out: dict[str, Any] = {}
    if kind in ("gpt_oss", "gemma2", "gemma3"):
        out |= {"sliding_window": r.int("sliding_window"), "sliding_window_layers": _sliding_layers(r, kind, layers)}
    elif kind == "llama4_text" and r.get("attention_chunk_size"):
        out |= {
            "sliding_window": r.int("attention_chunk_size"),
            "sliding_window_layers": layers - layers // LLAMA4_NOPE_INTERVAL,
            "window_kind": "chunked",
        }
    elif (
        kind in ("mistral", "qwen2", "qwen3", "phi3") and r.get("sliding_window") and r.get("use_sliding_window", True)
    ):
        window = r.int("sliding_window")
        if window < r.int("max_position_embeddings"):
            out |= {"sliding_window": window, "sliding_window_layers": layers}
    return out


def _attention_flags(r: _Reader, key: str, layers: builtins.int, attention: object) -> list[bool]:
    """Per layer, whether it is an attention layer: ``layer_types`` (``full_attention``) where listed,
    else the integer list at ``key`` (MiniMax's ``attn_type_list``: 1 softmax attention, 0 linear)."""
    types = r.strings("layer_types", layers)
    if types is not None:
        return [t in ("full_attention", "attention", "sliding_attention") for t in types]
    flags = r.ints(key)
    if len(flags) != layers:
        raise ConfigError(f"{r.where}: {r.prefix}{key}: expected {layers} entries, one per layer, got {len(flags)}")
    return [f == attention for f in flags]


def _mamba2(
    width: builtins.int,
    heads: builtins.int,
    groups: builtins.int,
    state: builtins.int,
    kernel: builtins.int,
    hidden: builtins.int,
) -> tuple[float, float]:
    """Parameters of one Mamba-2 mixer and the elements of its per-sequence state.

    ``in_proj``: hidden x (2 d_inner + 2 groups d_state + heads) (z, x, B, C, dt); depthwise conv of
    ``kernel`` taps over the ``d_inner + 2 groups d_state`` channels; ``out_proj``: d_inner x hidden;
    A, D and dt bias per head. State: the SSM's ``d_inner x d_state`` plus the convolution's last
    ``kernel - 1`` inputs of every channel.
    """
    conv_channels = width + 2 * groups * state
    params = hidden * (width + conv_channels + heads) + conv_channels * kernel + width * hidden + 3 * heads
    return float(params), float(width * state + conv_channels * (kernel - 1))


def _hybrid(r: _Reader, kind: str) -> tuple[dict[str, Any], builtins.int]:
    """The hybrid block of a model mixing attention with a recurrent mixer, and its FFN matrices."""
    layers, hidden = r.int("num_hidden_layers"), r.int("hidden_size")
    if kind == "nemotron-nas":  # the per-block counts _nas_shapes derived
        return dict(r.get("_nas_hybrid")), 3
    return _HYBRIDS.get(kind, _minimax_hybrid)(r, layers, hidden)


def _falcon_h1_hybrid(r: _Reader, layers: builtins.int, hidden: builtins.int) -> tuple[dict[str, Any], builtins.int]:
    """Falcon-H1: attention and Mamba-2 side by side in every layer, then the FFN."""
    width = r.get("mamba_d_ssm") or r.int("mamba_expand", 2) * hidden
    params, state = _mamba2(
        width,
        r.int("mamba_n_heads"),
        r.int("mamba_n_groups", 1),
        r.int("mamba_d_state"),
        r.int("mamba_d_conv", 4),
        hidden,
    )
    return {
        "attention_layers": layers,
        "mixer_layers": layers,
        "mixer_params": params,
        "state_elements_per_sequence": layers * state,
    }, 3


def _nemotron_h_hybrid(r: _Reader, layers: builtins.int, hidden: builtins.int) -> tuple[dict[str, Any], builtins.int]:
    """Nemotron-H: one of Mamba-2 (M), attention (*), FFN (-) per layer; a two-matrix FFN with relu2."""
    pattern = r.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != layers or set(pattern) - set("M*-"):
        raise ConfigError(
            f"{r.where}: {r.prefix}hybrid_override_pattern: expected {layers} characters of "
            f"M (Mamba-2), * (attention), - (FFN), got {pattern!r}"
        )
    heads = r.int("mamba_num_heads")
    params, state = _mamba2(
        heads * r.int("mamba_head_dim"),
        heads,
        r.int("n_groups", 1),
        r.int("ssm_state_size"),
        r.int("conv_kernel", 4),
        hidden,
    )
    mixers = pattern.count("M")
    block = {
        "attention_layers": pattern.count("*"),
        "mixer_layers": mixers,
        "mixer_params": params,
        "ffn_layers": pattern.count("-"),
        "state_elements_per_sequence": mixers * state,
    }
    return block, 2 if r.get("mlp_hidden_act", "relu2") == "relu2" else 3


def _qwen3_next_hybrid(r: _Reader, layers: builtins.int, hidden: builtins.int) -> tuple[dict[str, Any], builtins.int]:
    """Qwen3-Next: Gated DeltaNet on 3 of 4 layers. Parameters: in_proj_qkvz, in_proj_ba (beta and
    decay per value head), conv, out_proj, A and dt bias; state: a key x value matrix per value head
    plus the convolution's last ``kernel - 1`` inputs."""
    types = r.strings("layer_types", layers)
    interval = r.int("full_attention_interval", 4)
    attention = [t == "full_attention" for t in types] if types else [(i + 1) % interval == 0 for i in range(layers)]
    key_width = r.int("linear_num_key_heads") * r.int("linear_key_head_dim")
    value_heads, value_dim = r.int("linear_num_value_heads"), r.int("linear_value_head_dim")
    value_width, kernel = value_heads * value_dim, r.int("linear_conv_kernel_dim", 4)
    conv_channels = 2 * key_width + value_width
    params = hidden * (2 * key_width + 2 * value_width + 2 * value_heads) + conv_channels * kernel
    params += value_width * hidden + 2 * value_heads
    state = value_heads * r.int("linear_key_head_dim") * value_dim + conv_channels * (kernel - 1)
    return _linear_hybrid(attention, layers, params, state)


def _minimax_hybrid(r: _Reader, layers: builtins.int, hidden: builtins.int) -> tuple[dict[str, Any], builtins.int]:
    """MiniMax: lightning (linear) attention, softmax attention on the layers ``attn_type_list``
    marks 1. Parameters: q, k, v, output gate and out projections; state: a head_dim x head_dim
    matrix per head."""
    attention = _attention_flags(r, "attn_type_list", layers, 1)
    heads, head_dim = r.int("num_attention_heads"), r.int("head_dim", hidden // r.int("num_attention_heads"))
    return _linear_hybrid(attention, layers, 5 * hidden * heads * head_dim, heads * head_dim * head_dim)


def _linear_hybrid(
    attention: list[bool], layers: builtins.int, params: builtins.int, state: builtins.int
) -> tuple[dict[str, Any], builtins.int]:
    """The hybrid block of linear-attention mixers on the layers without (softmax) attention."""
    mixers = layers - sum(attention)
    return {
        "attention_layers": sum(attention),
        "mixer_layers": mixers,
        "mixer_params": float(params),
        "state_elements_per_sequence": float(mixers * state),
    }, 3


#: The hybrid families' block builders by ``model_type`` (MiniMax otherwise).
_HYBRIDS = {
    "falcon_h1": _falcon_h1_hybrid,
    "nemotron_h": _nemotron_h_hybrid,
    "qwen3_next": _qwen3_next_hybrid,
}


def _moe(r: _Reader, kind: str) -> tuple[dict[str, Any] | None, int | None]:
    """The MoE block and the dense FFN width (None when no layer is dense)."""
    layers = r.int("num_hidden_layers")
    if kind in (*DENSE, "falcon_h1", "nemotron_h", "nemotron-nas"):
        return None, r.int("intermediate_size")
    if kind in ("mixtral", "gpt_oss", "minimax"):
        return _every_layer_moe(r, layers)
    if kind in ("qwen2_moe", "qwen3_moe", "qwen3_next"):
        return _qwen_moe(r, layers)
    if kind == "llama4_text":
        return _llama4_moe(r, layers)
    return _deepseek_moe(r, layers)


def _every_layer_moe(r: _Reader, layers: builtins.int) -> tuple[dict[str, Any], None]:
    """Mixtral, gpt-oss, MiniMax: routed experts on every layer, none shared."""
    per_token = r.int("num_experts_per_tok", r.get("experts_per_token"))
    block = {
        "num_routed_experts": r.int("num_local_experts"),
        "num_shared_experts": 0,
        "experts_per_token": per_token,
        "expert_intermediate_size": r.int("intermediate_size"),
        "num_moe_layers": layers,
    }
    return block, None


def _qwen_moe(r: _Reader, layers: builtins.int) -> tuple[dict[str, Any], builtins.int | None]:
    """Qwen2-MoE, Qwen3-MoE, Qwen3-Next: MoE on every ``decoder_sparse_step``-th layer not in
    ``mlp_only_layers``; the shared expert as a whole number of experts of the routed width."""
    width = r.int("moe_intermediate_size")
    step = r.int("decoder_sparse_step", 1)
    dense_only = set(r.ints("mlp_only_layers"))
    moe_layers = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    shared_width = r.int("shared_expert_intermediate_size", 0, minimum=0)
    if shared_width % width:
        raise ConfigError(
            f"{r.where}: shared_expert_intermediate_size: {shared_width} is not a multiple of "
            f"moe_intermediate_size {width}"
        )
    block = {
        "num_routed_experts": r.int("num_experts"),
        "num_shared_experts": shared_width // width,
        "experts_per_token": r.int("num_experts_per_tok"),
        "expert_intermediate_size": width,
        "num_moe_layers": moe_layers,
    }
    return block, (r.int("intermediate_size") if moe_layers < layers else None)


def _llama4_moe(r: _Reader, layers: builtins.int) -> tuple[dict[str, Any], builtins.int | None]:
    """Llama 4: MoE with one shared expert on every ``interleave_moe_layer_step``-th layer."""
    step = r.int("interleave_moe_layer_step", 1)
    moe_layers = layers // step
    block = {
        "num_routed_experts": r.int("num_local_experts"),
        "num_shared_experts": 1,
        "experts_per_token": r.int("num_experts_per_tok"),
        "expert_intermediate_size": r.int("intermediate_size"),
        "num_moe_layers": moe_layers,
    }
    return block, (r.int("intermediate_size_mlp") if moe_layers < layers else None)


def _deepseek_moe(r: _Reader, layers: builtins.int) -> tuple[dict[str, Any], builtins.int | None]:
    """DeepSeek-V2/V3, Kimi K2, GLM-4-MoE: dense first ``first_k_dense_replace`` layers, then MoE on
    every ``moe_layer_freq``-th."""
    first_dense = r.int("first_k_dense_replace", 0, minimum=0)
    freq = r.int("moe_layer_freq", 1)
    moe_layers = sum(1 for i in range(first_dense, layers) if i % freq == 0)
    block = {
        "num_routed_experts": r.int("n_routed_experts"),
        "num_shared_experts": r.int("n_shared_experts", 0, minimum=0),
        "experts_per_token": r.int("num_experts_per_tok"),
        "expert_intermediate_size": r.int("moe_intermediate_size"),
        "num_moe_layers": moe_layers,
    }
    return block, (r.int("intermediate_size") if moe_layers < layers else None)


def _architectures(data: Mapping[str, Any], kind: str) -> list[str]:
    names = data.get("architectures")
    return names if isinstance(names, list) and names and all(isinstance(n, str) for n in names) else [kind]


def _checkpoint_size(index: object) -> int | None:
    """``metadata.total_size`` of a safetensors index (None when absent or not a plausible size)."""
    metadata = index.get("metadata") if isinstance(index, dict) else None
    size = metadata.get("total_size") if isinstance(metadata, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= RANGES["bytes"].high else None


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


_HUB_ID = r"[\w.-]+/[\w.-]+"


def _repo(path: Path, data: Mapping[str, Any], hf_repo: str | None) -> str | None:
    """The Hub id ``infersim import`` matches result files by: ``hf_repo`` when given, else
    ``_name_or_path`` when it is a Hub id (``org/name``), else a folder named ``org--name`` (the Hub
    cache's ``models--org--name/snapshots/<commit>/`` included)."""
    if hf_repo is not None:
        if not re.fullmatch(_HUB_ID, hf_repo):
            raise ConfigError(f"--hf-repo: expected a Hub id such as Qwen/Qwen3-8B, got {hf_repo!r}")
        return hf_repo
    name = data.get("_name_or_path")
    if isinstance(name, str) and re.fullmatch(_HUB_ID, name):
        return name
    folder = path.resolve().parent
    if folder.parent.name == "snapshots":
        folder = folder.parent.parent
    found = re.fullmatch(r"(?:models--)?([\w.]+(?:-[\w.]+)*?)--([\w.-]+)", folder.name)
    return f"{found[1]}/{found[2]}" if found else None


def _profile_id(path: Path, data: Mapping[str, Any]) -> str:
    base = path.parent.name if path.parent.name not in ("", ".") else str(data.get("model_type", "model"))
    return re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-") or "model"


def _nas_shapes(data: dict[str, Any], where: str) -> dict[str, Any]:
    """Nemotron-NAS (DeciLM, Llama-Nemotron Super / Ultra): ``block_configs`` give each layer its own
    attention (GQA of ``num_attention_heads / n_heads_in_group`` KV heads, ``no_op``: none,
    ``replace_with_linear``: one ``hidden x hidden`` matrix) and FFN (width ``2 x ffn_mult x hidden / 3``
    rounded up to a multiple of :data:`NAS_FFN_MULTIPLE`, ``no_op`` or ``replace_with_linear``).

    Read as a hybrid stack: attention (and KV) on the real attention layers, every linear replacement
    a "mixer" of ``hidden^2`` parameters without state, ``ffn_layers`` the real FFNs at their mean
    width (sums of parameters and FLOPs exact to the rounding of the mean).
    """
    layers, hidden, heads = (
        _Reader(data, where).int(k) for k in ("num_hidden_layers", "hidden_size", "num_attention_heads")
    )
    blocks = data.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != layers or not all(isinstance(b, dict) for b in blocks):
        raise ConfigError(f"{where}: block_configs: expected {layers} objects, one per layer")
    attention_layers, linear, groups, widths = _nas_blocks(blocks, where, hidden)
    if len(groups) > 1:
        raise ConfigError(
            f"{where}: block_configs: attention layers of different KV head counts "
            f"(n_heads_in_group {sorted(groups)}) are not modelled"
        )
    if linear > layers or not widths:
        raise ConfigError(f"{where}: block_configs: expected at most one linear replacement per layer and an FFN")
    hybrid = {
        "attention_layers": attention_layers,
        "mixer_layers": linear,
        "mixer_params": float(hidden * hidden),
        "ffn_layers": len(widths),
        "state_elements_per_sequence": 0.0,
    }
    return data | {
        "num_key_value_heads": heads // (groups.pop() if groups else 1),
        "head_dim": hidden // heads,
        "intermediate_size": round(sum(widths) / len(widths)),
        "_nas_hybrid": hybrid,
    }


def _nas_blocks(
    blocks: list[dict[str, Any]], where: str, hidden: builtins.int
) -> tuple[builtins.int, builtins.int, set[builtins.int], list[builtins.int]]:
    """Nemotron-NAS ``block_configs`` counted (:func:`_nas_shapes`): the real attention layers, the
    linear replacements, the ``n_heads_in_group`` values of the attention layers, and the real FFNs'
    widths."""
    groups: set[int] = set()
    attention_layers = linear = 0
    widths: list[int] = []
    for i, block in enumerate(blocks):
        attention, ffn = (
            _Reader(block.get("attention") or {}, where, f"block_configs.{i}.attention."),
            _Reader(block.get("ffn") or {}, where, f"block_configs.{i}.ffn."),
        )
        if attention.get("replace_with_linear"):
            linear += 1
        elif not attention.get("no_op"):
            attention_layers += 1
            groups.add(attention.int("n_heads_in_group"))
        if ffn.get("replace_with_linear"):
            linear += 1
        elif not ffn.get("no_op"):
            widths.append(_nas_ffn_width(ffn.get("ffn_mult"), f"{where}: block_configs.{i}.ffn.ffn_mult", hidden))
    return attention_layers, linear, groups, widths


def _nas_ffn_width(mult: object, where: str, hidden: builtins.int) -> builtins.int:
    """A Nemotron-NAS FFN's width: ``2 x ffn_mult x hidden / 3`` rounded up to a multiple of
    :data:`NAS_FFN_MULTIPLE`."""
    if isinstance(mult, bool) or not isinstance(mult, int | float) or not 0 < mult < 1e3:
        raise ConfigError(f"{where}: expected a positive number, got {mult!r}")
    width = int(2 * mult * hidden / 3)
    return -(-width // NAS_FFN_MULTIPLE) * NAS_FFN_MULTIPLE


def _language_model(data: dict[str, Any], where: str) -> tuple[_Reader, str]:
    """The reader of the language model's keys (a multimodal wrapper's ``text_config``) and its family."""
    kind = data.get("model_type")
    if kind in WRAPPERS and "text_config" in data:
        return _wrapped_language_model(data, kind, where)
    if kind == "llama4":
        raise ConfigError(f"{where}: text_config: missing (expected Llama 4's text model config)")
    family = _supported_family(data, kind, where)
    if family == "nemotron-nas":
        return _Reader(_nas_shapes(data, where), where), family
    return _Reader(FAMILY_DEFAULTS.get(family, {}) | data, where), family


def _wrapped_language_model(data: dict[str, Any], kind: str, where: str) -> tuple[_Reader, str]:
    """The reader of a multimodal wrapper's ``text_config`` and its family (the wrapper's default
    family where the text config names none)."""
    text = data.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError(f"{where}: text_config: expected the language model's config (a JSON object)")
    inner = text.get("model_type") or WRAPPERS[kind]
    family = ALIASES.get(inner, inner)
    return _Reader(FAMILY_DEFAULTS.get(family, {}) | text, where, "text_config."), family


def _supported_family(data: dict[str, Any], kind: object, where: str) -> str:
    """The family of ``model_type`` ``kind``; refused when it is not one infersim reads, naming the
    decoder keys the file lacks."""
    if not isinstance(kind, str) or ALIASES.get(kind, kind) not in SUPPORTED:
        missing = [k for k in DECODER_KEYS if k not in data]
        lacks = f"; of a decoder's keys it lacks {missing}" if missing else ""
        raise ConfigError(
            f"{where}: model_type: {kind!r} is not an architecture infersim reads (expected one of "
            f"{list(SUPPORTED)}){lacks}; write the profile by hand (model_profiles/README)"
        )
    return ALIASES.get(kind, kind)


def profile_from_config(path: Path, name: str | None = None, hf_repo: str | None = None) -> ModelSpec:
    """The model profile of a ``config.json`` (module docstring).

    ``Infinity`` and ``NaN`` (Python's JSON writes them: Nemotron-H's ``time_step_limit``) are read;
    every key the profile takes is checked to be a finite integer or a known name.
    """
    where = str(path)
    data = read_json(path, allow_nonfinite=True)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object (a Hugging Face config.json)")
    r, kind = _language_model(data, where)
    has_precision = any(k in data for k in ("torch_dtype", "dtype", "quantization_config"))
    native, by_group = _precision(_Reader(data, where) if has_precision else r)
    moe, dense_width = _moe(r, kind)
    hybrid, ffn_matrices = _hybrid(r, kind) if kind in HYBRID else (None, 3)
    ident = name or _profile_id(path, data)
    fields: dict[str, Any] = {
        "id": ident,
        "name": ident,
        "hf_repo": _repo(path, data, hf_repo),
        "sources": {"config": f"{path.name} ({', '.join(_architectures(data, kind))})"},
        "num_layers": r.int("num_hidden_layers"),
        "hidden_size": r.int("hidden_size"),
        "intermediate_size": dense_width,
        "vocab_size": r.int("vocab_size"),
        "tie_word_embeddings": _flag(
            data.get("tie_word_embeddings", r.get("tie_word_embeddings", False)), f"{where}: tie_word_embeddings"
        ),
        "max_context_tokens": r.int("max_position_embeddings"),
        "native_precision": native,
        "precision_by_group": by_group,
        "attention": _attention(r, kind),
        "moe": moe,
        "ffn_matrices": ffn_matrices,
        "hybrid": hybrid,
        "published": {
            "params_total": {"value": 1.0, "source": "config", "confidence": "derived"},
            "params_active": {"value": 1.0, "source": "config", "confidence": "derived"},
        },
        "notes": f"imported from {path.name} by infersim models import; parameter counts derived from its shapes",
    }
    try:
        draft = ModelSpec.model_validate(fields)
        derived = {"value": total_params(draft), "source": "config", "confidence": "derived"}
        active = {"value": active_params(draft), "source": "config", "confidence": "derived"}
        fields["published"] = {"params_total": derived, "params_active": active}
        index = path.parent / "model.safetensors.index.json"
        if index.is_file():
            size = _checkpoint_size(read_json(index))
            if size is not None:
                fields["sources"]["index"] = f"{index.name} metadata.total_size"
                fields["published"]["checkpoint_bytes"] = {
                    "value": f"{size} B",
                    "source": "index",
                    "confidence": "datasheet",
                }
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{where}: {loc}: {first['msg']}") from None
