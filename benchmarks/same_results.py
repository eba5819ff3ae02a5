"""Do two checkouts simulate the same thing? Byte-for-byte comparison of the result files of a
fixed set of runs, for changes meant to make the engine faster without changing what it reports.

The runs cover what an engine change can disturb: several workload classes and priorities
(``mixed-classes``), trace replay with data-parallel attention (``mooncake-replay``), agents
with prefix caching and KV tiers (``agents-kv-offload``, ``compare-coding-agent``), session
replay (``weka-replay``), chained calls (``latency-compounds``), and two of them on a small HBM,
where KV runs short, sequences are preempted and blocks move between tiers. Each run's
``requests.csv``, ``levels.csv`` and ``summary.json`` must be identical: same requests, same
timestamps to the last bit, same levels and summary statistics. A file that differs only in the
digits of its numbers is reported with the largest relative difference (rounding, or a change?).

    python benchmarks/same_results.py save DIR    # this checkout's results, into DIR
    python benchmarks/same_results.py check DIR   # run again and compare with DIR (exit 1 if any differ)

``--checkout PATH`` runs another checkout's code (``python -m simulator`` in that folder), so a
commit older than this script can be the reference::

    git worktree add /tmp/before main
    python benchmarks/same_results.py save /tmp/results --checkout /tmp/before
    python benchmarks/same_results.py check /tmp/results

The runs go two at a time (about a minute on two cores), each ``infersim run`` in its own process.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL_HBM = ("--set", "deployment.hardware.memory.hbm.capacity=100 GB")
RUNS: dict[str, tuple[str, ...]] = {
    **{name: (f"scenarios/{name}.yaml", "--set", "run.max_requests=1500")
       for name in ("mixed-classes", "mooncake-replay", "agents-kv-offload", "weka-replay", "latency-compounds")},
    "compare-coding-agent": ("scenarios/compare-coding-agent.yaml", "--set", "load.agents=40"),
    "agents-kv-offload-small-hbm": ("scenarios/agents-kv-offload.yaml", *SMALL_HBM, "--set", "run.max_requests=2000"),
    "weka-replay-small-hbm": ("scenarios/weka-replay.yaml", *SMALL_HBM, "--set", "run.max_requests=2000"),
}  # fmt: skip
FILES = ("requests.csv", "levels.csv", "summary.json")
PARALLEL_RUNS = 2


def run_all(out: Path, checkout: Path) -> None:
    """Every run of :data:`RUNS` by ``checkout``'s code, each into ``out / name``; stops with the first that fails."""

    def one(name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        args = [sys.executable, "-m", "simulator", "run", *RUNS[name], "-o", str(out.resolve() / name)]
        return name, subprocess.run(args, cwd=checkout, capture_output=True, text=True, check=False)

    with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
        for name, done in pool.map(one, RUNS):
            if done.returncode != 0:
                sys.exit(f"{name}: infersim run exited {done.returncode}\n{done.stderr}")
            print(f"  {name}", flush=True)


NUMBER = re.compile(rb"(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def largest_relative_difference(a: bytes, b: bytes) -> float | None:
    """When ``a`` and ``b`` differ only in the digits of their numbers, the largest relative
    difference between two of those numbers; None when text or structure differs."""
    parts_a, parts_b = NUMBER.split(a), NUMBER.split(b)
    if len(parts_a) != len(parts_b) or parts_a[0::2] != parts_b[0::2]:
        return None
    largest = 0.0
    for x, y in zip(parts_a[1::2], parts_b[1::2], strict=True):
        u, v = float(x), float(y)
        if u != v:
            largest = max(largest, abs(u - v) / max(abs(u), abs(v)))
    return largest


def first_difference(ours: Path, theirs: Path) -> str | None:
    """None when the files are identical, else where they first differ (and by how much, when
    only numbers differ)."""
    if not theirs.exists():
        return f"{theirs} is missing"
    a, b = ours.read_bytes(), theirs.read_bytes()
    if a == b:
        return None
    relative = largest_relative_difference(a, b)
    size = "" if relative is None else f"; only numbers differ, by at most {relative:.1e} relative"
    for number, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False), start=1):
        if x != y:
            return f"line {number}: {x.decode()[:120]!r} != {y.decode()[:120]!r}{size}"
    lines_a, lines_b = a.count(b"\n"), b.count(b"\n")
    return f"{lines_a} lines against {lines_b}"


def check(reference: Path, checkout: Path) -> int:
    """Run again and compare with ``reference``: 0 if every file is identical, 1 otherwise."""
    with tempfile.TemporaryDirectory() as folder:
        run_all(Path(folder), checkout)
        differences = [(name, file, found) for name in RUNS for file in FILES
                       if (found := first_difference(Path(folder) / name / file, reference / name / file))]  # fmt: skip
    for name, file, found in differences:
        print(f"{name}/{file} differs: {found}")
    compared = len(RUNS) * len(FILES)
    print(f"{compared - len(differences)} of {compared} files identical to {reference}")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["save", "check"])
    parser.add_argument("folder", type=Path, help="where save writes the results, and what check compares with")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="whose code runs (default: this checkout)")
    args = parser.parse_args()
    if not (args.checkout / "simulator" / "__main__.py").is_file():
        parser.error(f"--checkout {args.checkout}: not an infersim checkout (no simulator/__main__.py)")
    if args.action == "save":
        run_all(args.folder, args.checkout)
        print(f"saved {len(RUNS)} runs in {args.folder}")
        return 0
    if not args.folder.is_dir():
        parser.error(f"{args.folder}: no such folder (run `save` first)")
    return check(args.folder, args.checkout)


if __name__ == "__main__":
    sys.exit(main())
