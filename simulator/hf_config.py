"""A model profile from a Hugging Face ``config.json`` on disk (no network).

Read by ``model_type`` (``text_config`` for multimodal wrappers such as Llama 4):

- dense GQA: ``llama``, ``mistral``, ``qwen2``, ``qwen3`` (``num_hidden_layers``, ``hidden_size``,
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
  ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``).

Precision is ``torch_dtype`` (``dtype``), or ``quantization_config`` (``fp8`` block-wise: linear
layers FP8, embeddings, router and LM head BF16; ``mxfp4``: experts MXFP4, the rest BF16).
``hf_repo`` is ``_name_or_path`` when that is a Hub id. The published size is the derived parameter
count (``confidence: derived``): a config states no parameter count; where a
``model.safetensors.index.json`` sits beside it, its ``metadata.total_size`` is recorded as the
checkpoint's bytes.

An architecture not listed, or a key it needs missing, is a ConfigError naming the file and key.
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

DENSE = ("llama", "mistral", "qwen2", "qwen3")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "llama4_text", "glm4_moe")
MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2")
SUPPORTED = (*DENSE, *MOE, *MLA, "llama4")
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
            raise ConfigError(f"{self.where}: {self.prefix}{key}: expected {expected} of at most "
                              f"{MAX_CONFIG_INTEGER:,}, got {value!r}")  # fmt: skip
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
            raise ConfigError(f"{self.where}: {self.prefix}{key}: expected a list of {count} layer types, "
                              f"got {value!r}")  # fmt: skip
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


def _attention(r: _Reader, kind: str) -> dict[str, Any]:
    heads = r.int("num_attention_heads")
    kv_heads = r.int("num_key_value_heads", heads)
    if kind in MLA:
        q_rank = r.int("q_lora_rank") if r.get("q_lora_rank") is not None else None
        mla = {"q_lora_rank": q_rank, "kv_lora_rank": r.int("kv_lora_rank"),
               "qk_nope_head_dim": r.int("qk_nope_head_dim"), "qk_rope_head_dim": r.int("qk_rope_head_dim"),
               "v_head_dim": r.int("v_head_dim")}  # fmt: skip
        return {"kind": "mla", "num_heads": heads, "num_kv_heads": heads, "head_dim": mla["v_head_dim"], "mla": mla}
    out: dict[str, Any] = {"kind": "gqa", "num_heads": heads, "num_kv_heads": kv_heads,
                           "head_dim": r.int("head_dim", r.int("hidden_size") // heads)}  # fmt: skip
    layers = r.int("num_hidden_layers")
    if kind == "gpt_oss":
        types = r.strings("layer_types", layers) or [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)
        ]
        out |= {"sliding_window": r.int("sliding_window"),
                "sliding_window_layers": sum(t == "sliding_attention" for t in types)}  # fmt: skip
    elif kind == "llama4_text" and r.get("attention_chunk_size"):
        out |= {"sliding_window": r.int("attention_chunk_size"),
                "sliding_window_layers": layers - layers // LLAMA4_NOPE_INTERVAL}  # fmt: skip
    elif kind in ("mistral", "qwen2", "qwen3") and r.get("sliding_window") and r.get("use_sliding_window", True):
        window = r.int("sliding_window")
        if window < r.int("max_position_embeddings"):
            out |= {"sliding_window": window, "sliding_window_layers": layers}
    return out


def _moe(r: _Reader, kind: str) -> tuple[dict[str, Any] | None, int | None]:
    """The MoE block and the dense FFN width (None when no layer is dense)."""
    layers = r.int("num_hidden_layers")
    if kind in DENSE:
        return None, r.int("intermediate_size")
    if kind in ("mixtral", "gpt_oss"):
        per_token = r.int("num_experts_per_tok", r.get("experts_per_token"))
        block = {"num_routed_experts": r.int("num_local_experts"), "num_shared_experts": 0,
                 "experts_per_token": per_token, "expert_intermediate_size": r.int("intermediate_size"),
                 "num_moe_layers": layers}  # fmt: skip
        return block, None
    if kind in ("qwen2_moe", "qwen3_moe"):
        width = r.int("moe_intermediate_size")
        step = r.int("decoder_sparse_step", 1)
        dense_only = set(r.ints("mlp_only_layers"))
        moe_layers = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
        shared_width = r.int("shared_expert_intermediate_size", 0, minimum=0)
        if shared_width % width:
            raise ConfigError(f"{r.where}: shared_expert_intermediate_size: {shared_width} is not a multiple of "
                              f"moe_intermediate_size {width}")  # fmt: skip
        block = {"num_routed_experts": r.int("num_experts"), "num_shared_experts": shared_width // width,
                 "experts_per_token": r.int("num_experts_per_tok"), "expert_intermediate_size": width,
                 "num_moe_layers": moe_layers}  # fmt: skip
        return block, (r.int("intermediate_size") if moe_layers < layers else None)
    if kind == "llama4_text":
        step = r.int("interleave_moe_layer_step", 1)
        moe_layers = layers // step
        block = {"num_routed_experts": r.int("num_local_experts"), "num_shared_experts": 1,
                 "experts_per_token": r.int("num_experts_per_tok"),
                 "expert_intermediate_size": r.int("intermediate_size"), "num_moe_layers": moe_layers}  # fmt: skip
        return block, (r.int("intermediate_size_mlp") if moe_layers < layers else None)
    # deepseek_v2 / deepseek_v3 / kimi_k2 / glm4_moe
    first_dense = r.int("first_k_dense_replace", 0, minimum=0)
    freq = r.int("moe_layer_freq", 1)
    moe_layers = sum(1 for i in range(first_dense, layers) if i % freq == 0)
    block = {"num_routed_experts": r.int("n_routed_experts"),
             "num_shared_experts": r.int("n_shared_experts", 0, minimum=0),
             "experts_per_token": r.int("num_experts_per_tok"),
             "expert_intermediate_size": r.int("moe_intermediate_size"), "num_moe_layers": moe_layers}  # fmt: skip
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


def _repo(data: Mapping[str, Any]) -> str | None:
    """``_name_or_path`` when it is a Hub id (``org/name``), which ``infersim import`` matches result files by."""
    name = data.get("_name_or_path")
    return name if isinstance(name, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", name) else None


def _profile_id(path: Path, data: Mapping[str, Any]) -> str:
    base = path.parent.name if path.parent.name not in ("", ".") else str(data.get("model_type", "model"))
    return re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-") or "model"


def profile_from_config(path: Path, name: str | None = None) -> ModelSpec:
    """The model profile of a ``config.json`` (module docstring)."""
    where = str(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object (a Hugging Face config.json)")
    kind = data.get("model_type")
    if kind == "llama4":
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise ConfigError(f"{where}: text_config: missing (expected Llama 4's text model config)")
        r, kind = _Reader(text, where, "text_config."), "llama4_text"
    else:
        r = _Reader(data, where)
    if kind not in SUPPORTED:
        raise ConfigError(f"{where}: model_type: {kind!r} is not an architecture infersim reads (expected one of "
                          f"{list(SUPPORTED)}); write the profile by hand (model_profiles/README)")  # fmt: skip
    native, by_group = _precision(r) if kind != "llama4_text" else _precision(_Reader(data, where))
    moe, dense_width = _moe(r, kind)
    ident = name or _profile_id(path, data)
    fields: dict[str, Any] = {
        "id": ident, "name": ident, "hf_repo": _repo(data),
        "sources": {"config": f"{path.name} ({', '.join(_architectures(data, kind))})"},
        "num_layers": r.int("num_hidden_layers"), "hidden_size": r.int("hidden_size"),
        "intermediate_size": dense_width, "vocab_size": r.int("vocab_size"),
        "tie_word_embeddings": _flag(data.get("tie_word_embeddings", r.get("tie_word_embeddings", False)),
                                     f"{where}: tie_word_embeddings"),
        "max_context_tokens": r.int("max_position_embeddings"), "native_precision": native,
        "precision_by_group": by_group, "attention": _attention(r, kind), "moe": moe,
        "published": {"params_total": {"value": 1.0, "source": "config", "confidence": "derived"},
                      "params_active": {"value": 1.0, "source": "config", "confidence": "derived"}},
        "notes": f"imported from {path.name} by infersim models import; parameter counts derived from its shapes",
    }  # fmt: skip
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
                fields["published"]["checkpoint_bytes"] = {"value": f"{size} B", "source": "index",
                                                           "confidence": "datasheet"}  # fmt: skip
        return ModelSpec.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{where}: {loc}: {first['msg']}") from None
