"""The engine's fast step-cost path equals the reference step-time model (same physics, same numbers)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np
import pytest

from simulator.analytic.placement import Deployment, PlacementError
from simulator.analytic.step_fast import FastStepCost, JumpWork
from simulator.analytic.step_time import BatchAggregates, BatchShape, StepCostModel, decode_held
from simulator.config.loading import Catalog
from simulator.config.speculation import SpeculativeSpec
from tests.conftest import deploy

CATALOG = Catalog()
DEPLOYMENTS = {
    "dense TP2 x PP2": deploy(CATALOG, "nvidia-a100-sxm", "llama-2-70b", chips=4, tensor_parallel=2,
                              pipeline_parallel=2),
    "MoE": deploy(CATALOG, "nvidia-h100-sxm", "mixtral-8x7b", chips=2),
    "MoE, data-parallel attention": deploy(CATALOG, "nvidia-h200", "deepseek-v3", chips=8, attention_parallel="data"),
    "windowed, layer-pipelined": deploy(CATALOG, "cerebras-cs3", "gpt-oss-120b", weights="mxfp4"),
    "LPU": deploy(CATALOG, "groq-lpu", "llama-3.1-8b", weights="fp8"),
    "speculative": deploy(CATALOG, "nvidia-h100-sxm", "llama-3.1-70b", chips=4,
                          speculative=SpeculativeSpec(draft="model", draft_model="llama-3.1-8b", tokens_proposed=4)),
}  # fmt: skip
RTOL = 1e-9
#: A jump's work summed in closed form (affine steps) against the steps' correctly rounded sum: rounding only.
CLOSED_FORM_RTOL = 1e-12


def _random_tokens(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(new, cached) tokens of a random batch: mostly decodes, some prompt chunks."""
    size = int(rng.integers(1, 130))
    new = np.where(rng.random(size) < 0.7, 1.0, rng.integers(1, 4096, size).astype(float))
    return new, rng.integers(0, 40_000, size).astype(float)


def _random_batches(rng: np.random.Generator, window: int | None) -> list[BatchAggregates]:
    return [BatchAggregates.of(*_random_tokens(rng), window) for _ in range(40)]


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_fast_path_equals_the_reference_model_on_random_batches_and_decode_jumps(name: str) -> None:
    reference = StepCostModel(DEPLOYMENTS[name])
    fast = FastStepCost(reference)
    window = reference.deployment.model.attention.sliding_window
    rng = np.random.default_rng(7)
    jumps = [BatchAggregates.decode_steps(rng.integers(1, 9000, int(n)).astype(float), int(k), window)
             for n, k in rng.integers(1, 129, (10, 2))]  # fmt: skip
    for batch in [*_random_batches(rng, window), *jumps]:
        want, got = reference.iteration_times(batch), fast.iteration_times(batch)
        np.testing.assert_allclose(got.total_s, want.total_s, rtol=RTOL)
        np.testing.assert_allclose(got.flops, want.flops, rtol=RTOL)
        np.testing.assert_allclose(got.bytes_moved, want.bytes_moved, rtol=RTOL)
    for n, k in rng.integers(1, 129, (10, 2)):  # a decode jump from its sequences' contexts, as the engine runs it
        held = rng.integers(1, 9000, int(n)).astype(float).tolist()
        want = reference.iteration_times(BatchAggregates.decode_steps(held, int(k), window))
        got = fast.decode_steps(held, int(k), window).times()
        np.testing.assert_allclose(got.total_s, want.total_s, rtol=RTOL)
        np.testing.assert_allclose(_work_so_far(got.work, int(k)), np.cumsum([want.flops, want.bytes_moved], axis=1),
                                   rtol=RTOL)  # fmt: skip
    for _ in range(20):  # one iteration in plain floats, as the engine runs it
        new, cached = _random_tokens(rng)
        want = reference.iteration_times(BatchAggregates.of(new, cached, window))
        got = fast.iteration(BatchShape.of(new.tolist(), cached.tolist(), window))
        assert got == pytest.approx((want.total_s[0], want.flops[0], want.bytes_moved[0]), rel=RTOL)
    context = rng.integers(1, 9000, 17).astype(float)
    assert fast.draft_s(context) == pytest.approx(reference.draft_s(context), rel=RTOL)
    assert (fast.draft is not None) == bool(reference.accepted)


