"""Hardware what-ifs under load: field paths into a backend's hardware profile sweep like any other
field, a local profile sits beside the bundled ones, and a results folder reruns as it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.config.loading import bundled_dir

SCENARIO = """\
name: h100-memory-bound
backends:
  - name: gpu
    deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 16, start_spread: 0.5 s}
requests:
  input_tokens: {dist: constant, value: 256}
  output_tokens: {dist: constant, value: 128}
run: {seed: 1, duration: 8 s, warmup: 2 s, drain: false}
"""

SWEEP = """\
name: hbm
scenario: s.yaml
grid:
  backends.gpu.hardware.memory.hbm.bandwidth: [2 TB/s, 3.35 TB/s, 6.7 TB/s]
metrics: [per_user_output_tok_s.p50, output_tok_s]
"""


def test_per_user_speed_rises_with_hbm_bandwidth_under_load(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.1-8b at 16 users on one H100 streams its weights from HBM each step: more bandwidth, faster."""
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    assert main(["sweep", str(tmp_path / "sweep.yaml"), "--jobs", "1", "-o", str(tmp_path / "out"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"]
    assert [r["backends.gpu.hardware.memory.hbm.bandwidth"] for r in rows] == ["2 TB/s", "3.35 TB/s", "6.7 TB/s"]
    speeds = [r["per_user_output_tok_s.p50"] for r in rows]
    assert not any(r["error"] for r in rows)
    assert speeds[0] < speeds[1] < speeds[2]


def _run(*args: str) -> int:
    return main([*args, "--json"])


def test_a_results_folder_reruns_as_it_ran_after_its_profile_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scenario.resolved.yaml holds the profiles it ran with: editing the profile later changes
    new runs of the scenario, not reruns of the folder."""
    profiles = tmp_path / "hw"
    profiles.mkdir()
    h100 = bundled_dir("hardware_profiles") / "nvidia-h100-sxm.yaml"
    (profiles / h100.name).write_text(h100.read_text())
    (tmp_path / "s.yaml").write_text(SCENARIO)
    first = tmp_path / "first"
    assert _run("--hardware-dir", str(profiles), "run", str(tmp_path / "s.yaml"), "-o", str(first)) == 0
    assert "shadows" in capsys.readouterr().err  # the local copy stands in for the bundled profile, and says so
    (profiles / h100.name).write_text(h100.read_text().replace("value: 3.35 TB/s", "value: 1.5 TB/s"))

    again = tmp_path / "again"
    assert _run("--hardware-dir", str(profiles), "run", str(first / "scenario.resolved.yaml"), "-o", str(again)) == 0
    assert (again / "summary.json").read_text() == (first / "summary.json").read_text()
    assert (again / "requests.csv").read_text() == (first / "requests.csv").read_text()

    edited = tmp_path / "edited"
    assert _run("--hardware-dir", str(profiles), "run", str(tmp_path / "s.yaml"), "-o", str(edited)) == 0
    slower = json.loads((edited / "summary.json").read_text())["per_user_output_tok_s"]["p50"]
    assert slower < json.loads((first / "summary.json").read_text())["per_user_output_tok_s"]["p50"]


def test_a_local_profile_compares_with_the_bundled_one_in_one_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--hardware-dir adds profiles: a tweaked H100 under its own id runs beside the bundled H100."""
    profiles = tmp_path / "hw"
    profiles.mkdir()
    text = (bundled_dir("hardware_profiles") / "nvidia-h100-sxm.yaml").read_text()
    tweaked = text.replace("id: nvidia-h100-sxm", "id: h100-2x-hbm").replace("value: 3.35 TB/s", "value: 6.7 TB/s")
    (profiles / "h100-2x-hbm.yaml").write_text(tweaked)
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("backends:\n  - name: gpu\n    deployment:", "deployment:"))
    out = tmp_path / "out"
    assert _run("--hardware-dir", str(profiles), "compare", str(tmp_path / "s.yaml"),
                "--hardware", "nvidia-h100-sxm,h100-2x-hbm", "-o", str(out)) == 0  # fmt: skip
    rows = json.loads(capsys.readouterr().out)
    assert [r["hardware"] for r in rows] == ["nvidia-h100-sxm", "h100-2x-hbm"]
    assert rows[1]["per_user_output_tok_s_p50"] > rows[0]["per_user_output_tok_s_p50"]


def test_a_set_into_the_hardware_profile_is_marked_as_the_users(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    out = tmp_path / "out"
    assert _run("run", str(tmp_path / "s.yaml"), "--set", "backends.gpu.hardware.memory.hbm.bandwidth=4 TB/s",
                "--set", "backends.gpu.hardware.compute.bf16=1 PFLOP/s", "-o", str(out)) == 0  # fmt: skip
    hardware = yaml.safe_load((out / "scenario.resolved.yaml").read_text())["backends"][0]["deployment"]["hardware"]
    hbm = next(tier for tier in hardware["memory"] if tier["name"] == "hbm")["bandwidth"]
    assert hbm["value"] == "4e+12 B/s" and hbm["source"] == "user-override" and hbm["confidence"] == "assumed"
    assert "was 3.35e+12 B/s from datasheet" in hbm["note"] and "user-override" in hardware["sources"]
    assert hardware["compute"]["peak"]["bf16"]["value"] == "1e+15 FLOP/s"
