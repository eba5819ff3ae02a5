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