def _work_so_far(work: JumpWork, steps: int) -> np.ndarray:
    """(FLOPs, bytes) of a jump's first 1, 2, ..., ``steps`` steps: shape (2, steps)."""
    return np.array([work.totals(done) for done in range(1, steps + 1)]).T


@pytest.mark.parametrize("window", [None, 1, 128, 4096])
def test_one_batch_in_plain_floats_equals_its_array_aggregates_to_the_last_bit(window: int | None) -> None:
    """Whole and half token counts make every sum exact: the engine's plain-Python statistics of
    an iteration equal the array ones exactly, so a run does not depend on which computed them."""
    rng = np.random.default_rng(11)
    for _ in range(50):
        new, cached = _random_tokens(rng)
        arrays = BatchAggregates.of(new, cached, window)
        shape = BatchShape.of(new.tolist(), cached.tolist(), window)
        assert shape == tuple(float(getattr(arrays, name)[0]) for name in BatchShape._fields)


@pytest.mark.parametrize("window", [None, 1, 2, 128, 4096])
def test_tokens_held_through_a_decode_jump_are_their_definition_exactly(window: int | None) -> None:
    """Step ``j`` of a jump holds ``sum c + n (j + 1)`` tokens in all layers and ``sum min(c + j + 1, W)``
    in windowed ones, computed here term by term; whole token counts make both sums exact."""
    rng = np.random.default_rng(5)
    high = 6000 if window is None else 2 * window + 2  # many sequences cross the window during the jump
    for _ in range(15):
        contexts = rng.integers(0, high, int(rng.integers(1, 130))).astype(float).tolist()
        steps = int(rng.integers(1, 300))
        held, held_window = decode_held(contexts, steps, window)
        limit = float("inf") if window is None else float(window)
        for j in range(steps):  # every step: sequences reach the window at any of them
            assert held[j] == sum(c + j + 1.0 for c in contexts)
            assert held_window[j] == sum(min(c + j + 1.0, limit) for c in contexts)


LAYOUTS = {
    "default": {},
    "data-parallel attention": {"chips": 16, "attention_parallel": "data"},
    "TP2 x PP4": {"chips": 8, "tensor_parallel": 2, "pipeline_parallel": 4},
}


