"""The import graph of the ``simulator`` package, read from the source (nothing is imported).

Run it from the repository root::

    python tools/import_graph.py              # packages and modules, cycles, layer checks
    python tools/import_graph.py --dot > g.dot  # the module graph for Graphviz

Every ``import`` / ``from ... import`` of a ``simulator`` module counts, including imports
inside functions and under ``TYPE_CHECKING`` (marked as such: they hide a dependency, they do
not remove it). A cycle is a strongly connected set of modules (Tarjan). The layer rules are
the ones of the architecture: each listed package must not import the ones named beside it.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "simulator"

#: (importer prefix, forbidden prefix): the arrows the layering forbids.
FORBIDDEN = (
    ("simulator.config", "simulator.analytic"),
    ("simulator.config", "simulator.engine"),
    ("simulator.analytic", "simulator.engine"),
    ("simulator.analytic", "simulator.results"),
    ("simulator.engine", "simulator.results"),
    ("simulator.results", "simulator.engine"),
    ("simulator.plan", "simulator.engine"),
    ("simulator.records.store", "simulator.engine"),
    ("simulator.records.store", "simulator.results"),
    ("simulator.engine", "simulator.studies"),
    ("simulator.results", "simulator.studies"),
    ("simulator.analytic", "simulator.studies"),
    ("simulator.engine", "simulator.report"),
    ("simulator.studies", "simulator.cli"),
    ("simulator.io", "simulator.plan"),
    ("simulator.io", "simulator.engine"),
    ("simulator.io", "simulator.studies"),
    ("simulator.report", "simulator.cli"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str) -> dict[str, str]:
    """Modules of the package that ``path`` imports, each with how: top, function or type-checking."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST, how: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = how
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = "function"
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                inner = "type-checking"
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - child.level + 1] + ([base] if base else [])
                    )
                # ``from package import module`` imports the module; only names that are not
                # modules of the package import the package itself (its ``__init__``)
                names = [f"{base}.{alias.name}" for alias in child.names]
                targets = [n for n in names if n in MODULES] + ([base] if any(n not in MODULES for n in names) else [])
            for target in targets:
                while target and target not in MODULES:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith(PACKAGE + "."):
                    found.setdefault(target, inner)
            visit(child, inner)

    visit(tree, "top")
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm; components of more than one module (import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


def group(module: str) -> str:
    """A module's package (``simulator.engine``) or, at the top, the module itself."""
    parts = module.split(".")
    return ".".join(parts[:2])


FILES = {module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}
MODULES = set(FILES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dot", action="store_true", help="print the module graph in Graphviz DOT")
    args = parser.parse_args()
    edges = {name: imports(path, name) for name, path in FILES.items()}
    if args.dot:
        print("digraph simulator {\n  rankdir=BT; node [shape=box, fontsize=10];")
        for source, targets in edges.items():
            for target, how in sorted(targets.items()):
                style = "" if how == "top" else " [style=dashed]"
                print(f'  "{source}" -> "{target}"{style};')
        print("}")
        return 0
    packages: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        packages[group(source)] |= {group(t) for t in targets if group(t) != group(source)}
    print("packages (-> what each imports):")
    for name in sorted(packages):
        print(f"  {name:<22} -> {', '.join(sorted(p.removeprefix('simulator.') for p in packages[name])) or '-'}")
    print("\nmodules (imports inside functions or under TYPE_CHECKING are marked):")
    for source in sorted(edges):
        marked = [
            t.removeprefix("simulator.") + ("" if h == "top" else f" ({h})") for t, h in sorted(edges[source].items())
        ]
        print(f"  {source.removeprefix('simulator.'):<22} -> {', '.join(marked) or '-'}")
    cycles = strongly_connected({s: set(t) for s, t in edges.items()})
    print("\nimport cycles:", "none" if not cycles else "")
    for cycle in cycles:
        print("  " + " <-> ".join(c.removeprefix("simulator.") for c in cycle))
    broken = [
        (s, t) for s, ts in edges.items() for t in ts for a, b in FORBIDDEN if s.startswith(a) and t.startswith(b)
    ]
    print("layer violations:", "none" if not broken else "")
    for source, target in broken:
        print(f"  {source} -> {target}")
    return 1 if cycles or broken else 0


if __name__ == "__main__":
    sys.exit(main())
