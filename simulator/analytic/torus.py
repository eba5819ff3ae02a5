"""Collectives on a torus of chips (TPU ICI): no switch, each chip wired to two neighbours per axis.

Assumptions:

- **Slice.** A group of ``n`` chips occupies the most compact slice: ``n`` factored over the
  ``d`` axes as evenly as its prime factors allow (v6e-8 is 4 x 2, a 4-chip TPU7x slice
  2 x 2 x 1), as Cloud TPU slices are shaped.
- **Links.** A chip's one-direction ICI bandwidth ``B`` is spread over its ``2 d`` links, so
  each carries ``b = B / (2 d)`` one way; every hop costs ``alpha``.
- **Wraparound.** An axis closes into a ring only in slices of at least ``wraparound_min_chips``
  chips (a full v6e pod; whole 4x4x4 cubes on TPU7x). Otherwise it is an open line: its far ends
  have one path, so a collective along it uses one direction's links (half the bandwidth of a
  ring) and crosses ``k - 1`` hops instead of ``ceil(k / 2)`` (Scaling Book, "How to think about
  TPUs": a missing wraparound "typically doubles the time").
- **All-reduce** of ``S`` bytes per chip: a reduce-scatter then an all-gather over every axis
  at once, the payload split over the axes in proportion to their bandwidth (XLA's multi-axis
  collectives), so each phase moves ``(n - 1) / n * S`` bytes out of each chip over all its
  links and waits for the longest path::

      t_AR = 2 * sum_i h_i * alpha + 2 * (n - 1) / n * S / (b * sum_i w_i)

  with ``h_i = ceil(k_i / 2)`` and ``w_i = 2`` on a ring, ``h_i = k_i - 1`` and ``w_i = 1`` on
  a line, for axes of length ``k_i > 1``. On a full ``k^d`` torus this is ``S / (d b)`` plus
  ``d k alpha``: the bandwidth term is independent of ``n``, the latency grows with the side.
- **All-to-all** (expert-parallel dispatch or combine), ``S`` bytes sent per chip spread evenly
  over the others: bounded by what leaves a chip, ``(n - 1) / n * S / (b * sum_i w_i)``, and
  by the bisection across the longest axis ``k``: ``n S / 4`` bytes cross each way over
  ``w n / k`` links, ``k S / (4 w b)`` (``k S / (8 b)`` on a ring). The slower bound holds,
  plus the diameter in hops, ``sum_i h_i * alpha``. A switch's all-to-all does not grow with
  ``n``; a torus's grows with its side: the structural reason MoE expert parallelism favours
  NVLink domains.
- **Pipeline hop**: neighbouring stages are adjacent, one hop on one link: ``alpha + S / b``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Directions a ring axis is used in (both neighbours); an open line effectively has one.
RING_DIRECTIONS = 2


def slice_shape(chips: int, dimensions: int) -> tuple[int, ...]:
    """Axis lengths of the most compact ``dimensions``-axis slice of ``chips`` chips, longest first.

    Examples
    --------
    >>> slice_shape(8, 2)
    (4, 2)
    >>> slice_shape(4, 3)
    (2, 2, 1)
    >>> slice_shape(256, 2)
    (16, 16)
    """
    axes = [1] * dimensions
    remaining, factor, factors = chips, 2, []
    while remaining > 1:
        while remaining % factor == 0:
            factors.append(factor)
            remaining //= factor
        factor += 1
    for p in sorted(factors, reverse=True):
        axes[axes.index(min(axes))] *= p
    return tuple(sorted(axes, reverse=True))


@dataclass(frozen=True)
class TorusSlice:
    """A slice of ``chips`` chips on a torus: its axes, whether they wrap, and its link rates.

    Parameters
    ----------
    chips
        Chips in the group (a tensor-parallel or expert-parallel group).
    dimensions
        Axes of the torus.
    wraparound_min_chips
        Slices at least this large close every axis into a ring.
    chip_bandwidth
        Achievable bytes/s per chip, one direction, over all its ``2 d`` links.
    hop_latency_s
        Seconds per chip-to-chip hop.
    """

    chips: int
    dimensions: int
    wraparound_min_chips: int
    chip_bandwidth: float
    hop_latency_s: float

    @property
    def shape(self) -> tuple[int, ...]:
        return slice_shape(self.chips, self.dimensions)

    @property
    def wraps(self) -> bool:
        return self.chips >= self.wraparound_min_chips

    @property
    def link_bandwidth(self) -> float:
        """Bytes/s one link carries one way: ``b = B / (2 d)``."""
        return self.chip_bandwidth / (RING_DIRECTIONS * self.dimensions)

    @property
    def hops(self) -> int:
        """Hops across the slice (its diameter): ``sum_i h_i``, ``ceil(k/2)`` per ring, ``k - 1`` per line."""
        return sum(math.ceil(k / 2) if self.wraps else k - 1 for k in self.shape if k > 1)

    @property
    def directions(self) -> int:
        """``w``: link directions a collective uses per axis (2 on a ring, 1 on a line)."""
        return RING_DIRECTIONS if self.wraps else 1

    @property
    def injection_bandwidth(self) -> float:
        """Bytes/s a collective gets out of one chip: ``b * sum_i w_i`` over axes longer than 1."""
        axes = sum(1 for k in self.shape if k > 1)
        return self.link_bandwidth * self.directions * axes

    def allreduce_s(self, message_bytes: FloatArray) -> tuple[FloatArray, float]:
        """(bandwidth seconds, hop seconds) of an all-reduce of ``message_bytes`` per chip (module docstring)."""
        if self.chips == 1:
            return np.zeros_like(message_bytes), 0.0
        n = self.chips
        return 2 * (n - 1) / n * message_bytes / self.injection_bandwidth, 2 * self.hops * self.hop_latency_s

    def alltoall_s(self, message_bytes: FloatArray) -> tuple[FloatArray, float]:
        """(bandwidth seconds, hop seconds) of an all-to-all in which each chip sends ``message_bytes``.

        Notes
        -----
        ``max((n-1)/n S / (b sum w), k_max S / (4 w b))`` plus the diameter ``sum_i h_i alpha``.
        """
        if self.chips == 1:
            return np.zeros_like(message_bytes), 0.0
        n = self.chips
        injection = (n - 1) / n * message_bytes / self.injection_bandwidth
        bisection = self.shape[0] * message_bytes / (4 * self.directions * self.link_bandwidth)
        return np.maximum(injection, bisection), self.hops * self.hop_latency_s

    def neighbour_s(self, message_bytes: FloatArray) -> FloatArray:
        """Seconds to pass ``message_bytes`` to the adjacent chip: ``alpha + S / b``."""
        return self.hop_latency_s + message_bytes / self.link_bandwidth