def _fitting(
    hardware: str, layout: str, models: tuple[str, ...]
) -> Iterator[tuple[StepCostModel, FastStepCost, int | None]]:
    """(reference, fast path, window) of each of ``models`` that this layout fits on this hardware."""
    for model in models:
        try:
            reference = StepCostModel(deploy(CATALOG, hardware, model, **LAYOUTS[layout]))
        except PlacementError:  # this layout does not fit this model on this hardware
            continue
        yield reference, FastStepCost(reference), reference.deployment.model.attention.sliding_window


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("hardware", CATALOG.hardware_ids())
def test_every_profile_costs_a_batch_the_same_through_the_fast_path(hardware: str, layout: str) -> None:
    """Every hardware profile (torus, fabric, layer-pipelined, p-norm or max roofline), with a dense, two
    MoE and a windowed model: the engine's plain-float iteration equals the reference arrays."""
    rng = np.random.default_rng(13)
    evaluated = 0
    for reference, fast, window in _fitting(hardware, layout, ("llama-3.1-70b", "mixtral-8x7b", "deepseek-v3",
                                                                "gpt-oss-120b")):  # fmt: skip
        for _ in range(10):
            new, cached = _random_tokens(rng)
            want = reference.iteration_times(BatchAggregates.of(new, cached, window))
            got = fast.iteration(BatchShape.of(new.tolist(), cached.tolist(), window))
            assert got == pytest.approx((want.total_s[0], want.flops[0], want.bytes_moved[0]), rel=RTOL)
        evaluated += 1
    if layout == "default":
        assert evaluated


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("hardware", CATALOG.hardware_ids())
def test_a_decode_jump_costs_each_step_as_one_iteration_to_the_last_bit(hardware: str, layout: str) -> None:
    """A decode jump costs its steps in one loop; each step is, bit for bit, the plain-float
    iteration of that step's batch, so a run does not depend on how its steps were grouped."""
    rng = np.random.default_rng(17)
    for _, fast, window in _fitting(hardware, layout, ("llama-3.1-70b", "deepseek-v3", "gpt-oss-120b")):
        affine = stepwise = 0
        for n, steps in rng.integers(1, 200, (4, 2)):
            below = float(rng.choice([50.0, 0.0]))  # some sequences reach the window during the jump, or all hold it
            contexts = (rng.integers(0, 300, int(n)) * 0.5 + (window or 0) - below).clip(0.0).tolist()
            jump = fast.decode_steps(contexts, int(steps), window).times()
            held, held_window = decode_held(contexts, int(steps), window)
            each = [fast.iteration(BatchShape(float(n), float(n), held_full=full, held_window=windowed,
                                              pairs_full=full, pairs_window=windowed))
                    for full, windowed in zip(held.tolist(), held_window.tolist(), strict=True)]  # fmt: skip
            seconds, flops, moved = (list(column) for column in zip(*each, strict=True))
            assert jump.total_s == seconds
            assert jump.elapsed_s == list(itertools.accumulate(seconds))[-1]  # the end the replica waits for
            chunked = fast.decode_steps(contexts, int(steps), window)
            for upto in (1, 2, 9, int(steps)):  # as a replica costs a jump an arrival may cut: a chunk at a time
                chunked.extend(upto)
            assert (chunked.total_s, chunked.elapsed_s) == (seconds, jump.elapsed_s)
            # the work of every prefix a cut may leave: the steps' correctly rounded sums, or their
            # closed form where each step adds the same (every sequence at its window, or none)
            sums = [(math.fsum(flops[:done]), math.fsum(moved[:done])) for done in range(1, int(steps) + 1)]
            if jump.work.affine:
                assert held_window.tolist() == held.tolist() or len(set(held_window.tolist())) == 1
                np.testing.assert_allclose(_work_so_far(jump.work, int(steps)), np.array(sums).T, rtol=CLOSED_FORM_RTOL)
            else:
                assert [jump.work.totals(done) for done in range(1, int(steps) + 1)] == sums
            affine += jump.work.affine
            stepwise += not jump.work.affine
        assert stepwise or window is None  # a windowed model runs both kinds of jump
        assert affine


def test_a_gpu_decode_jump_costs_its_steps_in_one_loop_to_the_same_bits() -> None:
    """On one micro-batch whose windowed layers hold the same at every step (every sequence at its
    window), a decode jump costs the steps after its first in one loop
    (:meth:`StepCostModel.decode_seconds`), and each step's seconds and their running sum are,
    bit for bit, those of the step-by-step path (the same jump with the loop turned off)."""
    for hardware, window in (("nvidia-h100-sxm", 128), ("amd-mi300x", 128), ("nvidia-b200", None)):
        model = "gpt-oss-120b" if window else "llama-3.1-70b"
        fast = FastStepCost(StepCostModel(deploy(CATALOG, hardware, model)))
        contexts = [3000.0, 150.0, 40_000.0, 128.0]
        for chunks in ((200,), (1, 96, 200), (5, 6, 7, 150, 200)):
            fused, stepwise = fast.decode_steps(contexts, 200, window), fast.decode_steps(contexts, 200, window)
            stepwise.fused = False
            assert fused.fused
            for upto in chunks:
                fused.extend(upto)
                stepwise.extend(upto)
                assert (fused.total_s, fused.elapsed_s) == (stepwise.total_s, stepwise.elapsed_s)
            assert fused.work().totals(200) == stepwise.work().totals(200)


class WiderCore(StepCostModel):
    """A variant of one mechanism: the attention core takes twice as long."""

    def core_row(
        self, count: float, held: float, pairs: float, share: float, rank_tokens: float
    ) -> tuple[float, float, float, float]:
        seconds, memory_share, flops, moved = super().core_row(count, held, pairs, share, rank_tokens)
        return 2.0 * seconds, memory_share, flops, moved


