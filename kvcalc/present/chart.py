"""A bar chart in the terminal, without any plotting dependency: one bar per row of a numeric column (`--chart`)."""

from __future__ import annotations

from kvcalc.present.render import Column, cell

WIDTH = 40  # characters of the longest bar
EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(value: float, top: float, width: int = WIDTH) -> str:
    """A bar of `value` against `top`, drawn in eighths of a character."""
    eighths = round(8 * width * value / top) if top > 0 else 0
    return "█" * (eighths // 8) + (EIGHTHS[eighths % 8] if eighths % 8 else "")


def bar_chart(rows: list[dict], column: Column, texts: list[str], units: str) -> list[str]:
    """Lines of a bar chart of `column` over `rows`: the row's label (`texts`), its bar (linear, from zero) and its
    value as the tables show it."""
    values = [row.get(column.key) for row in rows]
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    top = max(numbers, default=0)
    pad = max((len(t) for t in texts), default=0)
    lines = [f"{' '.join(column.header.split())} (bars linear from zero)"]
    for text, value in zip(texts, values):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            lines.append(f"{text:<{pad}}  –")
            continue
        drawn = bar(value, top)
        lines.append(f"{text:<{pad}}  {drawn:<{WIDTH}}  {cell(value, column.kind, units)}")
    return lines
