"""Stack defaults: the KV-cache precision and batching caps a deployment gets when it names
neither, as each stack documents them (stack_profiles/*.yaml), and a deployment's own choice
still wins."""

from __future__ import annotations

from typing import get_args

import pytest

from simulator.config.base import Precision
from simulator.config.loading import Catalog
from tests.conftest import deploy


@pytest.mark.parametrize("stack", ["vllm", "sglang", "vllm-rocm"])
@pytest.mark.parametrize(("model", "weights"), [("gpt-oss-120b", "mxfp4"), ("llama-3.1-70b", "fp8")])
def test_auto_stacks_keep_kv_in_the_activation_dtype_whatever_the_weights(
    catalog: Catalog, stack: str, model: str, weights: str
) -> None:
    d = deploy(catalog, "nvidia-h200", model, weights=weights, stack=stack)
    assert d.kv_cache == d.activations == "bf16"


@pytest.mark.parametrize(("weights", "kv"), [("fp8", "fp8"), ("bf16", "bf16")])
def test_tensorrt_llm_takes_fp8_kv_from_fp8_checkpoints_only(catalog: Catalog, weights: str, kv: str) -> None:
    assert deploy(catalog, "nvidia-h200", "llama-3.1-70b", weights=weights, stack="trtllm").kv_cache == kv


def test_tensorrt_llm_keeps_bf16_kv_for_gpt_oss_mxfp4(catalog: Catalog) -> None:
    """gpt-oss's MXFP4 checkpoint quantises the experts only: its KV stays BF16 and takes twice the
    bytes per token that FP8 KV would, so half the sequences fit."""
    default = deploy(catalog, "nvidia-h100-sxm", "gpt-oss-120b", stack="trtllm")
    fp8 = deploy(catalog, "nvidia-h100-sxm", "gpt-oss-120b", stack="trtllm", kv_cache="fp8")
    assert default.kv_cache == "bf16"
    assert default.kv_bytes_per_token == pytest.approx(2 * fp8.kv_bytes_per_token)
    assert default.max_sequences(1024) < fp8.max_sequences(1024)


@pytest.mark.parametrize("kv", get_args(Precision))
def test_a_deployment_that_states_its_kv_precision_gets_it(catalog: Catalog, kv: Precision) -> None:
    assert deploy(catalog, "nvidia-h200", "llama-3.1-8b", stack="vllm", kv_cache=kv).kv_cache == kv


def test_vllm_caps_follow_the_chip_as_its_engine_arguments_do(catalog: Catalog) -> None:
    """1,024 sequences and 8,192 tokens on >= 70 GiB GPUs, 256 and 2,048 on A100 (by name)."""
    h100 = deploy(catalog, "nvidia-h100-sxm", "llama-3.1-8b", stack="vllm")
    a100 = deploy(catalog, "nvidia-a100-sxm", "llama-3.1-8b", stack="vllm")
    assert (h100.max_batch_size, h100.max_batched_tokens) == (1024, 8192)
    assert (a100.max_batch_size, a100.max_batched_tokens) == (256, 2048)


def test_amd_vllm_build_has_its_own_profile(catalog: Catalog) -> None:
    d = deploy(catalog, "amd-mi300x", "llama-3.1-70b", weights="fp8", stack="vllm-rocm")
    assert d.stack.id == "vllm-rocm"
    assert (d.kv_cache, d.max_batch_size, d.max_batched_tokens) == ("bf16", 1024, 8192)


def test_every_stack_default_is_sourced_and_names_real_hardware(catalog: Catalog) -> None:
    hardware = set(catalog.hardware_ids())
    for stack_id in catalog.stack_ids():
        stack = catalog.stack(stack_id)
        assert stack.kv_cache.source in stack.sources, stack_id
        for hardware_id, caps in stack.by_hardware.items():
            assert hardware_id in hardware, f"{stack_id}: by_hardware names unknown {hardware_id}"
            for cap in (caps.max_batch_size, caps.max_batched_tokens):
                assert cap is None or cap.source in stack.sources, f"{stack_id}.by_hardware.{hardware_id}"
