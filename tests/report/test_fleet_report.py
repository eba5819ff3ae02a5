"""The report's sections on rate-limited APIs and power caps: in the page with their captions, and
rendered by a real headless Chromium (as tests/report/test_report.py checks every page)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from simulator.report import collect
from tests.cli.test_cli import run_cli
from tests.report.test_report import _chromium

LENGTHS = """\
requests:
  input_tokens: {dist: lognormal, median: 2000, sigma: 0.5}
  output_tokens: {dist: geometric, mean: 80}
load: {kind: open, arrivals: {process: poisson, rate_per_s: 3}}
run: {seed: 3, duration: 90 s, warmup: 0 s, drain: true}
"""
API = """\
name: api-report
backends:
  - {name: gpu, deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}}
  - name: api
    deployment: {hardware: cerebras-cs3, model: llama-3.1-8b, stack: cerebras-inference}
    cost_basis: api
    api: {limits: {tokens_per_minute: 60000}, on_limit: spill}
"""
POWER = """\
name: power-report
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
"""


def _sweep(folder: Path, text: str, field: str) -> Path:
    (folder / "s.yaml").write_text(text + LENGTHS)
    result = run_cli("run", str(folder / "s.yaml"), "--set", field, "-o", str(folder / "out"), "--report")
    assert result.returncode == 0, result.stderr
    return folder / "out"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        "api": _sweep(tmp_path_factory.mktemp("api"), API, "backends.api.api.on_limit=spill,retry"),
        "power": _sweep(tmp_path_factory.mktemp("power"), POWER, "deployment.power_cap=300 W,700 W"),
    }


@pytest.mark.parametrize(("kind", "title", "words"), [
    ("api", "Rate-limited API per run", "answered 429"),
    ("power", "Power caps", "J per output token"),
])  # fmt: skip
def test_each_section_has_its_captioned_figure_in_a_real_browser(
    folders: dict[str, Path], tmp_path: Path, kind: str, title: str, words: str
) -> None:
    folder = folders[kind]
    (section,) = [s for s in collect(folder) if s.title == title]
    assert section.figure is not None and words in section.caption and section.takeaway
    browser, page = _chromium(), (folder / "report.html").resolve()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={tmp_path}/p"]
    env = os.environ | {"HOME": str(tmp_path)}
    dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, env=env, check=False)  # fmt: skip
    assert dom.returncode == 0 and f"<h2>{title}</h2>" in dom.stdout and words in dom.stdout
    assert "Uncaught" not in dom.stderr
    shot = tmp_path / "report.png"
    result = subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
                            capture_output=True, text=True, timeout=120, env=env, check=False)  # fmt: skip
    assert result.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_with_limits_and_a_cap_has_its_tables(folders: dict[str, Path]) -> None:
    titles = {s.title for s in collect(folders["api"] / "run-000")} | {
        s.title for s in collect(folders["power"] / "run-000")
    }
    assert {"run-000: rate-limited APIs", "run-000: what the API's limits did", "run-000: power"} <= titles
