"""Report page kinds: a folder's kind comes from its manifest, and a new kind is one module and one
registration (:mod:`simulator.report.registry`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulator.cli.output import ResultsFolder
from simulator.errors import ConfigError
from simulator.report import Manifest, Section, build_report, collect, register, unregister
from simulator.report.reading import read_text_file

COMMAND = "hello"


def hello_page(manifest: Manifest) -> list[Section]:
    """The whole of a new page kind: the sections of a ``hello`` folder, from the files its manifest lists."""
    greeting = json.loads(read_text_file(manifest, "hello.json"))["greeting"]
    return [Section("Hello", text=greeting, caption="What the hello command wrote.", takeaway=greeting, headline=True)]


@pytest.fixture
def hello_kind() -> Iterator[None]:
    register(COMMAND, hello_page)  # the one registration
    yield
    unregister(COMMAND)


def _hello_folder(path: Path, planted: dict[str, str] | None = None) -> Path:
    ResultsFolder(path, COMMAND).write({"hello.json": json.dumps({"greeting": "hi from a new page kind"})})
    for name, text in (planted or {}).items():  # files the marker does not list
        (path / name).write_text(text)
    return path


def test_a_new_page_kind_is_one_function_and_one_registration(hello_kind: None, tmp_path: Path) -> None:
    files = build_report(_hello_folder(tmp_path / "out"))
    page = files["report.html"]
    assert isinstance(page, str) and "<h2>Hello</h2>" in page and "hi from a new page kind" in page
    assert '<section class="summary">' in page  # its headline takeaway leads the page


def test_a_folder_is_what_its_marker_says_not_what_its_file_names_suggest(hello_kind: None, tmp_path: Path) -> None:
    """Files a folder holds but its marker does not list are never read, whatever their names."""
    folder = _hello_folder(tmp_path / "out", {"summary.json": "not json", "compare.json": "[{}]"})
    assert [s.title for s in collect(folder)] == ["Hello"]


def test_results_of_a_command_without_a_page_kind_are_a_clear_error(tmp_path: Path) -> None:
    folder = _hello_folder(tmp_path / "out")
    with pytest.raises(ConfigError, match=r"out: the results of `infersim hello` have no report page"):
        build_report(folder)


def test_a_page_kind_is_registered_once(hello_kind: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(COMMAND, hello_page)


def test_a_folder_without_a_marker_is_a_run_when_it_holds_a_summary(tmp_path: Path) -> None:
    """The run's summary.json is its manifest: a damaged one is reported as the run's file."""
    (tmp_path / "summary.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"summary\.json"):
        collect(tmp_path)


def test_a_folder_with_neither_holds_no_results(tmp_path: Path) -> None:
    (tmp_path / "compare.json").write_text("[]")  # a name alone makes no results
    with pytest.raises(ConfigError, match="no infersim results here"):
        build_report(tmp_path)
