"""The HTML report: every figure and table is in the page, and a real headless Chromium renders it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from simulator.capacity import LIMITED_MARK
from simulator.cli.report import write_report
from simulator.report import collect
from simulator.report.captions import ASSUMPTION_LABELS
from simulator.units import parse_quantity
from tests.cli.test_cli import run_cli

SCENARIO = """\
name: report-test
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: agents, workload: chat, agents: 2}
run: {seed: 2, duration: 20 s}
"""


@pytest.fixture(scope="module")
def compare_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    (folder / "s.yaml").write_text(SCENARIO)
    out = folder / "out"
    result = run_cli("compare", str(folder / "s.yaml"), "--hardware", "nvidia-h100-sxm,cerebras-cs3",
                     "--set", "load.agents=1,2", "-o", str(out), "--report")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def test_the_page_holds_every_figure_and_table(compare_folder: Path) -> None:
    page = (compare_folder / "report.html").read_text()
    sections = collect(compare_folder)
    figures = [s for s in sections if s.figure is not None]
    tables = [s for s in sections if s.table is not None]
    assert page.count('<img alt="') == len(figures) >= 2 and page.count("<table>") == len(tables) >= 1
    assert len(list((compare_folder / "figures").glob("*.png"))) == len(figures)
    assert "Throughput-interactivity frontier" in page and "cerebras-cs3" in page
    assert re.search(r"infersim \d+\.\d+", page) and "seed 2" in page and "Resolved scenario" in page
    assert 'src="http' not in page  # self-contained: nothing fetched
    names = sorted(p.name for p in (compare_folder / "figures").glob("*.png"))
    assert names == [f"{n:02d}.png" for n in range(1, len(figures) + 1)]  # numbered in page order, no gaps


def _captions_name_their_assumptions(page: str) -> list[str]:
    """Every figure has a caption and every figure and table caption names model, hardware, lengths,
    window, load and cost basis; returns the captions."""
    figures = re.findall(r"<figure[^>]*>.*?</figure>", page, flags=re.S)
    captions = [re.search(r"<figcaption>(.*?)</figcaption>", f, flags=re.S) for f in figures]
    assert figures and all(c is not None for c in captions)
    texts = [c.group(1) for c in captions if c]
    assert len(texts) == page.count("<img") + page.count("<table>")  # tables are captioned figures too
    for text in texts:
        for label in ASSUMPTION_LABELS:
            assert f"{label}: " in text, (label, text[:200])
        assert '<strong class="takeaway">' in text  # and a takeaway computed from the results
    return texts


def test_every_figure_and_table_has_a_caption_naming_its_assumptions(compare_folder: Path) -> None:
    texts = _captions_name_their_assumptions((compare_folder / "report.html").read_text())
    assert all("llama-3.1-8b" in t and "nvidia-h100-sxm" in t for t in texts)
    assert '<section class="summary">' in (compare_folder / "report.html").read_text()


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Chromium is needed for the report test: `make test` installs Debian's chromium package")
    return found


def test_a_real_headless_browser_renders_the_report(compare_folder: Path, tmp_path: Path) -> None:
    browser, page = _chromium(), (compare_folder / "report.html").resolve()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={tmp_path}/p"]
    env = os.environ | {"HOME": str(tmp_path)}
    shot = tmp_path / "report.png"
    result = subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
                            capture_output=True, text=True, timeout=120, env=env, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, env=env, check=False)  # fmt: skip
    assert dom.returncode == 0 and "<table>" in dom.stdout and "frontier" in dom.stdout
    assert "Uncaught" not in dom.stderr


def test_report_of_a_folder_without_results_is_a_clear_error(tmp_path: Path) -> None:
    result = run_cli("report", str(tmp_path))
    assert result.returncode == 2 and "no infersim results here" in result.stderr


def test_write_report_of_a_run_has_its_task_breakdown(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    assert run_cli("run", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "run")).returncode == 0
    page = write_report(tmp_path / "run").read_text()
    assert "agent tasks" in page and "TTFT distribution" in page
    _captions_name_their_assumptions(page)


def test_the_demo_task_table_has_one_row_per_hardware_and_load() -> None:
    from simulator.config.scenario import Scenario
    from simulator.studies.compare import compare
    from simulator.studies.demo import task_table
    from tests.engine.conftest import CATALOG

    base = Scenario.model_validate(yaml.safe_load(SCENARIO))
    loads = [(f"{n} agents", base.model_copy(update={"load": base.load.model_copy(update={"agents": n})}))
             for n in (1, 2)]  # type: ignore[union-attr]  # fmt: skip
    text = task_table(compare(base, ["nvidia-h100-sxm", "cerebras-cs3"], loads, CATALOG))
    lines = text.splitlines()
    assert len(lines) == 2 + 4 and "$/task" in lines[0] and "2 agents" in lines[-1]


def test_a_sweep_report_draws_the_frontier_of_its_hardware(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "name: b\ndeployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b}\n"
        "load: {kind: closed, users: 2}\nrequests: {input_tokens: {dist: constant, value: 200},"
        " output_tokens: {dist: constant, value: 50}}\nrun: {seed: 1, max_requests: 40}\n"
    )
    (tmp_path / "s.yaml").write_text(
        "name: s\nscenario: base.yaml\ngrid: {deployment.hardware: [nvidia-h100-sxm, cerebras-cs3],"
        " load.users: [1, 4]}\n"
    )
    result = run_cli("sweep", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "out"), "--jobs", "1", "--report")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Sweep summary" in page and "Throughput-interactivity frontier" in page and page.count("<img") == 1
    _captions_name_their_assumptions(page)


def test_a_run_sweep_report_has_its_runs_latency_and_cost(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    result = run_cli("run", str(tmp_path / "s.yaml"), "--set", "load.agents=1,2", "-o", str(tmp_path / "o"), "--report")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "o" / "report.html").read_text()
    assert "<h2>Runs</h2>" in page and "Latency against concurrent agents" in page and "<h2>Cost</h2>" in page
    assert page.count("<img") == 3 and page.count("load.agents=2") >= 1
    _captions_name_their_assumptions(page)


def test_a_run_sweep_plots_the_table_numbers_against_the_swept_quantity(tmp_path: Path) -> None:
    """The latency and speed figures draw the very numbers of the runs table, at the swept values on x."""
    (tmp_path / "s.yaml").write_text(SCENARIO)
    result = run_cli("run", str(tmp_path / "s.yaml"), "--set", "load.agents=1,2,4", "-o", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    sections = {s.title: s for s in collect(tmp_path / "o")}
    headers, rows = sections["Runs"].table  # type: ignore[misc]
    column = {h: [float(str(r[i]).rstrip(LIMITED_MARK)) for r in rows] for i, h in enumerate(headers)
              if h.startswith("tok/s")}  # fmt: skip
    ttft_s = [parse_quantity(str(r[headers.index("TTFT p50")]).rstrip(LIMITED_MARK), "time") for r in rows]
    latency = sections["Latency against concurrent agents"].figure
    speed = sections["Per-user speed against concurrent agents"].figure
    assert latency is not None and speed is not None
    assert "concurrent agents (load.agents)" in latency.get_xlabel()
    ttft = next(line for line in latency.lines if line.get_label() == "TTFT p50")
    assert list(ttft.get_xdata()) == [1.0, 2.0, 4.0]
    assert list(ttft.get_ydata()) == pytest.approx(ttft_s, rel=5e-3)  # the table shows 3 significant digits
    assert list(speed.lines[0].get_ydata()) == pytest.approx(column["tok/s/user p50"], rel=1e-3)
    assert [t.get_text() for t in latency.get_xticklabels()] == ["1", "2", "4"]  # plain tick labels


def test_a_two_factor_run_sweep_plots_against_the_swept_load_one_line_per_other_field(tmp_path: Path) -> None:
    """Never against run number: x is the numeric field, each hardware its own line through its own runs."""
    (tmp_path / "s.yaml").write_text(
        "name: two\ndeployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b}\n"
        "load: {kind: closed, users: 2}\nrequests: {input_tokens: {dist: constant, value: 200},"
        " output_tokens: {dist: constant, value: 50}}\nrun: {seed: 1, max_requests: 30}\n"
    )
    result = run_cli("run", str(tmp_path / "s.yaml"), "--set", "deployment.hardware=nvidia-h100-sxm,cerebras-cs3",
                     "--set", "load.users=1,4", "-o", str(tmp_path / "o"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    sections = {s.title: s for s in collect(tmp_path / "o")}
    latency = sections["Latency against concurrent users"].figure
    assert latency is not None and "run (in sweep order)" not in latency.get_xlabel()
    summaries = {
        (item["set"]["deployment.hardware"], item["set"]["load.users"]): item["summary"]
        for item in yaml.safe_load((tmp_path / "o" / "sweep.json").read_text())
    }
    for hardware in ("nvidia-h100-sxm", "cerebras-cs3"):
        line = next(x for x in latency.lines if x.get_label() == f"TTFT p50, deployment.hardware={hardware}")
        assert list(line.get_xdata()) == [1.0, 4.0]
        expected = [summaries[(hardware, users)]["ttft_s"]["p50"] for users in (1, 4)]
        assert list(line.get_ydata()) == pytest.approx(expected, rel=1e-12)
