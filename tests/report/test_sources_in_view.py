"""Sources in view: the numbers an answer rests on carry their confidence and source in every output.

Laws: each deciding number is the profile's own (same value, confidence and source key, its citation
from the profile's ``sources``); ``--explain`` lists every sourced number of the hardware and stack
profiles; ``compare`` names them per hardware in its table file and JSON, and the report shows them.
"""

from __future__ import annotations

import json
from pathlib import Path

from simulator import deploy
from simulator.sources import deciding, every_number, shown
from tests.cli.test_cli import run_cli
from tests.report.test_capacity_flags import BEYOND_KV


def test_the_deciding_numbers_are_the_profiles_own() -> None:
    d = deploy("nvidia-b200", "gpt-oss-120b", weights="mxfp4")
    numbers = {n.what: n for n in deciding(d)}
    tier = d.weights_tier
    bandwidth = numbers[f"{tier.name} bandwidth"]
    assert bandwidth.value == shown("bandwidth", tier.bandwidth.value)
    assert (bandwidth.confidence, bandwidth.source) == (tier.bandwidth.confidence, tier.bandwidth.source)
    assert bandwidth.citation == d.hardware.sources[tier.bandwidth.source]
    efficiency = d.hardware.compute.weight_only["mxfp4"].efficiency  # mxfp4 weights run weight-only on fp8
    assert numbers["matmul efficiency"].confidence == efficiency.confidence == "assumed"
    assert {"peak fp8", "rental $/chip-hour"} <= numbers.keys()
    for what, field in (("full power", "chip"), ("idle power", "idle")):  # the W behind every J/token
        number = getattr(d.hardware.power, field)
        assert numbers[what].value == shown(f"power.{field}", number.value) and numbers[what].value.endswith("W")
        assert (numbers[what].confidence, numbers[what].source) == (number.confidence, number.source)
    assert all(n.citation for n in numbers.values())  # every source key names a citation


def test_every_number_walks_the_whole_profile() -> None:
    d = deploy("nvidia-h100-sxm", "llama-3.1-8b")
    paths = {n.path for n in every_number(d.hardware, d.stack)}
    assert {"nvidia-h100-sxm:memory.hbm.bandwidth", "nvidia-h100-sxm:compute.efficiency",
            f"{d.stack.id}:layer_latency"} <= paths  # fmt: skip
    assert len(paths) == len(every_number(d.hardware, d.stack))  # one entry per field path


def test_estimate_shows_and_explains_its_sources() -> None:
    args = ("estimate", "--hardware", "nvidia-b200", "--model", "gpt-oss-120b", "--weights", "mxfp4")
    text = run_cli(*args)
    assert text.returncode == 0, text.stderr
    mxfp4 = deploy("nvidia-b200", "gpt-oss-120b", weights="mxfp4").hardware.compute.weight_only["mxfp4"].efficiency
    assert "numbers it rests on" in text.stdout
    assert f"matmul efficiency {mxfp4.value:.3g} ({mxfp4.confidence}: {mxfp4.source})" in text.stdout, text.stdout
    as_json = json.loads(run_cli(*args, "--json", "--explain").stdout)
    assert {n["confidence"] for n in as_json["sources"]} <= {"datasheet", "measured", "vendor-claim", "derived",
                                                             "assumed"}  # fmt: skip
    assert len(as_json["explain"]) > len(as_json["sources"]) and "explain" not in json.loads(run_cli(*args, "--json")
                                                                                              .stdout)  # fmt: skip
    explained = run_cli(*args, "--explain").stdout
    assert "nvidia-b200:memory.hbm.bandwidth  8 TB/s  datasheet" in explained


def test_compare_and_its_report_show_the_sources(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(BEYOND_KV)
    out = tmp_path / "cmp"
    result = run_cli("compare", str(tmp_path / "s.yaml"), "--hardware", "cerebras-cs3", "-o", str(out), "--report",
                     "--explain")  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads((out / "compare.json").read_text())
    assert any(n["what"] == "sram bandwidth" and n["confidence"] == "datasheet" for n in row["sources"])
    assert "Numbers the rows rest on" in (out / "compare.txt").read_text()
    assert "Every sourced number" in result.stdout and "cerebras-cs3:memory.sram.bandwidth" in result.stdout
    page = (out / "report.html").read_text()
    assert "Where the numbers come from" in page and "sram bandwidth" in page
