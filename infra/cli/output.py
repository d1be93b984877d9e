"""How ``dcm-status`` prints for people and for pipes.

Tables fit the terminal (80 columns when the output is not a terminal, or ``COLUMNS``): cells that do not
fit end in an ellipsis, never wrap over lines; ``--wide`` prints every value whole; ``--json`` is for
programs. Progress redraws in place only on a terminal.
"""

from __future__ import annotations

import shutil
from typing import Any, Iterable, Sequence

import click
from rich.console import Console

from infra.cli.common import to_text

WIDE = click.option("--wide", is_flag=True, help="Print every value whole (tables may exceed the terminal).")
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON, for programs (the whole record).")


def console(wide: bool = False) -> Console:
    """A console for stdout: the terminal's width (80 for a pipe), or unbounded with ``wide``."""
    return Console(width=100_000 if wide else None, soft_wrap=False, highlight=False, emoji=False,
                   markup=False)


def width() -> int:
    """The terminal's columns (``COLUMNS`` when set; 80 for a pipe)."""
    return shutil.get_terminal_size((80, 24)).columns


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], wide: bool = False,
          flexible: Sequence[str] = ()) -> None:
    """Print rows under a header, two spaces between columns. When the table is wider than the terminal,
    the ``flexible`` columns give up width (their cells end in '…'); ``wide`` prints every value whole."""
    cells = [["-" if v is None else " ".join(str(v).split()) for v in row] for row in rows]
    header = [c.upper() for c in columns]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    if not wide:
        widths = _fit(widths, [c in flexible for c in columns], width())
    for row in [header, *cells]:
        line = "  ".join(_clip(v, w).ljust(w) for v, w in zip(row, widths))
        click.echo(line.rstrip())


def _fit(widths: list[int], flexible: list[bool], limit: int) -> list[int]:
    """Cut the widest column, a character at a time, until the table fits: flexible columns first,
    then the others; none below 8 characters."""
    out = list(widths)
    excess = sum(out) + 2 * (len(out) - 1) - limit
    for pool in ([i for i, f in enumerate(flexible) if f], list(range(len(out)))):
        while excess > 0:
            widest = max(pool, key=lambda i: out[i], default=None)
            if widest is None or out[widest] <= 8:
                break
            out[widest] -= 1
            excess -= 1
    return out


def _clip(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: max(0, limit - 1)] + "…"


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """A record as ``name  value`` lines: values as text (JSON for structures), never Python reprs."""
    for name, value in pairs:
        click.echo(f"{name:<20}{to_text(value)}")
