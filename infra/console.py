"""How ``dcm-status`` and the demo print for people and for pipes (one place for both).

Tables fit the terminal (80 columns when the output is not a terminal, or ``COLUMNS``): cells that do not
fit end in an ellipsis, never wrap over lines; ``--wide`` prints every value whole; ``--json`` is for
programs. Progress redraws in place only on a terminal.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import click
import orjson

if TYPE_CHECKING:  # rich and the billing report are loaded by the commands that print with them
    from rich.console import Console
    from rich.table import Table

WIDE = click.option("--wide", is_flag=True, help="Print every value whole (tables may exceed the terminal).")
JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON, for programs (the whole record).")


def console(wide: bool = False) -> Console:
    """A console for stdout: the terminal's width (80 for a pipe), or unbounded with ``wide``."""
    from rich.console import Console

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


def emit_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS, default=str).decode())


def to_text(value: Any) -> str:
    """A value as an operator reads it: text as is, nothing as '-', structures as compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple)):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
    return str(value)


NUMERIC = ("resources", "seconds", "hours", "cost")
TOTALLED = ("seconds", "hours", "cost")


def billing_table(rows: Sequence[Mapping[str, Any]], *, title: str | None = None, dims: Sequence[str] = (),
                  expected: Mapping[tuple, int | float] | None = None) -> tuple[Table, bool]:
    """The one billing table: report rows with a total footer.

    With ``expected`` ({values of ``dims``: seconds}), an "expected h" column is added, groups
    only expected get a row of their own, and each mismatch is marked; the flag says all matched.
    """
    from rich.table import Table

    from shared.state.usage.report import cell, columns, totals

    rows = [dict(r) for r in rows]
    if expected is not None:
        have = {tuple(r[d] for d in dims) for r in rows}
        rows += [{**dict(zip(dims, g)), "resources": 0, "seconds": 0, "hours": 0.0} for g in expected if g not in have]
        rows.sort(key=lambda r: tuple(str(r[d]) for d in dims))
    cols = [c for c in columns(rows) if c != "currency"]
    currency = rows[0].get("currency") if rows else None
    total = totals(rows)
    table = Table(title=title, box=None, show_footer=True)
    for i, c in enumerate(cols):
        table.add_column(f"cost ({currency})" if c == "cost" else c, justify="right" if c in NUMERIC else "left",
                         footer="total" if i == 0 else cell(c, total.get(c)) if c in TOTALLED else "")
    ok = True
    if expected is not None:
        table.add_column("expected h", justify="right", footer=cell("hours", sum(expected.values()) / 3600))
    for r in rows:
        cells = [cell(c, r.get(c)) for c in cols]
        if expected is not None:
            want = expected.get(tuple(r[d] for d in dims), 0)
            ok &= want == r["seconds"]
            cells.append(cell("hours", want / 3600) + ("" if want == r["seconds"] else " [red]≠[/]"))
        table.add_row(*cells)
    return table, ok
