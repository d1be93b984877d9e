"""``dcm-status billing``: resource-hours and cost from status changes."""

from __future__ import annotations

import click
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey

from infra.cli.common import connect, parse_time
from infra.cli.usage_api import ApiUsage, UsageApiError
from infra.console import JSON, WIDE, billing_table, console, emit_json
from shared.state.usage.intervals import usage
from shared.state.usage.rates import RateCard, RateCardError
from shared.runtime import firestore as fs
from shared.state.usage.report import dimension, report, to_csv, totals
from shared.billing.store import BillingStore, to_transition


def split_by(values: tuple[str, ...]) -> list[str]:
    out = []
    for v in values:
        for part in v.split(","):
            if part.strip():
                try:
                    out.append(dimension(part.strip()))
                except ValueError as exc:
                    raise click.BadParameter(str(exc), param_hint="--by") from exc
    return out or ["resourceType"]


@click.group()
def billing() -> None:
    """Usage from status changes: resource-hours in billable states, and cost."""


def report_window(start: str, end: str, now):
    """--from and --to as times, or the parameter at fault: the window ends after it starts, and starts before now."""
    start_dt, end_dt = parse_time(start, now, "--from"), parse_time(end, now, "--to")
    if end_dt <= start_dt:
        raise click.BadParameter("--to must be after --from", param_hint="--to")
    if start_dt >= now:
        raise click.BadParameter(f"the window starts in the future ({timeutil.format(start_dt)[:19]}Z, now is "
                                 f"{timeutil.format(now)[:19]}Z): there is no usage yet", param_hint="--from")
    return start_dt, end_dt


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
@click.option("--api", "api_url", default=None, metavar="URL",
              help="Read the status API's /v1/usage at URL instead of Firestore (an identity, no Firestore "
                   "credentials: DCM_API_TOKEN, else Google credentials' ID token); --from/--to are UTC days.")
@click.option("--rate-card", "rate_card", default=None, metavar="NAME",
              help="With --api: the deployment's rate card NAME (DCM_RATE_CARDS), not a file.")
@click.option("--total", "whole", is_flag=True, help="One row per group for the whole window, not per UTC day.")
@click.option("--provider", default=None, help="Only this provider.")
@click.option("--type", "resource_type", default=None, help="Only this resource type.")
@click.option("--tenant", default=None, help="Only usage labelled with this tenant.")
@JSON
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV, for spreadsheets.")
@WIDE
def report_cmd(start, end, by, rates_path, api_url, rate_card, whole, provider, resource_type, tenant, as_json,
               as_csv, wide):
    """Resource-hours (and cost, with --rates) per UTC day and group, for [--from, --to).

    Example: dcm-status billing report --from 7d --by provider,resourceType --rates examples/rates.yaml
    """
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are exclusive")
    now = timeutil.now()
    start_dt, end_dt = report_window(start, end, now)
    dims = split_by(by)
    if api_url:
        for given, name in ((rates_path, "--rates (give --rate-card NAME)"), (whole, "--total"),
                            (provider, "--provider"), (resource_type, "--type"), (tenant, "--tenant")):
            if given:
                raise click.UsageError(f"{name}: not with --api (/v1/usage groups by one of tenant, provider, "
                                       "type, resource, per UTC day)")
        try:
            got = ApiUsage.from_env(api_url).report(start_dt, end_dt if end != "now" else None, dims, rate_card)
        except UsageApiError as exc:
            raise click.ClickException(str(exc)) from exc
        rows, horizon = got.rows, got.counted_until
    else:
        if rate_card:
            raise click.UsageError("--rate-card: with --api only (locally, give the card's file: --rates)")
        try:
            rates = RateCard.load(rates_path) if rates_path else None
        except RateCardError as exc:
            raise click.BadParameter(str(exc), param_hint="--rates") from exc
        conn = connect()
        rows = report(conn.firestore(), start_dt, end_dt, dims, daily=not whole, rates=rates,
                      now=now, provider=provider, resource_type=resource_type, tenant=tenant,
                      options=fs.read_options())
        horizon = min(end_dt, now)
    if as_json:
        emit_json({"from": timeutil.format(start_dt), "to": timeutil.format(end_dt),
                   "countedUntil": timeutil.format(horizon), "by": dims, "daily": not whole,
                   "rows": rows, "total": totals(rows)})
        return
    if as_csv:
        click.echo(to_csv(rows), nl=False)
        return
    click.echo(f"usage {timeutil.format(start_dt)[:19]}Z .. {timeutil.format(horizon)[:19]}Z "
               f"(billable states only)", err=True)
    if not rows:
        click.echo("no billable usage in the window", err=True)
        return
    table, _ = billing_table(rows)
    console(wide).print(table)


@billing.command("show")
@click.argument("key")
@click.option("--from", "start", default=None, help="Window start (default: the first transition).")
@click.option("--to", "end", default="now", show_default=True, help="Window end (same forms as --from).")
@JSON
def show(key, start, end, as_json):
    """One resource: its stored transitions and billable intervals (per UTC day).

    Example: dcm-status billing show aws/vm/i-0abc --from 7d
    """
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
