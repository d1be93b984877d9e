"""The dashboard's charts in Chromium on the real stack (issue 40).

- Usage page: billing's known lifecycles (tests/billing_fleet.py's fleet) go through upsert's lanes (upsert
  records each change's transition in its commit); the page's stacked bars (the chart's data) and its table hold exactly /v1/usage's hours for the
  month, by provider and by tenant; its "Download CSV" link downloads the same rows.
- Pipeline chart: a burst of reports shows as applied updates in the trends the sweep writes (the chart's data
  from /v1/trends, not only the live stream's local counts) within one snapshot period; how long it took is
  printed, never asserted.
- Both stay usable at 320 px wide (no horizontal scroll of the page).

Screenshots: docs/usage.png, docs/pipeline.png (and tests/e2e/artifacts/).
"""

from __future__ import annotations

import csv
import io
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from dcm_status_contracts import status_update, timeutil

from shared.state import trends
from shared.state.usage import report as usage_report
from tests.billing_fleet import END, START, fleet
from tests.e2e.conftest import wait_until
from tests.e2e.test_dashboard import ARTIFACTS, Dashboard, api, browser, chromium_executable, new_context  # noqa: F401

pytestmark = pytest.mark.e2e


def publish(e2e, updates) -> None:
    """The status updates on the stack's lanes (ordered by resource key), as ingest publishes them."""
    topology = e2e.stack.topology(e2e.state)
    for f in [e2e.publisher.publish(e2e.topic_path(topology.topic("normalized", u.key.provider)),
                                    status_update.to_bytes(u), ordering_key=str(u.key)) for u in updates]:
        f.result(timeout=30)

DOCS = Path(__file__).resolve().parents[2] / "docs"
MONTH = "2026-03"


@pytest.fixture
def page_of(browser, e2e):  # noqa: F811
    contexts = []

    def open_at(width: int = 1280, height: int = 900) -> Dashboard:
        context = new_context(browser, width, height, accept_downloads=True)
        contexts.append(context)
        return Dashboard(context.new_page(), e2e.api_url)

    yield open_at
    for c in contexts:
        c.close()