def test_a_decode_jump_runs_a_subclass_s_own_core_row() -> None:
    deployment = deploy(CATALOG, "nvidia-h200", "gpt-oss-120b")
    variant, plain = FastStepCost(WiderCore(deployment)), FastStepCost(StepCostModel(deployment))
    contexts = [3000.0, 150.0, 40_000.0]
    held, held_window = decode_held(contexts, 5, 128)
    want = [variant.iteration(BatchShape(3.0, 3.0, held_full=full, held_window=windowed, pairs_full=full,
                                         pairs_window=windowed))
            for full, windowed in zip(held.tolist(), held_window.tolist(), strict=True)]  # fmt: skip
    jump = variant.decode_steps(contexts, 5, 128).times()
    assert (jump.total_s, jump.work.flops, jump.work.bytes_moved) == tuple(list(c) for c in zip(*want, strict=True))
    assert (
        variant.decode_steps(contexts, 5, 128).times().total_s[0]
        > plain.decode_steps(contexts, 5, 128).times().total_s[0]
    )


def _deployed(hardware: str, model: str) -> list[Deployment]:
    try:
        return [deploy(CATALOG, hardware=hardware, model=model)]
    except PlacementError:
        return []


def test_shape_terms_are_shared_by_equal_deployments_only() -> None:
    """The shape-term cache outlives a run, shared by the reference models of equal deployments
    (their terms depend on the deployment alone): an equal deployment built anew reuses it, another
    deployment or a subclass (whose terms may depend on more) has its own, and the fewest recently
    used go once more than ``SHARED_DEPLOYMENTS`` are held. Shared or not, a batch costs the same."""
    from simulator.analytic import step_fast

    spec = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-70b"}
    first, again = (FastStepCost(StepCostModel(deploy(CATALOG, **spec))) for _ in range(2))
    shape = BatchShape(512.0, 3.0, held_full=2048.0, held_window=2048.0, pairs_full=4096.0, pairs_window=4096.0)
    alone = first.iteration(shape)
    assert again._base is first._base and again.iteration(shape) == alone
    other = FastStepCost(StepCostModel(deploy(CATALOG, hardware="nvidia-b200", model="llama-3.1-70b")))
    variant = FastStepCost(WiderCore(deploy(CATALOG, **spec)))
    assert other._base is not first._base and variant._base is not first._base
    others = [deployed for hardware in CATALOG.hardware_ids() for deployed in _deployed(hardware, "llama-3.1-8b")]
    assert len(others) >= step_fast.SHARED_DEPLOYMENTS
    for deployment in others[: step_fast.SHARED_DEPLOYMENTS]:  # as many others as are kept push the first out
        FastStepCost(StepCostModel(deployment))
    fresh = FastStepCost(StepCostModel(deploy(CATALOG, **spec)))
    assert fresh._base is not first._base and fresh.iteration(shape) == alone
    assert len(step_fast._shared.keys()) == step_fast.SHARED_DEPLOYMENTS


def test_moe_rows_are_kept_for_equal_deployments_only() -> None:
    """A MoE layer's row depends on its token counts and the deployment alone: the reference models
    of equal deployments keep it in one place, a subclass in its own; a kept row is the one computed."""
    spec = {"hardware": "nvidia-h100-sxm", "model": "gpt-oss-120b"}
    first, again = (StepCostModel(deploy(CATALOG, **spec)) for _ in range(2))
    assert again.moe_rows is first.moe_rows
    assert WiderCore(deploy(CATALOG, **spec)).moe_rows is not first.moe_rows
    row = first.moe_row(4095.0, 4095.0)
    assert again.moe_rows[(4095.0, 4095.0)] == row
    assert again.moe_row(4095.0, 4095.0) == again._moe_row(4095.0, 4095.0) == row


def test_threads_share_one_shape_cache_per_deployment() -> None:
    """Simulations in threads (a Dask worker's) look the cache up at once: each deployment is
    held once, and every thread gets its cache."""
    from concurrent.futures import ThreadPoolExecutor

    from simulator.analytic import step_fast

    models = [StepCostModel(d) for hardware in ("nvidia-h100-sxm", "nvidia-b200", "amd-mi300x")
              for d in _deployed(hardware, "llama-3.1-8b")]  # fmt: skip
    with ThreadPoolExecutor(8) as pool:
        caches = list(pool.map(step_fast.shape_cache, models * 300))
    held = step_fast._shared.keys()
    assert all(held.count(model.deployment) == 1 for model in models)
    assert all(cache is caches[index % len(models)] for index, cache in enumerate(caches))
