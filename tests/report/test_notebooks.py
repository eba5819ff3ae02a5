"""The notebooks run top to bottom on a fresh kernel, and are stored without outputs."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import simulator

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_four_notebooks_are_there() -> None:
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_without_errors(path: Path) -> None:
    """Run from the repository root, as a reader would; the notebooks write no files."""
    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any(o.output_type in ("stream", "display_data", "execute_result") for o in outputs)
    # a notebook that draws a figure shows it as an image, never as the text "<Figure size ...>"
    drawn = [c for c in book.cells if c.cell_type == "code" and "plots." in c.source]
    shown = [o for c in drawn for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(shown) >= len(drawn), f"{path.name}: {len(drawn)} figure cell(s), {len(shown)} image output(s)"
    assert not [o for o in outputs if "<Figure size" in str(o.get("data", {}).get("text/plain", ""))]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_import_only_the_public_api(path: Path) -> None:
    """``from simulator import name`` with ``name`` in ``simulator.__all__``; no module of the package."""
    book = nbformat.read(path, as_version=4)
    for cell in (c for c in book.cells if c.cell_type == "code"):
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simulator"):
                assert node.module == "simulator", f"{path.name}: imports {node.module}"
                assert {alias.name for alias in node.names} <= set(simulator.__all__)
            elif isinstance(node, ast.Import):
                assert not any(alias.name.startswith("simulator.") for alias in node.names)
