"""Published Hugging Face config.json files of the current families import within 2 % of the published
parameter count, with the KV bytes per token their attention layers hold.

KV bytes per token (16-bit cache), summed over the layers that carry attention:
- GQA: ``attention_layers x 2 (K and V) x num_key_value_heads x head_dim x 2 bytes``;
- MLA: ``layers x (kv_lora_rank + qk_rope_head_dim) x 2 bytes`` (the latent and the rope key).
Hybrid models' state-space and linear-attention layers hold no KV (their recurrent state is per
sequence, counted apart). Sliding windows cap the tokens held, not the bytes one token adds.

The fixtures are the files as published on the Hub (folder ``org--name``), reduced to JSON as Python's
``json`` writes it (Nemotron-H's ``Infinity`` kept).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.analytic.architecture import kv_bytes_per_token, total_params
from simulator.cli import main
from simulator.io.hf_config import profile_from_config

CONFIGS = Path(__file__).parent / "fixtures" / "hub_configs"
B = 1e9
GQA, MLA = "gqa", "mla"
#: folder: (published total parameters, attention kind, layers with KV, KV heads, head dim or MLA latent + rope)
PUBLISHED = {
    "microsoft--Phi-3-mini-4k-instruct": (3.82 * B, GQA, 32, 32, 96),
    "google--gemma-2-9b-it": (9.24 * B, GQA, 42, 8, 256),
    "google--gemma-3-27b-it": (27.4 * B, GQA, 62, 16, 128),  # the published count includes the 0.4 B vision tower
    "THUDM--GLM-4-9B-0414": (9.4 * B, GQA, 40, 2, 128),
    "zai-org--GLM-4.5": (355 * B, GQA, 92, 8, 128),
    "deepseek-ai--DeepSeek-V3.2-Exp": (671 * B, MLA, 61, 1, 512 + 64),
    "deepseek-ai--DeepSeek-V2-Lite-Chat": (15.7 * B, MLA, 27, 1, 512 + 64),
    "tiiuae--Falcon-H1-7B-Instruct": (7.59 * B, GQA, 44, 2, 128),
    "nvidia--Nemotron-H-8B-Base-8K": (8.1 * B, GQA, 4, 8, 128),
    "Qwen--Qwen3-Next-80B-A3B-Instruct": (80 * B, GQA, 12, 2, 256),
    "MiniMaxAI--MiniMax-M1-80k": (456 * B, GQA, 10, 8, 128),
    "Qwen--Qwen3-VL-235B-A22B-Instruct": (236 * B, GQA, 94, 4, 128),
    "Qwen--Qwen2.5-7B-Instruct": (7.61 * B, GQA, 28, 4, 128),
    "Qwen--Qwen3-8B": (8.2 * B, GQA, 36, 8, 128),
    "openai--gpt-oss-20b": (20.9 * B, GQA, 24, 8, 64),
    "meta-llama--Llama-3.2-3B-Instruct": (3.21 * B, GQA, 28, 8, 128),
    "mistralai--Mistral-7B-Instruct-v0.3": (7.25 * B, GQA, 32, 8, 128),
    "google--gemma-3-1b-it": (1.0 * B, GQA, 26, 1, 256),  # model_type gemma3_text, no wrapper
    "mistralai--Mistral-Small-3.1-24B-Instruct-2503": (24.0 * B, GQA, 40, 8, 128),  # mistral3 wrapper, vision included
}
KV_BYTES = 2  # a 16-bit cache


def test_every_fixture_is_listed() -> None:
    assert sorted(p.name for p in CONFIGS.iterdir()) == sorted(PUBLISHED)


@pytest.mark.parametrize("folder", sorted(PUBLISHED))
def test_params_within_two_percent_and_kv_bytes_per_token(folder: str) -> None:
    published, kind, kv_layers, kv_heads, width = PUBLISHED[folder]
    profile = profile_from_config(CONFIGS / folder / "config.json")
    assert total_params(profile) == pytest.approx(published, rel=0.02)
    expected_kv = kv_layers * width * KV_BYTES * (2 * kv_heads if kind == GQA else 1)
    assert profile.attention.kind == kind
    assert kv_bytes_per_token(profile) == expected_kv
    assert profile.hf_repo == folder.replace("--", "/", 1)


@pytest.mark.parametrize(
    ("folder", "sliding_layers", "window"),
    [
        ("google--gemma-2-9b-it", 21, 4096),
        ("google--gemma-3-27b-it", 52, 1024),
        ("google--gemma-3-1b-it", 22, 512),
        ("openai--gpt-oss-20b", 12, 128),
    ],
)
def test_interleaved_sliding_and_global_layers(folder: str, sliding_layers: int, window: int) -> None:
    """Gemma 2: every other layer local; Gemma 3: five local to one global; gpt-oss: alternating."""
    attention = profile_from_config(CONFIGS / folder / "config.json").attention
    assert (attention.sliding_window_layers, attention.sliding_window) == (sliding_layers, window)


def test_hybrid_layers_split_into_attention_and_recurrent_state() -> None:
    """Nemotron-H: the pattern's '*' layers attend, 'M' layers are Mamba-2 with a state of
    ``d_inner x d_state + (d_inner + 2 groups d_state) x (kernel - 1)`` elements each, '-' layers are FFNs."""
    hybrid = profile_from_config(CONFIGS / "nvidia--Nemotron-H-8B-Base-8K" / "config.json").hybrid
    assert hybrid is not None
    assert (hybrid.attention_layers, hybrid.mixer_layers, hybrid.ffn_layers) == (4, 24, 24)
    d_inner, d_state, groups, kernel = 128 * 64, 128, 8, 4
    per_layer = d_inner * d_state + (d_inner + 2 * groups * d_state) * (kernel - 1)
    assert hybrid.state_elements_per_sequence == 24 * per_layer


def test_a_hybrids_layer_shapes_sum_to_its_attention_layers_alone() -> None:
    """Per-layer shapes are averages: num_layers x (KV elements, score width) = attention layers x an
    attention layer's, so the attention FLOPs per query-key pair count only the 12 of 48 that attend."""
    from simulator.analytic.architecture import layer_shapes

    profile = profile_from_config(CONFIGS / "Qwen--Qwen3-Next-80B-A3B-Instruct" / "config.json")
    shapes = layer_shapes(profile)
    assert profile.num_layers * shapes.attention_score_dim == pytest.approx(12 * 256)
    assert profile.num_layers * shapes.kv_elements_per_token == pytest.approx(12 * 2 * 2 * 256)


