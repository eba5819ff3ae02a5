"""The field-path language: one spelling for scenarios and profiles, what-ifs marked as the user's,
paths that do not resolve refused naming what is there; the catalog adds local profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.config.base import Sourced
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog, ConfigError, bundled_dir
from simulator.config.model import ModelSpec
from simulator.config.paths import USER_OVERRIDE, get_path, set_path, with_values, write_in
from simulator.config.scenario import Scenario
from simulator.errors import InfersimWarning
from simulator.runner import scenario_from

CATALOG = Catalog()
ONE = {
    "name": "one",
    "deployment": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1},
    "load": {"kind": "closed", "users": 4},
    "requests": {"input_tokens": {"dist": "constant", "value": 64}, "output_tokens": {"dist": "constant", "value": 8}},
    "run": {"seed": 1, "max_requests": 10},
}
FLEET = {k: v for k, v in ONE.items() if k != "deployment"} | {
    "backends": [
        {"name": "gpu", "deployment": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}},
        {"name": "wafer", "deployment": {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}},
    ]
}


def _set(data: dict[str, object], overrides: dict[str, object]) -> Scenario:
    return scenario_from(data, overrides, "s.yaml", CATALOG)


def test_a_path_into_the_hardware_sets_the_value_and_marks_it_as_the_users() -> None:
    scenario = _set(ONE, {"deployment.hardware.memory.hbm.bandwidth": "6.7 TB/s"})
    assert scenario.deployment is not None and isinstance(scenario.deployment.hardware, HardwareProfile)
    hbm = scenario.deployment.hardware.tier("hbm").bandwidth
    assert (hbm.value, hbm.source, hbm.confidence) == (6.7e12, USER_OVERRIDE.source, "assumed")
    assert "was 3.35e+12 B/s from datasheet" in hbm.note
    assert scenario.deployment.hardware.sources[USER_OVERRIDE.source] == USER_OVERRIDE.citation
    assert scenario.fleet[0].name == "nvidia-h100-sxm"  # still named after its hardware


def test_a_backends_hardware_and_a_peak_by_precision_are_shorthands() -> None:
    short = _set(FLEET, {"backends.wafer.hardware.compute.bf16": "1 PFLOP/s"})
    full = _set(FLEET, {"backends.1.deployment.hardware.compute.peak.bf16": "1 PFLOP/s"})
    assert short.model_copy(update={"backends": None}) == full.model_copy(update={"backends": None})
    peaks = [get_path(s, "backends.wafer.hardware.compute.bf16") for s in (short, full)]
    assert peaks[0].model_copy(update={"note": ""}) == peaks[1].model_copy(update={"note": ""})
    wafer = short.fleet[1].deployment.hardware
    assert isinstance(wafer, HardwareProfile) and wafer.compute.peak["bf16"].value == 1e15
    assert short.fleet[0].deployment.hardware == "nvidia-h100-sxm"  # the other backend keeps its id


def test_a_path_into_the_model_and_a_whole_sourced_number() -> None:
    overhead = {"value": "1 ms", "source": "datasheet", "confidence": "measured"}
    scenario = _set(ONE, {"deployment.model.max_context_tokens": 4096,
                          "deployment.hardware.execution.layer_latency": overhead})  # fmt: skip
    assert scenario.deployment is not None
    assert isinstance(scenario.deployment.model, ModelSpec) and scenario.deployment.model.max_context_tokens == 4096
    overhead = get_path(scenario, "deployment.hardware.execution.layer_latency")
    assert isinstance(overhead, Sourced) and (overhead.value, overhead.confidence) == (1e-3, "measured")


@pytest.mark.parametrize(
    ("path", "words"),
    [
        (
            "deployment.hardware.memory.hbx.bandwidth",
            "deployment.hardware.memory has no item 'hbx' (did you mean 'hbm'?) (l2, hbm, host)",
        ),
        (
            "deployment.hardware.compute.bf61",
            "unknown key (did you mean 'bf16'?) (deployment.hardware.compute has: peak, efficiency, cores",
        ),
        ("backends.tpu.replicas", "backends has no item 'tpu' (did you mean 'gpu'?) (gpu, wafer)"),
        (
            "load.userz",
            "load.userz: unknown key (did you mean 'users'?) (load has: kind, users, think_time_s, start_spread)",
        ),
        ("run.seed.low", "run.seed does not resolve to a mapping"),
    ],
)
def test_a_path_that_does_not_resolve_names_what_is_there(path: str, words: str) -> None:
    data = FLEET if path.startswith("backends") else ONE
    with pytest.raises(ConfigError, match=f"^s.yaml: --set {path}: .*") as error:
        _set(data, {path: 1})
    assert words in str(error.value)


def test_an_unset_tagged_field_starts_from_its_default() -> None:
    """``scheduler`` is not in the file: the path starts from the default scheduler, tag and all."""
    scenario = _set(ONE, {"scheduler.max_batch_size": 4})
    assert scenario.scheduler.policy == "continuous" and scenario.scheduler.max_batch_size == 4


def test_python_callers_give_si_numbers_or_strings_with_units() -> None:
    h100 = CATALOG.hardware("nvidia-h100-sxm")
    a = with_values(h100, {"memory.hbm.bandwidth": 4e12, "execution.layer_latency": "5 us"})
    b = with_values(h100, {"memory.hbm.bandwidth": "4 TB/s", "execution.layer_latency": 5e-6})
    assert a == b and get_path(a, "memory.hbm.bandwidth").value == 4e12
    with pytest.raises(ConfigError, match="unknown key"):
        get_path(h100, "memory.hbm.bandwidht")


def test_raw_paths_need_a_catalog_to_go_into_a_profile() -> None:
    with pytest.raises(ConfigError, match="no catalog"):
        set_path(ONE, "deployment.hardware.memory.hbm.bandwidth", "1 TB/s", Scenario)


def test_every_bundled_profile_reads_back_as_written() -> None:
    """Written out (units at 12 significant digits) and read again, a profile is the same profile:
    a self-contained scenario reruns exactly."""
    for profile in [*map(CATALOG.hardware, CATALOG.hardware_ids()), *map(CATALOG.model, CATALOG.model_ids())]:
        assert type(profile).model_validate(profile.model_dump(mode="json")) == profile, profile.id


def test_write_in_replaces_every_id_by_its_profile() -> None:
    scenario = Scenario.model_validate(FLEET | {"classes": None})
    written = write_in(scenario, CATALOG)
    assert all(isinstance(b.deployment.hardware, HardwareProfile) for b in written.fleet)
    assert Scenario.model_validate(written.model_dump(mode="json")) == written


def test_a_local_folder_adds_profiles_and_a_shadow_warns_when_used(tmp_path: Path) -> None:
    h100 = (bundled_dir("hardware_profiles") / "nvidia-h100-sxm.yaml").read_text()
    (tmp_path / "h100-fast.yaml").write_text(h100.replace("id: nvidia-h100-sxm", "id: h100-fast"))
    (tmp_path / "nvidia-h100-sxm.yaml").write_text(h100)
    catalog = Catalog(hardware_dir=tmp_path)
    assert {"h100-fast", "nvidia-h100-sxm", "cerebras-cs3"} <= set(catalog.hardware_ids())
    assert catalog.hardware("h100-fast").id == "h100-fast"
    with pytest.warns(InfersimWarning, match="shadows"):
        catalog.hardware("nvidia-h100-sxm")