def screenshot(dashboard: Dashboard, name: str, selector: str | None = None) -> None:
    """The element (else the window as a user sees it, top bar included) to tests/e2e/artifacts/ and docs/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    if selector:
        dashboard.page.locator(selector).screenshot(path=str(ARTIFACTS / name))
    else:
        dashboard.page.evaluate("window.scrollTo(0, 0)")
        dashboard.page.screenshot(path=str(ARTIFACTS / name))
    shutil.copyfile(ARTIFACTS / name, DOCS / name)


def page_usage(dashboard: Dashboard) -> dict[str, Any]:
    """The chart's data (group -> hours per day) and the table's rows, read from the page."""
    return dashboard.page.evaluate("""() => {
        const c = window.dcmCharts.usage;
        const bars = {};
        for (const d of c.data.datasets) bars[d.label] = d.data.slice();
        const rows = [...document.querySelectorAll('[data-testid=usage-table] tbody tr')].map(tr => ({
            day: tr.dataset.day, group: tr.children[1].textContent,
            hours: Number(tr.querySelector('[data-hours]').dataset.hours)}));
        return {bars, labels: c.data.labels, rows, total: Number(document.querySelector('#usage-total').dataset.hours),
                csv: document.querySelector('[data-testid=usage-csv]').getAttribute('href')};
    }""")


def wider_than_the_page(dashboard: Dashboard) -> list[str]:
    """The visible elements that stick out of the viewport on the right (the page would scroll sideways)."""
    return dashboard.page.evaluate("""() => [...document.querySelectorAll('body *')].filter(e => {
        if (e.closest('.table-wrap') && e !== e.closest('.table-wrap')) return false;  // scrolls on its own
        const r = e.getBoundingClientRect();
        return r.width > 0 && r.right > window.innerWidth + 1;
    }).map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className} `
                + `right=${Math.round(e.getBoundingClientRect().right)}`)
      .slice(0, 10)""")


def test_the_usage_page_draws_v1_usage_and_its_csv_link_downloads_the_same_rows(e2e, uid, page_of):
    """One fleet, both groupings (the api keeps a window's usage 5 minutes: a fleet published after the first
    page read would not be in the second)."""
    tenant = f"charts-{uid}"
    resources = fleet(uid, tenant)
    publish(e2e, [u for r in resources for u in r.updates()])
    # upsert has stored every change's transition before the page reads (the api keeps a window's usage 5 minutes)

    def per_resource() -> dict[str, int]:
        return {r["resource"]: r["seconds"]
                for r in usage_report.report(e2e.db, START, END, ["resource"], daily=False, tenant=tenant)}

    want = {str(r.key): sum(r.expected.values()) for r in resources if r.expected}
    wait_until(lambda: per_resource() == want, timeout=60,
               what=lambda: f"the fleet's seconds per resource {want}, got {per_resource()}")
    for by in ("provider", "tenant"):
        check_usage_page(e2e, page_of, by, tenant)


def check_usage_page(e2e, page_of, by: str, tenant: str) -> None:
    dashboard = page_of()
    dashboard.page.goto(f"{e2e.api_url}#/usage?month={MONTH}&by={by}")
    dashboard.page.wait_for_function("window.dcmCharts && window.dcmCharts.usage && "
                                     "document.querySelector('#usage-total').dataset.hours !== undefined")
    body = api(e2e, "/v1/usage", **{"from": f"{MONTH}-01", "to": "2026-04-01", "by": by, "pageSize": 5000})
    got = page_usage(dashboard)
    column = body["column"]
    want: dict[str, list[float]] = {}
    for row in body["rows"]:
        group = "(none)" if row[column] is None else row[column]
        want.setdefault(group, [0.0] * 31)[int(row["day"][8:]) - 1] += row["hours"]
    assert set(got["bars"]) == set(want)
    for group, hours in want.items():  # every bar of every day, by group
        assert got["bars"][group] == pytest.approx(hours), group
    assert sum(sum(v) for v in got["bars"].values()) == pytest.approx(body["total"]["hours"])
    assert got["total"] == pytest.approx(body["total"]["hours"])
    assert [(r["day"], r["group"], r["hours"]) for r in got["rows"]] == [
        (row["day"], "(none)" if row[column] is None else row[column], row["hours"]) for row in body["rows"]]
    assert tenant in got["bars"] if by == "tenant" else {"aws", "azure", "kubernetes", "vmware"} <= set(got["bars"])

    with dashboard.page.expect_download() as download:  # the link, clicked as a user does
        dashboard.page.click("[data-testid=usage-csv]")
    text = Path(download.value.path()).read_text()
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert [(r["day"], r[column], float(r["hours"])) for r in parsed] == [
        (row["day"], row[column] or "", row["hours"]) for row in body["rows"]]
    if by == "provider":
        screenshot(dashboard, "usage.png")
        narrow = page_of(width=320, height=800)
        narrow.page.goto(f"{e2e.api_url}#/usage?month={MONTH}&by={by}")
        narrow.page.wait_for_function("window.dcmCharts && window.dcmCharts.usage")
        assert wider_than_the_page(narrow) == []
        assert narrow.page.is_visible("[data-testid=usage-csv]")


def test_an_empty_month_says_so(e2e, page_of):
    dashboard = page_of()
    dashboard.page.goto(f"{e2e.api_url}#/usage?month=2020-01&by=provider")
    dashboard.page.wait_for_function("document.querySelector('[data-testid=usage-note]').textContent.includes('No ')")
    assert dashboard.page.text_content("[data-testid=usage-note]") == "No billable usage in 2020-01."


def server_applied(dashboard: Dashboard, provider: str) -> int:
    """Applied updates of ``provider`` in the chart's minutes as /v1/trends gave them (not the stream's)."""
    return dashboard.page.evaluate("""(p) => [...window.dcmCharts.trends.values()]
        .reduce((n, m) => n + ((m.providers || {})[p] ? m.providers[p].applied : 0), 0)""", provider)


def test_the_pipeline_chart_shows_a_burst_within_one_snapshot_period(e2e, uid, page_of):
    provider = "vmware"
    dashboard = page_of()
    dashboard.open("#/")
    dashboard.page.wait_for_function("window.dcmCharts && window.dcmCharts.pipeline")
    before = server_applied(dashboard, provider)
    reporter = e2e.reporter(provider)
    burst = 40
    futures = [reporter.publish_now("vm", f"burst-{uid}-{i}", "RUNNING", "burst") for i in range(burst)]
    for f in futures:
        f.result(timeout=30)
    # every one stored, none lost: how fast is for benchmarks/pipeline.py (and the reliability rows) to say; a
    # burst of 40 takes 2-7 s alone, and over two minutes with two `make test` runs side by side on 2 cores
    e2e.wait_for_statuses({f"{provider}/vm/burst-{uid}-{i}": "RUNNING" for i in range(burst)})
    # the sweep's count of the trends, for this provider (the e2e stacks' sweeps count none: tests/e2e/conftest.py;
    # a tick's trends are tests/functional/test_usage_api.py's)
    recorded = [0.0]

    def counted() -> int:  # as a sweep tick would, every 5 s (a count of the ledger: seconds of emulator CPU at
        # thousands of entries); the page, read every poll, reads the minutes the sweep keeps current
        if time.monotonic() - recorded[0] >= 5:
            trends.record(e2e.db, [provider], timeutil.now(), 0, {"timeout": 120})
            recorded[0] = time.monotonic()
        return server_applied(dashboard, provider)

    stored = time.monotonic()
    period = float(requests.get(e2e.api_url + "/v1/summary", timeout=30).json()["everySeconds"])
    # the next summary snapshot (at most one period away) brings the trends with it; a tick's slack on top
    wait_until(lambda: counted() >= before + burst, timeout=2 * period + 30, interval=0.5,
               what=f"the pipeline chart's trends to hold the burst of {burst}")
    took = time.monotonic() - stored
    print(f"\npipeline chart: the burst of {burst} in the trends {took:.1f} s after it was stored "
          f"(snapshot period {period:.0f} s)")
    data = dashboard.page.evaluate(
        "window.dcmCharts.pipeline.data.datasets.map(d => d.data.reduce((a, b) => a + b, 0))")
    assert data[0] >= burst  # applied, drawn
    assert dashboard.page.evaluate("window.dcmCharts.pipeline.data.datasets.map(d => d.label)") == [
        "applied", "dead letters"]
    chart = dashboard.page.locator("[data-testid=pipeline-chart]")
    chart.scroll_into_view_if_needed()
    dashboard.page.evaluate("""() => {  // the burst's minute, its tooltip open: applied and dead letters per provider
        const c = window.dcmCharts.pipeline, d = c.data.datasets[0].data;
        const i = d.indexOf(Math.max(...d));
        const at = c.getDatasetMeta(0).data[i];
        c.tooltip.setActiveElements([{datasetIndex: 0, index: i}, {datasetIndex: 1, index: i}], {x: at.x, y: at.y});
        c.update('none');
    }""")
    screenshot(dashboard, "pipeline.png", "section[aria-labelledby=h-pipeline]")
    narrow = page_of(width=320, height=800)
    narrow.open("#/")
    narrow.page.wait_for_function("window.dcmCharts && window.dcmCharts.pipeline")
    assert wider_than_the_page(narrow) == []
