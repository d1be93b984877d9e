"""Report rows, rate cards and formatting (no Firestore: aggregate() over computed usage)."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone
from pathlib import Path

import click
import pytest

from infra.cli.billing import split_by
from infra.cli.common import parse_time
from infra.console import billing_table
from shared.state.usage.intervals import Transition, usage
from shared.state.usage.rates import RateCard, RateCardError
from shared.state.usage.report import ResourceUsage, aggregate, dimension, to_csv, totals

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
START, END = "2026-03-01T00:00:00Z", "2026-03-04T00:00:00Z"


def ru(key: str, *transitions: tuple[str, str, dict]) -> ResourceUsage:
    provider, rtype, _ = key.split("/")
    ts = [Transition.of(at, status, f"{key}/{i}", labels=labels) for i, (at, status, labels) in enumerate(transitions)]
    return ResourceUsage(key, provider, rtype, usage(ts, rtype, START, END, NOW))


A = {"tenant": "a", "region": "eu"}
B = {"tenant": "b"}
FLEET = [
    ru("aws/vm/1", ("2026-03-01T22:00:00Z", "RUNNING", A), ("2026-03-02T02:00:00Z", "STOPPED", A)),
    ru("aws/vm/2", ("2026-03-02T00:00:00Z", "RUNNING", B), ("2026-03-02T01:00:00Z", "DELETED", B)),
    ru("azure/volume/3", ("2026-03-03T12:00:00Z", "AVAILABLE", A)),
]


def test_rows_per_day_and_type():
    rows = aggregate(FLEET, ["resourceType"])
    assert rows == [
        {"day": "2026-03-01", "resourceType": "vm", "resources": 1, "seconds": 7200, "hours": 2.0},
        {"day": "2026-03-02", "resourceType": "vm", "resources": 2, "seconds": 10800, "hours": 3.0},
        {"day": "2026-03-03", "resourceType": "volume", "resources": 1, "seconds": 43200, "hours": 12.0},
    ]


def test_rows_for_the_whole_window_by_two_dimensions():
    rows = aggregate(FLEET, ["tenant", "provider"], daily=False)
    assert [(r["tenant"], r["provider"], r["seconds"]) for r in rows] == [
        ("a", "aws", 14400), ("a", "azure", 43200), ("b", "aws", 3600)]


def test_missing_labels_are_none_and_sort_first():
    rows = aggregate(FLEET, ["region"], daily=False)
    assert [(r["region"], r["seconds"]) for r in rows] == [(None, 3600), ("eu", 57600)]


def test_by_resource():
    rows = aggregate(FLEET, ["resource"], daily=False)
    assert {r["resource"]: r["hours"] for r in rows} == {"aws/vm/1": 4.0, "aws/vm/2": 1.0, "azure/volume/3": 12.0}


def test_fractional_seconds_are_exact():
    rows = aggregate([ru("aws/vm/9", ("2026-03-01T00:00:00Z", "RUNNING", {}),
                         ("2026-03-01T00:00:01.5Z", "STOPPED", {}))])
    assert rows[0]["seconds"] == 1.5


def test_cost_with_a_rate_card():
    rates = RateCard.from_dict({"currency": "EUR", "resourceTypes": {"vm": 0.5, "volume": 0.01},
                                "providers": {"azure": {"volume": 0.02}}})
    rows = aggregate(FLEET, ["provider"], daily=False, rates=rates)
    assert [(r["provider"], r["cost"], r["currency"]) for r in rows] == [("aws", 2.5, "EUR"), ("azure", 0.24, "EUR")]
    assert totals(rows) == {"seconds": 61200, "hours": 17.0, "cost": 2.74, "currency": "EUR"}


def test_unpriced_resource_type_has_no_cost_rather_than_zero():
    rates = RateCard.from_dict({"currency": "EUR", "resourceTypes": {"vm": 0.5}})
    rows = aggregate(FLEET, ["resourceType"], daily=False, rates=rates)
    assert {r["resourceType"]: r["cost"] for r in rows} == {"vm": 2.5, "volume": None}
    assert totals(rows)["cost"] is None
    with_default = RateCard.from_dict({"currency": "EUR", "resourceTypes": {"vm": 0.5}, "default": 0})
    assert totals(aggregate(FLEET, ["resourceType"], rates=with_default))["cost"] == 2.5


def test_example_rate_card_loads_and_prices_every_resource_type():
    from shared.state.usage.intervals import BILLABLE

    rates = RateCard.load(REPO / "examples" / "rates.yaml")
    assert rates.currency == "EUR"
    assert all(rates.rate("aws", t) is not None for t in BILLABLE)
    assert rates.rate("aws", "vm") == 0.052 and rates.rate("gcp", "vm") == 0.045


@pytest.mark.parametrize("doc, message", [
    ({"resourceTypes": {"vm": 1}}, "currency"),
    ({"currency": "EUR", "resourceTypes": {"vm": -1}}, "resourceTypes.vm"),
    ({"currency": "EUR", "resourceTypes": {"vm": "cheap"}}, "resourceTypes.vm"),
    ({"currency": "EUR", "rates": {}}, "unknown keys"),
    ({"currency": "EUR", "providers": {"aws": 3}}, "providers"),
])
def test_bad_rate_cards_say_what_is_wrong(doc, message):
    with pytest.raises(RateCardError, match=message):
        RateCard.from_dict(doc)


def render(table) -> list[str]:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(table)
    return [line for line in console.export_text().splitlines() if line.strip()]


def test_billing_table_has_a_total_line():
    table, ok = billing_table(aggregate(FLEET, ["resourceType"], daily=False), title="billing")
    lines = render(table)
    assert ok and lines[0].strip() == "billing"
    assert lines[1].split() == ["resourceType", "resources", "seconds", "hours"]
    assert lines[-1].split() == ["total", "61,200", "17.000"]


def test_billing_table_marks_what_differs_from_the_expected():
    rows = aggregate(FLEET, ["resourceType"], daily=False)
    expected = {(r["resourceType"],): r["seconds"] for r in rows}
    assert billing_table(rows, dims=["resourceType"], expected=expected)[1]
    expected[("vm",)] += 1
    expected[("network",)] = 60
    table, ok = billing_table(rows, dims=["resourceType"], expected=expected)
    lines = render(table)
    assert not ok
    assert lines[0].split()[-1] == "expected" or "expected h" in lines[0]
    assert any(line.split()[0] == "network" and "≠" in line for line in lines)  # only expected: a row of its own


def test_csv():
    rows = aggregate(FLEET, ["region"], daily=False)
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert parsed[0] == {"region": "", "resources": "1", "seconds": "3600", "hours": "1.0"}
    assert to_csv([]) == ""


def test_dimensions_and_aliases():
    assert dimension("type") == "resourceType" and dimension("key") == "resource"
    with pytest.raises(ValueError):
        dimension("colour")
    assert split_by(("tenant,type", "provider")) == ["tenant", "resourceType", "provider"]
    assert split_by(()) == ["resourceType"]
    with pytest.raises(click.BadParameter):
        split_by(("colour",))


def test_cli_time_forms():
    now = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)
    assert parse_time("2026-03-01", now, "--from") == datetime(2026, 3, 1, tzinfo=timezone.utc)
    assert parse_time("2026-03-01T10:00:00+01:00", now, "--from") == datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
    assert parse_time("2d", now, "--from") == datetime(2026, 3, 8, 12, tzinfo=timezone.utc)
    assert parse_time("now", now, "--to") == now
    with pytest.raises(click.BadParameter):
        parse_time("last tuesday", now, "--from")


def test_expected_usage_from_known_lifecycles():
    from infra.demo.billing import usage_from_lifecycles

    lifecycles = {"aws/vm/1": [("2026-03-01T22:00:00Z", "RUNNING"), ("2026-03-02T02:00:00Z", "STOPPED")],
                  "aws/network/2": [("2026-03-03T12:00:00Z", "CREATING")]}
    usages = usage_from_lifecycles(lifecycles, {"aws/vm/1": {"tenant": "a"}}, START, END, NOW)
    assert aggregate(usages, ["tenant"]) == [
        {"day": "2026-03-01", "tenant": "a", "resources": 1, "seconds": 7200, "hours": 2.0},
        {"day": "2026-03-02", "tenant": "a", "resources": 1, "seconds": 7200, "hours": 2.0}]
