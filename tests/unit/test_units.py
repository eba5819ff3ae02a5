"""Unit strings at the boundary: decimal vs binary prefixes, bits vs bytes, clear rejections."""

from __future__ import annotations

import pytest

from simulator.units import parse_quantity


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        ("44 GB", "bytes", 44e9),
        ("230 MB", "bytes", 230e6),
        ("220 MiB", "bytes", 220 * 2**20),
        ("3.35 TB/s", "bandwidth", 3.35e12),
        ("1.2 Tb/s", "bandwidth", 1.5e11),
        ("21 PB/s", "bandwidth", 21e15),
        ("989 TFLOP/s", "flops", 989e12),
        ("750 TOP/s", "flops", 750e12),
        ("10 us", "time", 10e-6),
        ("121 ns", "time", 121e-9),
        ("1.5 ms", "time", 1.5e-3),
        ("700 W", "power", 700.0),
        ("23 kW", "power", 23e3),
        ("1e3 GB", "bytes", 1e12),
    ],
)
def test_parses_to_si(text: str, dimension: str, expected: float) -> None:
    assert parse_quantity(text, dimension) == pytest.approx(expected, rel=1e-15)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "dimension", "fragment"),
    [
        ("3.35", "bandwidth", "expected a number with a unit"),
        ("3.35 TB", "bandwidth", "not a bandwidth unit"),
        ("10 parsecs", "time", "not a time unit"),
        ("fast", "flops", "expected a number with a unit"),
    ],
)
def test_rejects_with_the_expected_form(text: str, dimension: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_quantity(text, dimension)  # type: ignore[arg-type]


# -- physical ranges (units.RANGES) --------------------------------------------------------------------
def _bundled_quantities() -> list[tuple[str, str]]:
    """Every unit-bearing string of every bundled profile, workload and scenario, with its dimension
    (the one whose units parse it: the dimensions' units are disjoint)."""
    import re
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    found: list[tuple[str, str]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict | list):
            for value in node.values() if isinstance(node, dict) else node:
                walk(value)
        elif isinstance(node, str) and re.fullmatch(r"\s*[-+]?[\d.]+(?:[eE][-+]?\d+)?\s+\S+\s*", node):
            for dimension in ("bytes", "bandwidth", "flops", "time", "power"):
                try:
                    parse_quantity(node, dimension)  # type: ignore[arg-type]
                except ValueError:
                    continue
                found.append((node, dimension))
                break

    for folder in ("hardware_profiles", "model_profiles", "stack_profiles", "workloads", "scenarios"):
        for path in sorted((root / folder).glob("*.yaml")):
            walk(yaml.safe_load(path.read_text(encoding="utf-8")))
    return found


def test_every_bundled_quantity_lies_in_its_dimensions_range() -> None:
    """The ranges are wide enough for every device and scenario shipped (else the range is wrong)."""
    from simulator.units import RANGES

    quantities = _bundled_quantities()
    assert len(quantities) > 100
    outside = [
        (text, d)
        for text, d in quantities
        if not RANGES[d].low <= parse_quantity(text, d) <= RANGES[d].high  # type: ignore[index, arg-type]
    ]
    assert not outside


@pytest.mark.parametrize("dimension", ["bytes", "bandwidth", "flops", "time", "power"])
def test_a_quantity_just_outside_its_range_is_refused_and_its_ends_are_admitted(dimension: str) -> None:
    from pydantic import TypeAdapter, ValidationError

    from simulator import units

    kind = {"bytes": units.Bytes, "bandwidth": units.BytesPerSecond, "flops": units.FlopsPerSecond,
            "time": units.Seconds, "power": units.Watts}[dimension]  # fmt: skip
    adapter: TypeAdapter[float] = TypeAdapter(kind)
    low, high = units.RANGES[dimension].low, units.RANGES[dimension].high  # type: ignore[index]
    assert adapter.validate_python(low, context=units.SI_NUMBERS) == low
    assert adapter.validate_python(high, context=units.SI_NUMBERS) == high
    for outside in (low - max(abs(low), 1.0) * 1e-3, high * 1.001, 1e-300 if low > 0 else -1e-300):
        with pytest.raises(ValidationError, match="outside the physical range"):
            adapter.validate_python(outside, context=units.SI_NUMBERS)
