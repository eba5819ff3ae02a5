"""Unit-bearing strings at the boundary, SI floats inside.

Dimensional YAML fields *require* a unit: ``"3.35 TB/s"``, ``"44 GB"``, ``"10 us"``,
``"989 TFLOP/s"``. Decimal prefixes apply to ``B`` (1 GB = 1e9 B); binary ones to ``iB``
(1 GiB = 2**30 B); a lowercase ``b`` means bits (1 Gb/s = 1.25e8 B/s). Python callers may
give bare numbers in SI units when they validate with the context :data:`SI_NUMBERS`. Inside Python every
quantity is a float in seconds, bytes, bytes/s, FLOP/s, watts or US dollars.

Physical ranges
---------------
Every field of a unit-bearing type holds a value inside its dimension's documented range
(:data:`RANGES`), whatever file, ``--set`` or Python call gives it; outside it the field is
refused, its message naming the range. The ranges are wide (they admit every device shipped or
announced, by a factor of ten or more) and exist to catch a wrong unit, a missing exponent or a
hostile number (``1e-300``, ``1e300``) before it becomes nonsense downstream:

============  ====================  ==================  ==========================================
dimension     lowest                highest             why
============  ====================  ==================  ==========================================
bytes         1 B                   1 EB (1e18 B)       a capacity holds a byte at least; an exabyte
                                                        is beyond any chip or replica
bandwidth     1 MB/s (1e6 B/s)      1 EB/s (1e18 B/s)   slower than any link that serves a model;
                                                        wafer-scale SRAM is 21 PB/s (x 50)
flops         1 GFLOP/s (1e9)       1e19 FLOP/s         a CPU core; a CS-3 wafer is 1.25e17 (x 80)
time          0 s                   1 year (3.16e7 s)   no time is negative; a run, a window or a
                                                        latency beyond a year is a typing mistake
power         1 W                   1 MW (1e6 W)        one chip or system; a CS-3 draws 23 kW
============  ====================  ==================  ==========================================

Fields narrow these further where their physics does (a latency of a chip or a stack is at most
:data:`MAX_LATENCY_S`, a capacity or bandwidth is positive). Numbers without a unit have their
ranges beside their fields: efficiencies are fractions in [0.01, 1]
(``simulator.config.hardware.Fraction``), prices lie between 1e-6 and 1e9 USD, counts are integers
of at most 2**63 - 1 (``simulator.config.base.MAX_INTEGER``), seeds from 0 to 2**63 - 1.

Examples
--------
>>> parse_quantity("3.35 TB/s", "bandwidth")
3350000000000.0
>>> parse_quantity("1 GiB", "bytes")
1073741824.0
>>> parse_quantity("10 us", "time")
1e-05
>>> parse_quantity("400 Gb/s", "bandwidth")
50000000000.0
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, ValidationInfo

Dimension = Literal["bytes", "bandwidth", "flops", "time", "power"]

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}
BITS_PER_BYTE = 8.0

_NUMBER = r"(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_PATTERN = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[^\d\s.+-]\S*)\s*$")

#: Canonical unit written back when a model is dumped (round-trips through the parser).
CANONICAL_UNIT: dict[Dimension, str] = {
    "bytes": "B",
    "bandwidth": "B/s",
    "flops": "FLOP/s",
    "time": "s",
    "power": "W",
}

EXAMPLES: dict[Dimension, str] = {
    "bytes": "'80 GB', '230 MB', '1 GiB'",
    "bandwidth": "'3.35 TB/s', '900 GB/s', '400 Gb/s'",
    "flops": "'989 TFLOP/s', '2 PFLOP/s', '750 TOP/s'",
    "time": "'10 us', '1.5 ms', '2 s'",
    "power": "'700 W', '23 kW'",
}


def _byte_scale(unit: str) -> float | None:
    """Scale of a byte or bit unit such as ``GB``, ``GiB`` or ``Gb``; None if not one."""
    for suffix, per_unit in (("B", 1.0), ("b", 1.0 / BITS_PER_BYTE)):
        if unit.endswith(suffix):
            prefix = unit[: -len(suffix)]
            if prefix.endswith("i") and prefix in _BINARY:
                return _BINARY[prefix] * per_unit
            if prefix in _DECIMAL:
                return _DECIMAL[prefix] * per_unit
    return None


def _prefixed(unit: str, base_names: tuple[str, ...]) -> float | None:
    for base in base_names:
        if unit.endswith(base) and unit[: -len(base)] in _DECIMAL:
            return _DECIMAL[unit[: -len(base)]]
    return None


def _unit_scale(unit: str, dimension: Dimension) -> float | None:
    if dimension == "bytes":
        return _byte_scale(unit)
    if dimension == "bandwidth":
        return _byte_scale(unit[:-2]) if unit.endswith("/s") else None
    if dimension == "flops":
        return _prefixed(unit, ("FLOP/s", "FLOPS", "OP/s", "OPS"))
    if dimension == "time":
        return _TIME.get(unit)
    return _prefixed(unit, ("W",))


def parse_quantity(text: str, dimension: Dimension) -> float:
    """Parse a unit-bearing string to an SI float.

    Raises
    ------
    ValueError
        If the text is not ``<number> <unit>`` or the unit does not fit ``dimension``.
    """
    match = _PATTERN.match(text)
    if match is None:
        raise ValueError(f"expected a number with a unit, e.g. {EXAMPLES[dimension]}; got {text!r}")
    scale = _unit_scale(match["unit"], dimension)
    if scale is None:
        raise ValueError(f"unit {match['unit']!r} is not a {dimension} unit; expected e.g. {EXAMPLES[dimension]}")
    value = float(Decimal(match["num"]) * Decimal(repr(scale)))  # exact decimal scaling
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is too large to represent")
    return value


#: Validation context of Python callers: a bare number is a quantity in SI units (files need units).
SI_NUMBERS = {"si_numbers": True}


SECONDS_PER_YEAR = 365.25 * 86400.0
#: Longest fixed latency a chip, a link or a serving stack may state (one day): the time of a
#: message, a layer or a load is microseconds to seconds; a day is a unit mistake.
MAX_LATENCY_S = 86400.0


@dataclass(frozen=True)
class Range:
    """The physical range of one dimension, in SI units, both ends included (module docstring)."""

    low: float
    high: float
    what: str
    why: str

    def describe(self, dimension: Dimension) -> str:
        unit = CANONICAL_UNIT[dimension]
        return f"between {self.low:g} {unit} and {self.high:g} {unit} ({self.why})"

    def check(self, value: float, dimension: Dimension) -> float:
        """``value`` if it lies in the range; else a ValueError naming the range."""
        if not self.low <= value <= self.high:
            raise ValueError(f"{value:g} {CANONICAL_UNIT[dimension]} is outside the physical range of {self.what}: "
                             f"expected {self.describe(dimension)}")  # fmt: skip
        return value


#: The documented physical range of every unit-bearing field, by dimension (module docstring).
RANGES: dict[Dimension, Range] = {
    "bytes": Range(1.0, 1e18, "a size", "a byte to an exabyte"),
    "bandwidth": Range(1e6, 1e18, "a bandwidth", "1 MB/s to 1 EB/s; wafer-scale SRAM is 21 PB/s"),
    "flops": Range(1e9, 1e19, "a FLOP rate", "1 GFLOP/s to 1e19 FLOP/s; a CS-3 wafer is 1.25e17"),
    "time": Range(0.0, SECONDS_PER_YEAR, "a time", "no time is negative; a year at most"),
    "power": Range(1.0, 1e6, "a power", "1 W to 1 MW; a CS-3 system draws 23 kW"),
}


def _in_range(dimension: Dimension) -> AfterValidator:
    return AfterValidator(lambda value: RANGES[dimension].check(value, dimension))


def _parser(dimension: Dimension) -> BeforeValidator:
    def parse(value: object, info: ValidationInfo) -> float:
        if isinstance(value, str):
            return parse_quantity(value, dimension)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a string with a unit, e.g. {EXAMPLES[dimension]}")
        if info.context and info.context.get("si_numbers"):
            return float(value)
        raise ValueError(f"a bare number ({value}) has no unit; write it with one, e.g. {EXAMPLES[dimension]}")

    return BeforeValidator(parse)


def _dumper(dimension: Dimension) -> PlainSerializer:
    return PlainSerializer(lambda v: f"{v:.12g} {CANONICAL_UNIT[dimension]}", return_type=str)


Bytes = Annotated[float, _parser("bytes"), _in_range("bytes"), _dumper("bytes")]
BytesPerSecond = Annotated[float, _parser("bandwidth"), _in_range("bandwidth"), _dumper("bandwidth")]
FlopsPerSecond = Annotated[float, _parser("flops"), _in_range("flops"), _dumper("flops")]
Seconds = Annotated[float, _parser("time"), _in_range("time"), _dumper("time")]
Watts = Annotated[float, _parser("power"), _in_range("power"), _dumper("power")]


#: Units a duration is shown in, largest first: the first whose value is at least 1 is used.
_SHOWN_TIME = (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9))


def format_seconds(seconds: object, digits: int = 3) -> str:
    """A duration in the unit that shows it (s, ms, us, ns) to ``digits`` significant digits; ``-`` for
    anything but a finite number.

    >>> format_seconds(0.00047), format_seconds(0.0123), format_seconds(20.4), format_seconds(4512.0)
    ('470 us', '12.3 ms', '20.4 s', '4512 s')
    >>> format_seconds(0.0), format_seconds(float("nan")), format_seconds(None)
    ('0 s', '-', '-')
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        return "-"
    value = float(seconds)
    if value == 0:
        return "0 s"
    unit, scale = next(((u, s) for u, s in _SHOWN_TIME if abs(value) >= s * (1 - 0.5 * 10.0**-digits)),
                       _SHOWN_TIME[-1])  # fmt: skip
    scaled = value / scale
    if abs(scaled) >= 10**digits:
        return f"{scaled:.0f} {unit}"  # no thousands separator: parse_quantity reads it back
    return f"{float(f'{scaled:.{digits}g}'):g} {unit}"
