"""Plain-text tables for the terminal (no I/O)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned text, right-aligned numbers, one header rule.

    >>> print(format_table(["a", "b"], [["x", 1.5], ["yy", 10]]))
    a   b
    --  ---
    x   1.5
    yy   10
    """
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = _numeric_columns(rows, len(headers))
    lines = [_line(cells[0], widths, [False] * len(widths)), "  ".join("-" * w for w in widths)]
    lines += [_line(row, widths, numeric) for row in cells[1:]]
    return "\n".join(lines)


def _numeric_columns(rows: Sequence[Sequence[object]], count: int) -> list[bool]:
    """Whether each column holds numbers only (right-aligned); no column does in a table without rows."""
    return [bool(rows) and all(isinstance(row[i], int | float) for row in rows) for i in range(count)]


def _line(row: list[str], widths: list[int], right: list[bool]) -> str:
    """One row padded to the column widths, the ``right`` columns right-aligned, trailing spaces cut."""
    parts = [cell.rjust(widths[i]) if right[i] else cell.ljust(widths[i]) for i, cell in enumerate(row)]
    return "  ".join(parts).rstrip()


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def format_number(value: object, spec: str = ".4g") -> str:
    """``format(value, spec)`` for a finite number, ``-`` for anything else (None, NaN, text).

    >>> format_number(1234.5, ",.0f"), format_number(float("nan")), format_number(None)
    ('1,234', '-', '-')
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return "-"
    return format(value, spec)


def format_ratio(ratio: float) -> str:
    """An achieved / bound ratio with 3 significant digits, more (up to 7) where 3 would print a
    ratio on either side of 1 as ``1``: a miss by 0.04 % reads ``1.0004``, not ``1``.

    >>> [format_ratio(r) for r in (1.0003698, 0.99996, 0.9884, 1.0, float("inf"))]
    ['1.0004', '0.99996', '0.988', '1', 'inf']
    """
    for digits in range(3, 8):
        text = f"{ratio:.{digits}g}"
        if ratio == 1.0 or float(text) != 1.0:
            return text
    return text
