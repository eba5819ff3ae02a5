"""Every bundled profile is checked the moment it is added (scikit-learn's check_estimator idea)."""

from __future__ import annotations

import math

import pytest

from simulator.analytic.architecture import active_params, group_params, total_params
from simulator.analytic.placement import PlacementError, weight_bytes_of
from simulator.analytic.roofline import deployment_ridge_point
from simulator.config.base import Sourced
from simulator.config.hardware import HardwareProfile, _sourced_values
from simulator.config.loading import Catalog
from simulator.config.model import TENSOR_GROUPS, ModelSpec
from tests.conftest import deploy

CATALOG = Catalog()
HARDWARE = CATALOG.hardware_ids()
MODELS = CATALOG.model_ids()
REQUIRED_HARDWARE = {
    "cerebras-cs3", "groq-lpu", "sambanova-sn40l", "nvidia-a100-sxm", "nvidia-h100-sxm",
    "nvidia-h200", "nvidia-b200", "nvidia-gb200", "amd-mi300x",
}  # fmt: skip
REQUIRED_MODELS = {
    "llama-2-7b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b", "llama-3.1-405b",
    "mixtral-8x7b", "gpt-oss-20b", "gpt-oss-120b", "qwen3-32b", "qwen3-235b-a22b", "deepseek-r1",
    "llama-4-maverick", "frontier-moe",
}  # fmt: skip
#: Derived totals must match the model card; "active" conventions differ (some count the input
#: embedding, some do not), hence the wider tolerance there.
TOTAL_PARAMS_REL_TOL = 0.02
ACTIVE_PARAMS_REL_TOL = 0.07


def test_the_required_profiles_are_bundled() -> None:
    assert set(HARDWARE) >= REQUIRED_HARDWARE
    assert set(MODELS) >= REQUIRED_MODELS


@pytest.mark.parametrize("hardware_id", HARDWARE)
def test_hardware_round_trips_through_its_unit_strings(hardware_id: str) -> None:
    profile = CATALOG.hardware(hardware_id)
    assert HardwareProfile.model_validate(profile.model_dump(mode="json")) == profile


@pytest.mark.parametrize("hardware_id", HARDWARE)
def test_every_hardware_number_has_a_defined_source(hardware_id: str) -> None:
    profile = CATALOG.hardware(hardware_id)
    values = _sourced_values(profile)
    assert len(values) > 15
    assert all(isinstance(v, Sourced) and v.source in profile.sources for v in values)
    assert all(profile.sources[key].strip() for key in profile.sources)


@pytest.mark.parametrize("hardware_id", HARDWARE)
def test_tiers_are_ordered_and_the_ridge_point_is_finite(catalog: Catalog, hardware_id: str) -> None:
    profile = CATALOG.hardware(hardware_id)
    bandwidths = [t.bandwidth.value for t in profile.memory]
    assert bandwidths == sorted(bandwidths, reverse=True)
    d = deploy(catalog, hardware_id, "llama-3.1-8b")
    assert math.isfinite(deployment_ridge_point(d)) and deployment_ridge_point(d) > 0


@pytest.mark.parametrize("hardware_id", HARDWARE)
def test_every_hardware_places_a_small_model(catalog: Catalog, hardware_id: str) -> None:
    d = deploy(catalog, hardware_id, "llama-3.1-8b")
    assert d.chips >= 1 and d.kv_budget_bytes > 0


@pytest.mark.parametrize("model_id", MODELS)
def test_model_round_trips(model_id: str) -> None:
    model = CATALOG.model(model_id)
    assert ModelSpec.model_validate(model.model_dump(mode="json")) == model


@pytest.mark.parametrize("model_id", MODELS)
def test_derived_parameter_counts_match_the_published_ones(model_id: str) -> None:
    """Counting weights from config.json shapes reproduces the model card's totals (text-only
    profiles of multimodal models leave out a vision encoder of up to ~1 %); the active count
    matches with or without the input embedding, as cards count it either way."""
    model = CATALOG.model(model_id)
    assert total_params(model) == pytest.approx(model.published.params_total.value, rel=TOTAL_PARAMS_REL_TOL)
    published = model.published.params_active.value
    with_embedding = active_params(model) + group_params(model)["embeddings"]
    assert min(abs(active_params(model) / published - 1), abs(with_embedding / published - 1)) <= ACTIVE_PARAMS_REL_TOL


@pytest.mark.parametrize("model_id", [m for m in MODELS if CATALOG.model(m).published.checkpoint_bytes is not None])
def test_precision_groups_add_up_to_the_published_checkpoint(model_id: str) -> None:
    """Each tensor group's parameters at the precision the checkpoint stores it in sum to the
    published checkpoint size within 2 % (gpt-oss: MXFP4 experts, BF16 rest)."""
    model = CATALOG.model(model_id)
    stored = weight_bytes_of(model, {g: model.checkpoint_precision(g) for g in TENSOR_GROUPS})
    assert stored == pytest.approx(model.published.checkpoint_bytes.value, rel=0.02)  # type: ignore[union-attr]


@pytest.mark.parametrize("model_id", MODELS)
def test_every_model_fits_somewhere(catalog: Catalog, model_id: str) -> None:
    placed = []
    for hardware_id in HARDWARE:
        try:
            placed.append(deploy(catalog, hardware_id, model_id))
        except PlacementError:
            continue
    assert placed, f"{model_id} fits on no bundled hardware"
