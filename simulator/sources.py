"""Where the numbers behind an answer come from: value, confidence and source, in view.

Every profile number is ``{value, source, confidence}`` (:class:`~simulator.config.base.Sourced`).
An answer of ``estimate`` or ``compare`` rests on a few of them, the **deciding numbers** of a
deployment (:func:`deciding`): the bandwidth of the tier the weights stream from and its achieved
fraction, the peak FLOP/s of the matmul path and its efficiency, the per-layer latencies of the chip
and the serving stack, the interconnect bandwidth when the deployment spans chips, the price per
chip, and the chip's full-load power (every J/token rests on it) with its idle power when the profile
gives one (a power-capped run's idle seconds draw it). ``--explain`` lists every sourced number of
the hardware profile and the stack (:func:`every_number`). The confidence is the profile's:
``datasheet``, ``measured``, ``vendor-claim``, ``derived`` (fitted or computed from others) or
``assumed``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.config.base import Profile, Sourced, Spec
from simulator.results.views import significant
from simulator.units import format_seconds

if TYPE_CHECKING:
    from simulator.analytic.placement import Deployment


@dataclass(frozen=True)
class SourcedNumber:
    """One number of a profile, as shown: what it is, its field path, value, confidence and source."""

    what: str
    path: str  # the field path in its profile (``memory.hbm.bandwidth``), prefixed with the profile id
    value: str  # with its unit
    confidence: str
    source: str  # the key into the profile's ``sources``
    citation: str  # what that key names (URL, paper, fit)
    note: str = ""

    def short(self) -> str:
        """``hbm bandwidth 3.35 TB/s (datasheet: nvidia-datasheet)``"""
        return f"{self.what} {self.value} ({self.confidence}: {self.source})"

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "path": self.path, "value": self.value, "confidence": self.confidence,
                "source": self.source, "citation": self.citation, "note": self.note}  # fmt: skip


POWER_FIELDS = ("chip", "idle")  # a hardware profile's power numbers, in W


def shown(field: str, value: object) -> str:
    """A profile number with the unit its field name implies (bandwidth, FLOP/s, bytes, time, $, W).

    >>> shown("bandwidth", 3.35e12), shown("peak.fp8", 1.979e15), shown("layer_latency", 4e-6)
    ('3.35 TB/s', '1.98 PFLOP/s', '4 us')
    >>> shown("efficiency", 0.85), shown("rental_usd_per_chip_hour", 2.5), shown("capacity", 8e10)
    ('0.85', '$2.5', '80 GB')
    """
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    name = field.rsplit(".", 1)[-1]
    if name.startswith(("usd", "rental_usd", "capex_usd", "input_usd", "output_usd")):
        return f"${significant(value)}"
    if "latency" in name or name.endswith(("_s", "overhead")):
        return format_seconds(value)
    unit = _unit(field, name)
    if unit is None:
        return significant(value)
    scale, prefix = next(((s, p) for s, p in _PREFIXES if abs(value) >= s), (1.0, ""))
    return f"{significant(value / scale)} {prefix}{unit}"


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def _unit(path: str, name: str) -> str | None:
    """The SI unit the field at ``path`` (last part ``name``) is in, None for a plain number:
    B/s for a bandwidth, FLOP/s for a peak, B for a capacity, W for a power number."""
    if "bandwidth" in name:
        return "B/s"
    if path.startswith("peak") or ".peak." in path:
        return "FLOP/s"
    if name == "capacity":
        return "B"
    if name in POWER_FIELDS and "power" in path:
        return "W"
    return None


def _number(profile: Profile, what: str, path: str, number: Sourced[Any]) -> SourcedNumber:
    return SourcedNumber(what, f"{profile.id}:{path}", shown(path, number.value), number.confidence, number.source,
                         profile.sources.get(number.source, ""), number.note)  # fmt: skip


def deciding(d: Deployment) -> list[SourcedNumber]:
    """The numbers a deployment's estimate and cost rest on (module docstring), in that order."""
    from simulator.analytic.precision import compute_path

    hw, tier = d.hardware, d.weights_tier
    path = compute_path(hw, d.weights, d.activations)
    compute = hw.compute
    efficiency = (compute.weight_only[d.weights].efficiency if not path.native and d.weights in compute.weight_only
                  else compute.efficiency)  # fmt: skip
    efficiency_path = (f"compute.weight_only.{d.weights}.efficiency" if efficiency is not compute.efficiency
                       else "compute.efficiency")  # fmt: skip
    out = [
        _number(hw, f"{tier.name} bandwidth", f"memory.{tier.name}.bandwidth", tier.bandwidth),
        _number(hw, f"{tier.name} efficiency", f"memory.{tier.name}.efficiency", tier.efficiency),
        _number(hw, f"peak {path.precision}", f"compute.peak.{path.precision}", compute.peak[path.precision]),
        _number(hw, "matmul efficiency", efficiency_path, efficiency),
        _number(hw, "layer latency", "execution.layer_latency", hw.execution.layer_latency),
        _number(d.stack, f"{d.stack.id} layer latency", "layer_latency", d.stack.layer_latency),
    ]
    if d.chips > 1:
        link = hw.interconnect
        out.append(_number(hw, "interconnect bandwidth", "interconnect.bandwidth", link.bandwidth))
    power = hw.power
    out.append(_number(hw, "full power", "power.chip", power.chip))
    if power.idle is not None:
        out.append(_number(hw, "idle power", "power.idle", power.idle))
    price = hw.price
    if price.rental_usd_per_chip_hour is not None:
        out.append(_number(hw, "rental $/chip-hour", "price.rental_usd_per_chip_hour", price.rental_usd_per_chip_hour))
    if price.capex_usd_per_chip is not None:
        out.append(_number(hw, "capex $/chip", "price.capex_usd_per_chip", price.capex_usd_per_chip))
    api = price.api.get(d.model.id)
    if api is not None:
        where = f"price.api.{d.model.id}.output_usd_per_million_tokens"
        out.append(_number(hw, f"API $/1M out ({api.provider})", where, api.output_usd_per_million_tokens))
    return out


