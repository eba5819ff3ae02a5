"""compare-measured pairs every measured request with its simulation; validate runs imported loads."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.studies.validation import loaded_scenario, read_table

FIXTURES = Path(__file__).parent / "fixtures" / "measured"
REQUESTS = 24


@pytest.fixture
def small_import(tmp_path: Path) -> Path:
    """The first requests of a real vLLM run (statistics left as measured: the replay compares requests)."""
    data = json.loads((FIXTURES / "vllm-llama70b-a100-qps04.json").read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        data[key] = data[key][:REQUESTS]
    data |= {"num_prompts": REQUESTS, "completed": REQUESTS, "total_input_tokens": sum(data["input_lens"]),
             "total_output_tokens": sum(data["output_lens"])}  # fmt: skip
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "import"
    assert main(["import", str(path), "--hardware", "nvidia-a100-sxm", "--chips", "8", "--layout", "TP8",
                 "--stack", "vllm", "-o", str(out)]) == 0  # fmt: skip
    return out


def test_every_request_is_compared_with_its_own_simulation(small_import, tmp_path, capsys) -> None:
    out = tmp_path / "compare"
    assert main(["compare-measured", str(small_import), "--report", "-o", str(out)]) == 0
    assert "median |error|" in capsys.readouterr().out
    with (out / "run.csv").open() as handle:
        lines = list(csv.DictReader(handle))
    with (small_import / "measured" / "run.csv").open() as handle:
        measured = list(csv.DictReader(handle))
    assert len(lines) == len(measured) == REQUESTS
    for line, truth in zip(lines, measured, strict=True):
        assert float(line["measured_ttft_s"]) == pytest.approx(float(truth["ttft_s"]))
        assert 0 < float(line["simulated_ttft_s"]) <= float(line["simulated_e2e_s"])  # causality per request
    summary = json.loads((out / "compare.json").read_text())["run"]
    assert summary["ttft_s"]["compared"] == REQUESTS
    assert (out / "figures" / "run-cdf.png").read_bytes()[:4] == b"\x89PNG" and (out / "report.html").is_file()


def test_compare_measured_needs_an_import_folder(tmp_path, capsys) -> None:
    assert main(["compare-measured", str(tmp_path)]) == 2
    assert "import.json" in capsys.readouterr().err


def test_imported_open_loads_run_as_their_arrival_process(tmp_path) -> None:
    """vLLM's gamma shape k becomes the engine's CV^2 = 1/k; inference-perf's stages are evenly spaced."""
    out = tmp_path / "o"
    files = [str(FIXTURES / "vllm-llmd-h100-2replicas.json"), str(FIXTURES / "inference-perf-stage2.json")]
    flags = ["--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--chips", "1", "-o", str(out)]
    assert main(["import", *files, *flags]) == 0
    rows = {r.load: r for r in read_table(out / "measurements.csv")}
    gamma = loaded_scenario(rows["gamma"], 1, 1.0).load.arrivals
    assert gamma.process == "gamma" and gamma.burstiness == pytest.approx(1 / 100)
    assert loaded_scenario(rows["constant"], 1, 1.0).load.arrivals.process == "constant"


@pytest.mark.parametrize(("cell", "words"), [("p42", "statistic: expected one of"), ("", "burstiness: a gamma load")])
def test_bad_statistic_or_missing_burstiness_is_refused(cell, words, tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert main(["import", str(FIXTURES / "vllm-llmd-h100-2replicas.json"), "--hardware", "nvidia-h100-sxm",
                 "-o", str(out)]) == 0  # fmt: skip
    table = (out / "measurements.csv").read_text().splitlines()
    header = table[0].split(",")
    column = "statistic" if cell else "burstiness"
    cells = next(csv.reader([table[1]]))
    cells[header.index(column)] = cell
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows([header, cells])
    assert main(["validate", str(bad)]) == 2
    assert words in capsys.readouterr().err