def test_hf_repo_flag_wins_and_an_unknown_architecture_names_what_it_lacks(tmp_path, capsys) -> None:
    source = CONFIGS / "Qwen--Qwen3-8B" / "config.json"
    assert profile_from_config(source, hf_repo="me/my-qwen").hf_repo == "me/my-qwen"
    out = tmp_path / "out"
    assert main(["models", "import", str(source), "--hf-repo", "me/my-qwen", "-o", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["profile"]["hf_repo"] == "me/my-qwen" and printed["kv_bytes_per_token"] == 36 * 2 * 8 * 128 * 2
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "rwkv7", "hidden_size": 8192, "rope_theta": Infinity}')
    assert main(["models", "import", str(path), "-o", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "'rwkv7' is not an architecture" in err and "'num_hidden_layers'" in err


@pytest.mark.parametrize("folder", ["nvidia--Nemotron-H-8B-Base-8K", "Qwen--Qwen3-Next-80B-A3B-Instruct"])
def test_a_hybrid_sequence_holds_kv_of_its_attention_layers_plus_its_recurrent_state(folder: str) -> None:
    """Per sequence: ``context x KV bytes per token (attention layers only) + state elements x bytes``,
    so a 2x longer context adds KV, never state; and the estimate runs on the profile."""
    from simulator.analytic.estimate import estimate
    from simulator.analytic.layouts import Question, deploy
    from simulator.config.deployment import DeploymentSpec
    from simulator.config.loading import Catalog

    profile = profile_from_config(CONFIGS / folder / "config.json")
    spec = DeploymentSpec.model_validate({"hardware": "nvidia-h200", "model": profile.model_dump(), "chips": 2})
    d = deploy(Catalog(), spec, Question(1000, 200, 8))
    assert d.kv_cache == "bf16"
    state_bytes = profile.hybrid.state_elements_per_sequence * KV_BYTES
    for context in (1000, 2000):
        assert d.kv_bytes_for_context(context) == pytest.approx(context * kv_bytes_per_token(profile) + state_bytes)
    result = estimate(d, 1000, 200, 8)
    assert result.ttft_s > 0 and result.itl_s > 0


def test_nemotron_nas_blocks_count_each_layers_own_attention_and_ffn(tmp_path) -> None:
    """DeciLM blocks: attention of heads / n_heads_in_group KV heads, none (no_op) or one hidden^2 matrix
    (replace_with_linear); FFN of width ceil256(int(2 ffn_mult hidden / 3)) (gated: 3 hidden x width), or none.
    Sum: 2 attention layers x (2 h q_width + 2 h kv_width) + 1 x h^2 + 3 h x (1536 + 768 + 1536) + 2 x vocab x h."""
    hidden, heads, vocab = 1024, 8, 1000

    def block(attention: dict, ffn: dict) -> dict:
        return {"attention": {"n_heads_in_group": 4, "no_op": False, "replace_with_linear": False} | attention,
                "ffn": {"ffn_mult": 2.0, "no_op": False, "replace_with_linear": False} | ffn}  # fmt: skip

    blocks = [block({}, {}), block({"no_op": True}, {"ffn_mult": 1.0}), block({"replace_with_linear": True}, {}),
              block({}, {"no_op": True})]  # fmt: skip
    config = {"model_type": "nemotron-nas", "architectures": ["DeciLMForCausalLM"], "hidden_size": hidden,
              "num_attention_heads": heads, "num_hidden_layers": 4, "vocab_size": vocab,
              "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "block_configs": blocks}  # fmt: skip
    path = tmp_path / "nvidia--Tiny-Nemotron-NAS" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    profile = profile_from_config(path)
    head_dim, kv_heads = hidden // heads, heads // 4
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    expected = 2 * attention + hidden**2 + 3 * hidden * (1536 + 768 + 1536) + 2 * vocab * hidden
    assert total_params(profile) == expected
    assert kv_bytes_per_token(profile) == 2 * 2 * kv_heads * head_dim * KV_BYTES
    assert profile.hf_repo == "nvidia/Tiny-Nemotron-NAS"
