"""``dcm-status billing``: resource-hours and cost from status changes."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

import click
from rich.console import Console
from rich.table import Table

from shared import timeutil
from shared.billing_intervals import day_start, usage
from shared.billing_rates import RateCard, RateCardError

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def parse_time(value: str, now: datetime, param: str) -> datetime:
    """'now', a UTC date (its midnight), an RFC 3339 time, or a duration ago (90m, 2h, 7d)."""
    if value == "now":
        return now
    if _DATE.match(value):
        try:
            return day_start(date.fromisoformat(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=param) from exc
    m = _DURATION.match(value)
    if m:
        return now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    try:
        return timeutil.parse(value)
    except ValueError as exc:
        raise click.BadParameter("use YYYY-MM-DD, an RFC 3339 time, 'now', or a duration ago (2h, 7d)",
                                 param_hint=param) from exc


def split_by(values: tuple[str, ...]) -> list[str]:
    from shared.billing_report import dimension

    out = []
    for v in values:
        for part in v.split(","):
            if part.strip():
                try:
                    out.append(dimension(part.strip()))
                except ValueError as exc:
                    raise click.BadParameter(str(exc), param_hint="--by") from exc
    return out or ["resourceType"]


def register(cli: click.Group, connect, emit_json) -> None:
    @cli.group()
    def billing() -> None:
        """Usage from status changes: resource-hours in billable states, and cost."""

    @billing.command("report")
    @click.option("--from", "start", required=True,
                  help="Window start: YYYY-MM-DD (UTC midnight), RFC 3339, or a duration ago (7d).")
    @click.option("--to", "end", default="now", show_default=True,
                  help="Window end, exclusive (same forms). Clipped at now.")
    @click.option("--by", "by", multiple=True,
                  help="Group by provider|resourceType|tenant|region|environment|resource|status "
                       "(repeat or comma-separate; default resourceType).")
    @click.option("--rates", "rates_path", type=click.Path(exists=True, dir_okay=False),
                  help="Rate card (YAML, see examples/rates.yaml): adds cost.")
    @click.option("--total", "whole", is_flag=True, help="One row per group for the whole window, not per UTC day.")
    @click.option("--provider", default=None, help="Only this provider.")
    @click.option("--type", "resource_type", default=None, help="Only this resource type.")
    @click.option("--tenant", default=None, help="Only usage labelled with this tenant.")
    @click.option("--json", "as_json", is_flag=True)
    @click.option("--csv", "as_csv", is_flag=True)
    def report_cmd(start, end, by, rates_path, whole, provider, resource_type, tenant, as_json, as_csv):
        """Resource-hours (and cost, with --rates) per UTC day and group, for [--from, --to)."""
        from shared import billing_report

        if as_json and as_csv:
            raise click.UsageError("--json and --csv are exclusive")
        now = timeutil.now()
        start_dt, end_dt = parse_time(start, now, "--from"), parse_time(end, now, "--to")
        if end_dt <= start_dt:
            raise click.BadParameter("--to must be after --from", param_hint="--to")
        dims = split_by(by)
        try:
            rates = RateCard.load(rates_path) if rates_path else None
        except RateCardError as exc:
            raise click.BadParameter(str(exc), param_hint="--rates") from exc
        conn = connect()
        rows = billing_report.report(conn.firestore(), start_dt, end_dt, dims, daily=not whole, rates=rates,
                                     now=now, provider=provider, resource_type=resource_type, tenant=tenant)
        horizon = min(end_dt, now)
        if as_json:
            emit_json({"from": timeutil.format(start_dt), "to": timeutil.format(end_dt),
                       "countedUntil": timeutil.format(horizon), "by": dims, "daily": not whole,
                       "rows": rows, "total": billing_report.totals(rows)})
            return
        if as_csv:
            click.echo(billing_report.to_csv(rows), nl=False)
            return
        click.echo(f"usage {timeutil.format(start_dt)[:19]}Z .. {timeutil.format(horizon)[:19]}Z "
                   f"(billable states only)", err=True)
        if not rows:
            click.echo("no billable usage in the window", err=True)
            return
        cols = billing_report.columns(rows)
        shown = [c for c in cols if c != "currency"]
        table = Table(*[f"cost ({rows[0]['currency']})" if c == "cost" else c for c in shown], box=None,
                      show_footer=True)
        total = billing_report.totals(rows)
        for i, c in enumerate(shown):
            column = table.columns[i]
            if c in ("resources", "seconds", "hours", "cost"):
                column.justify = "right"
            column.footer = "total" if i == 0 else (billing_report.cell(c, total.get(c))
                                                     if c in ("seconds", "hours", "cost") else "")
        for r in rows:
            table.add_row(*[billing_report.cell(c, r[c]) for c in shown])
        Console(width=max(Console().width, 120)).print(table)

    @billing.command("show")
    @click.argument("key")
    @click.option("--from", "start", default=None, help="Window start (default: the first transition).")
    @click.option("--to", "end", default="now", show_default=True)
    @click.option("--json", "as_json", is_flag=True)
    def show(key, start, end, as_json):
        """One resource: its stored transitions and billable intervals (per UTC day)."""
        from shared.billing_store import BillingStore, to_transition
        from shared.model import ResourceKey

        try:
            rkey = ResourceKey.parse(key)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="KEY") from exc
        store = BillingStore(connect().firestore())
        docs = sorted(store.transition_documents(rkey.doc_id), key=lambda d: (d["at"], d.get("observedAt", "")))
        if not docs:
            raise click.ClickException(f"billing has no transitions for {key}")
        now = timeutil.now()
        start_dt = parse_time(start, now, "--from") if start else timeutil.parse(docs[0]["at"])
        end_dt = parse_time(end, now, "--to")
        intervals = usage([to_transition(d) for d in docs], rkey.resource_type, start_dt, end_dt, now=now)
        if as_json:
            emit_json({"key": key, "transitions": docs,
                       "intervals": [{"day": iv.day, "start": timeutil.format(iv.start), "end": timeutil.format(iv.end),
                                      "status": iv.status, "seconds": iv.seconds, "labels": dict(iv.labels)}
                                     for iv in intervals]})
            return
        click.echo(f"{key}: {len(docs)} transitions")
        for d in docs:
            note = " (old side of a change)" if d.get("implied") else " (late)" if d.get("late") else ""
            click.echo(f"  {d['at']}  {d['status']:<13} {d['eventId'][:12]}{note}")
        click.echo("billable intervals:")
        for iv in intervals:
            click.echo(f"  {iv.day}  {timeutil.format(iv.start)} .. {timeutil.format(iv.end)}  "
                       f"{iv.status:<10} {iv.seconds:>10.0f} s")
        click.echo(f"  total {sum(iv.seconds for iv in intervals) / 3600:.3f} h")
