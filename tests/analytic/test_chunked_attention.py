"""Laws of chunked local attention (Llama 4): a token attends to the keys of its own chunk only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.analytic.step_time import BatchAggregates, BatchShape, StepCostModel, decode_held
from simulator.config.loading import Catalog
from simulator.config.model import ChunkedWindow
from tests.conftest import deploy

CHUNK = 16
SEQUENCES = st.lists(st.tuples(st.sampled_from([1, 1, 2, 5, 16, 40]), st.integers(0, 80)), min_size=1, max_size=6)


def _keys(position: int, chunk: int) -> int:
    """Keys the token at ``position`` (from 0) attends to: those of its own chunk, itself included."""
    return position % chunk + 1


@given(SEQUENCES)
def test_a_pass_reads_its_chunks_keys_and_pairs_each_query_with_its_chunk(batch: list[tuple[int, int]]) -> None:
    """Counted one position at a time: the keys read run from the first new token's chunk start to
    the last new token, and each query pairs with the keys of its chunk; the per-iteration shape and
    the array aggregates agree to the last bit."""
    new, cached = [float(q) for q, _ in batch], [float(c) for _, c in batch]
    shape = BatchShape.of(new, cached, ChunkedWindow(CHUNK))
    aggregates = BatchAggregates.of(new, cached, ChunkedWindow(CHUNK))
    keys = sum(c + q - CHUNK * (c // CHUNK) for q, c in batch)
    pairs = sum(_keys(p, CHUNK) for q, c in batch for p in range(c, c + q))
    assert shape.held_window == float(aggregates.held_window[0]) == keys
    assert shape.pairs_window == float(aggregates.pairs_window[0]) == pairs


@given(st.lists(st.integers(0, 80), min_size=1, max_size=8), st.integers(1, 50))
def test_decode_steps_read_the_keys_since_each_chunk_boundary(contexts: list[int], steps: int) -> None:
    """Step ``j`` of a decode reads ``((c + j) mod W) + 1`` keys per sequence: never more than a
    sliding window of the same length reads, never more than the whole context."""
    cached = [float(c) for c in contexts]
    full, chunked = decode_held(cached, steps, ChunkedWindow(CHUNK))
    _, sliding = decode_held(cached, steps, CHUNK)
    assert chunked.tolist() == [float(sum(_keys(c + j, CHUNK) for c in contexts)) for j in range(steps)]
    assert all(ch <= sl <= f for ch, sl, f in zip(chunked, sliding, full, strict=True))


def test_a_chunk_boundary_resets_what_a_llama4_decode_reads() -> None:
    """Llama 4 Maverick (36 of 48 layers chunked at 8,192 tokens): a decode just past a chunk
    boundary reads less KV, so steps faster, than one just before it; the 12 global layers still
    read everything, so it stays slower than at a short context."""
    cost = StepCostModel(deploy(Catalog(), "nvidia-h200", "llama-4-maverick", weights="fp8", chips=8))
    assert isinstance(cost.deployment.model.attention.window, ChunkedWindow)

    def decode_s(context: int) -> float:
        return cost.cycle_time(256, context)[0]

    assert decode_s(8_300) < decode_s(8_100)
    assert decode_s(8_300) > decode_s(100)


def test_a_sliding_window_is_a_plain_length() -> None:
    """gpt-oss's sliding window stays a plain number of tokens (its results do not change)."""
    window = Catalog().model("gpt-oss-120b").attention.window
    assert window == 128 and not isinstance(window, ChunkedWindow)


def test_a_chunked_window_needs_its_length() -> None:
    with pytest.raises(ValueError, match="chunked needs sliding_window"):
        Catalog().model("llama-4-maverick").attention.model_validate(
            {"num_heads": 40, "num_kv_heads": 8, "head_dim": 128, "window_kind": "chunked"}
        )