def _walk(spec: Spec, path: str) -> Iterator[tuple[str, Sourced[object]]]:
    for name in type(spec).model_fields:
        value = getattr(spec, name)
        here = f"{path}.{name}" if path else name
        if isinstance(value, Sourced):
            yield here, value
        elif isinstance(value, Spec):
            yield from _walk(value, here)
        elif isinstance(value, dict):
            yield from _walk_entries(value, here)
        elif isinstance(value, list):
            yield from _walk_items(value, here)


def _walk_entries(value: dict[Any, Any], here: str) -> Iterator[tuple[str, Sourced[object]]]:
    """The sourced numbers of a mapping field: its sourced values, and those inside its specs."""
    for key, item in value.items():
        if isinstance(item, Sourced):
            yield f"{here}.{key}", item
        elif isinstance(item, Spec):
            yield from _walk(item, f"{here}.{key}")


def _walk_items(value: list[Any], here: str) -> Iterator[tuple[str, Sourced[object]]]:
    """The sourced numbers inside a list field's specs, each item by its name (else its index)."""
    for index, item in enumerate(value):
        key = getattr(item, "name", index)  # a memory tier by its name, as field paths name it
        if isinstance(item, Spec):
            yield from _walk(item, f"{here}.{key}")


def every_number(*profiles: Profile) -> list[SourcedNumber]:
    """Every sourced number of the profiles, by field path (``--explain``)."""
    return [_number(p, path, path, number) for p in profiles for path, number in _walk(p, "")]


def confidence_counts(numbers: list[SourcedNumber]) -> str:
    """``2 datasheet, 1 measured, 3 assumed``: how far the numbers are trusted, in one phrase."""
    counts: dict[str, int] = {}
    for n in numbers:
        counts[n.confidence] = counts.get(n.confidence, 0) + 1
    order = ("datasheet", "measured", "vendor-claim", "derived", "assumed")
    return ", ".join(f"{counts[c]} {c}" for c in order if c in counts)
