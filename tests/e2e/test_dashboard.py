"""The dashboard in a real browser on the real stack.

Debian's Chromium (installed by ``make install``: infra/install-browser.sh), driven by
Playwright, opens the page the api function serves at ``/``. Status reports go through
Pub/Sub as a provider sends them; the page must show each change live (feed, counts,
table row) without a reload (how soon after Firestore holds it is a figure, printed here and
by benchmarks/api.py against its 2 s target, never a timed assertion); filter the table
on the server; draw a resource's timeline and history; and, when its live connection
drops while a change commits (cut, or the api server restarted), show every change exactly
once after it reconnects.

Screenshots land in tests/e2e/artifacts/ (dashboard.png, resource.png).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import requests
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import (
    sync_playwright,  # the Python package only: its browser downloads are never used
)

from infra.local.stack import LOCAL_SETTINGS
from shared.api.feed import HEARTBEAT_SECONDS
from shared.state import aggregates, snapshots
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).parent / "artifacts"
# Headless, and nothing of Chromium's own background traffic (the CI network refuses it).
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# The pages the tests open ask for reduced motion, which the dashboard honours (app.css: no animation). The live
# indicator's dot otherwise pulses for as long as the stream is open, and headless Chromium draws every frame of
# it: an idle open dashboard took 2.7 s of Chromium's CPU in 30 s with it, 0.4 s without (issue 41; the e2e
# tier's Chromium used 64 s of CPU). No test reads an animation: they read the indicator's state (data-state)
# and the classes a change sets (a row's "flash" is still set; it is only not drawn).
WRITE = {"DCM-Request": "1"}  # what the api requires of a request that changes something (docs/api.md)
PIPELINE_TIMEOUT = 15.0


def chromium() -> str:
    path = shutil.which("chromium")
    if path:
        return path
    why = "chromium is not installed (make install installs it: infra/install-browser.sh)"
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session", autouse=True)
def chromium_executable() -> str:
    """Checked first (autouse): without a browser, skip before the stack starts."""
    return chromium()


@pytest.fixture(scope="module")
def browser(chromium_executable: str) -> Iterator[Any]:
    executable = chromium_executable
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Dashboard:
    """One open dashboard page and what the tests read from it."""

    def __init__(self, page: Any, base: str):
        self.page, self.base = page, base
        self.errors: list[str] = []
        self.console: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))

    def open(self, route: str = "#/") -> None:
        self.page.goto(self.base + route)
        try:
            self.page.wait_for_selector('[data-testid="live"][data-state="live"]', timeout=15_000)
        except Exception:
            pytest.fail(f"the dashboard did not go live: indicator {self.live()!r}, banner {self.banner()!r}, "
                        f"console {self.console[-10:]}")
        self.page.wait_for_function("document.querySelector('[data-testid=total]').dataset.value !== undefined")
        self.page.evaluate("""() => {
            window.__notReloaded = true;  // a reload or navigation would lose it
            window.__liveStates = [];  // every state the connection indicator goes through
            const live = document.querySelector('[data-testid=live]');
            new MutationObserver(() => window.__liveStates.push(live.textContent.trim()))
                .observe(live, {childList: true, characterData: true, subtree: true});
        }""")

    def not_reloaded(self) -> bool:
        return self.page.evaluate("window.__notReloaded === true")

    def count(self, name: str) -> int:
        return self.page.evaluate(
            "(n) => { const e = document.querySelector(`[data-count=\"${n}\"]`); return e ? Number(e.dataset.value) : 0; }",
            name)

    def total(self) -> int:
        return int(self.page.get_attribute('[data-testid="total"]', "data-value"))

    def feed(self, key: str) -> list[dict[str, str]]:
        """The feed's items for `key`, newest first."""
        return self.page.evaluate("""(key) => [...document.querySelectorAll('[data-testid=feed] li')]
            .filter(li => li.dataset.key === key)
            .map(li => ({id: li.dataset.changeId, old: li.dataset.oldStatus, new: li.dataset.newStatus,
                         late: li.dataset.late}))""", key)

    def row_status(self, key: str) -> str | None:
        return self.page.evaluate("""(key) => {
            const tr = [...document.querySelectorAll('#rows tr')].find(tr => tr.dataset.key === key);
            return tr ? tr.querySelector('[data-testid=status]').textContent.trim() : null; }""", key)

    def row_keys(self) -> list[str]:
        return self.page.evaluate("[...document.querySelectorAll('#rows tr')].map(tr => tr.dataset.key)")

    def live(self) -> str:
        return self.page.text_content('[data-testid="live"]').strip()

    def live_states(self) -> list[str]:
        return self.page.evaluate("window.__liveStates")

    def banner(self) -> str | None:
        return None if self.page.is_hidden('[data-testid="error"]') else self.page.text_content("#banner-text")

    def diagnose(self, key: str) -> str:
        return (f"feed for {key}: {self.feed(key)}; connection states {self.live_states()}; banner {self.banner()!r}; "
                f"console {self.console[-8:]}")

    def wait_for(self, selector: str, what: str, timeout_ms: int = 30_000) -> None:
        """page.wait_for_selector, failing with where the page is and what it shows (read when it fails)."""
        try:
            self.page.wait_for_selector(selector, timeout=timeout_ms)
        except PlaywrightTimeoutError:
            where = self.page.evaluate("location.hash")
            timeline = self.page.text_content('[data-testid="timeline"]')
            pytest.fail(f"timed out waiting for {what}: at {where!r}, timeline {timeline!r}, banner {self.banner()!r}, "
                        f"console {self.console[-8:]}, errors {self.errors[-3:]}")

    def screenshot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def new_context(browser: Any, width: int = 1440, height: int = 900, **options: Any) -> Any:
    """A browser context as the tests use one: UTC, en-GB, reduced motion (no CSS animation drawn)."""
    return browser.new_context(viewport={"width": width, "height": height}, timezone_id="UTC", locale="en-GB",
                               reduced_motion="reduce", **options)


@pytest.fixture
def dashboard(browser, e2e) -> Iterator[Dashboard]:
    context = new_context(browser)
    try:
        yield Dashboard(context.new_page(), e2e.api_url)
    finally:
        context.close()


def api(e2e, path: str, **params: Any) -> Any:
    response = requests.get(e2e.api_url + path, params=params, timeout=30)
    response.raise_for_status()
    return response.json()


def eventually(predicate: Callable[[], Any], timeout: float, what: Callable[[], str]) -> None:
    """wait_until, with the page's state in the failure message (read when it fails)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what()}")
        time.sleep(0.1)


def latency(committed: Callable[[], bool], shown: Callable[[], bool], what: str,
            timeout: float = PIPELINE_TIMEOUT) -> float:
    """Seconds from the moment `committed()` first holds (Firestore) to the moment `shown()` does (the page),
    both polled together; negative when the page was first."""
    start = time.monotonic()
    at_store = at_page = None
    while at_store is None or at_page is None:
        if at_store is None and committed():
            at_store = time.monotonic()
        if at_page is None and shown():
            at_page = time.monotonic()
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what}: after {timeout:.0f}s, Firestore {'has' if at_store else 'does not have'} it, "
                        f"the page {'shows' if at_page else 'does not show'} it")
        time.sleep(0.02)
    return at_page - at_store


def test_a_change_reaches_the_open_dashboard_live_then_filters_and_the_resource_page(e2e, uid, dashboard):
    aws, azure = e2e.reporter("aws"), e2e.reporter("azure")
    rid, key = f"dash-{uid}", f"aws/vm/dash-{uid}"
    tenant = f"t{uid}"
    # Neighbours the filters must leave out: same id prefix at another provider, another id at aws.
    azure.publish_now("vm", f"dash-{uid}-b", "RUNNING", "neighbour").result(timeout=30)
    aws.publish_now("vm", f"other-{uid}", "RUNNING", "neighbour", metadata={"tenant": tenant}).result(timeout=30)
    e2e.wait_for_status(f"azure/vm/dash-{uid}-b", "RUNNING")
    e2e.wait_for_status(f"aws/vm/other-{uid}", "RUNNING")

    page = dashboard.page
    dashboard.open("#/")
    # The table shows this test's id prefix only (typed as an operator would: server-side search).
    page.fill("#f-q", rid)
    wait_until(lambda: sorted(dashboard.row_keys()) == sorted([f"azure/vm/dash-{uid}-b"]), timeout=10,
               what="the id search to list the azure neighbour only")
    # Counts settled: the page agrees with the API before anything is published.
    def settled() -> bool:
        summary = api(e2e, "v1/summary")
        return (dashboard.total() == summary["total"]
                and dashboard.count("vm:PAUSED") == summary["byType"].get("vm", {}).get("PAUSED", 0))

    wait_until(settled, timeout=75, what="the page's counts to agree with the API's")  # the next snapshot: <= 30 s
    total = dashboard.total()
    paused = dashboard.count("vm:PAUSED")

    # 1. A new resource.
    aws.publish_now("vm", rid, "PROVISIONING", "being created", metadata={"tenant": tenant}).result(timeout=30)
    lag_new = latency(
        lambda: (d := e2e.resource(key)) is not None and d["status"] == "PROVISIONING",
        lambda: (any(f["new"] == "PROVISIONING" and f["old"] == "" for f in dashboard.feed(key))
                 and dashboard.total() == total + 1 and dashboard.row_status(key) == "PROVISIONING"),
        "the new resource")
    first_recorded = datetime.now(timezone.utc)

    # 2. Its status changes.
    time.sleep(1.2)  # a second apart from the first record, for the "as of" below (second precision)
    aws.publish_now("vm", rid, "PAUSED", "paused by its owner", metadata={"tenant": tenant},
                    output_spec={"host": "10.0.1.5", "password": "dash-s3cret"}).result(timeout=30)
    lag_change = latency(
        lambda: e2e.resource(key)["status"] == "PAUSED",
        lambda: (any(f["new"] == "PAUSED" and f["old"] == "PROVISIONING" for f in dashboard.feed(key))
                 and dashboard.count("vm:PAUSED") == paused + 1 and dashboard.row_status(key) == "PAUSED"),
        "the status change")
    print(f"dashboard: shown {lag_new:.2f} s (new resource) and {lag_change:.2f} s (status change) after Firestore had it")
    assert [f["new"] for f in dashboard.feed(key)] == ["PAUSED", "PROVISIONING"]  # newest on top, once each
    assert dashboard.not_reloaded()
    assert dashboard.live() == "live"
    # asked for reduced motion (as every test page), the live dot does not pulse: nothing is redrawn while idle
    assert page.evaluate("getComputedStyle(document.querySelector('[data-testid=\"live\"]'), '::before')"
                         ".animationName") == "none"

    # 3. Filters: provider + id prefix, then a label, all on the server.
    page.wait_for_selector('#f-provider option[value="aws"]', state="attached", timeout=10_000)
    page.select_option("#f-provider", "aws")
    wait_until(lambda: dashboard.row_keys() == [key], timeout=10, what="provider aws + id search: this resource only")
    assert page.get_attribute('[data-testid="table-total"]', "data-value") == "1"
    page.fill("#f-q", "")
    page.fill("#f-label", f"tenant:{tenant}")
    wait_until(lambda: sorted(dashboard.row_keys()) == sorted([key, f"aws/vm/other-{uid}"]), timeout=10,
               what="provider aws + label tenant: the two aws resources of this tenant")
    assert dashboard.count("table:PAUSED") == 1 and dashboard.count("table:RUNNING") == 1
    page.fill("#f-label", "")
    page.fill("#f-q", rid)
    wait_until(lambda: dashboard.row_keys() == [key], timeout=10, what="back to this resource only")
    dashboard.screenshot("dashboard.png")

    # 4. Its page: state, timeline (one segment per state), history.
    # Followed as a keyboard user follows it (focus, Enter): a click is made at the link's coordinates, and a card
    # above the table that grows as a snapshot arrives (a first type, status or provider) can move the row away
    # between Playwright's check that it is still and its click (the fresh-clone runs' "at '#/'" timeouts).
    page.focus(f'#rows tr[data-key="{key}"] a')
    page.keyboard.press("Enter")
    dashboard.wait_for('[data-testid="timeline"] svg rect.tl-seg', "the resource page's timeline")
    dashboard.wait_for('[data-testid="history-row"]', "the resource page's history")
    segments = page.eval_on_selector_all('[data-testid="timeline"] svg rect.tl-seg', "rs => rs.map(r => r.dataset.status)")
    assert segments == ["PROVISIONING", "PAUSED"]
    history = page.eval_on_selector_all('[data-testid="history-row"]', "rs => rs.map(r => r.dataset.status)")
    assert history == ["PAUSED", "PROVISIONING"]
    assert page.text_content('[data-testid="resource-status"]').strip() == "PAUSED"
    assert page.text_content('[data-testid="state"] [data-field="message"]').strip() == "paused by its owner"
    outputs = page.text_content('[data-testid="state"] [data-field="output_spec"]')
    assert "10.0.1.5" in outputs and "[redacted]" in outputs and "dash-s3cret" not in page.content()
    # As of a time between the two records: the first state.
    as_of = (first_recorded + timedelta(seconds=1)).replace(microsecond=0)  # the page runs in UTC
    page.fill("#asof-input", as_of.strftime("%Y-%m-%dT%H:%M:%S"))
    page.click('#asof button[type="submit"]')
    page.wait_for_function("document.querySelector('[data-testid=resource-status]').textContent.trim() === 'PROVISIONING'",
                           timeout=10_000)
    page.click("#asof-now")
    page.wait_for_function("document.querySelector('[data-testid=resource-status]').textContent.trim() === 'PAUSED'",
                           timeout=10_000)
    dashboard.screenshot("resource.png")
    assert dashboard.not_reloaded()
    assert dashboard.banner() is None
    assert not dashboard.errors


def test_changes_made_while_the_live_connection_is_down_arrive_once_after_it_reconnects(e2e, uid, dashboard):
    aws = e2e.reporter("aws")
    rid, key = f"recon-{uid}", f"aws/vm/recon-{uid}"
    dashboard.open("#/")
    page = dashboard.page
    aws.publish_now("vm", rid, "RUNNING", "up").result(timeout=30)
    e2e.wait_for_status(key, "RUNNING")
    eventually(lambda: len(dashboard.feed(key)) == 1, 10, lambda: f"the first change in the feed ({dashboard.diagnose(key)})")

    # 1. The connection drops (as on a network failure); a change commits and settles meanwhile. The page
    # resumes from its last event id, which precedes the first change too: the server sends both, the
    # page shows each once.
    page.evaluate("window.dcmDashboard.dropConnection(-1)")
    assert dashboard.live() == "reconnecting"
    aws.publish_now("vm", rid, "STOPPED", "down").result(timeout=30)
    e2e.wait_for_status(key, "STOPPED")
    time.sleep(2.5)  # past the feed's settle time: the change is in the settled feed the resumed stream reads
    assert [f["new"] for f in dashboard.feed(key)] == ["RUNNING"]  # nothing arrives while disconnected
    page.evaluate("window.dcmDashboard.reconnect()")
    eventually(lambda: [f["new"] for f in dashboard.feed(key)] == ["STOPPED", "RUNNING"], 10,
               lambda: f"the change made while disconnected, in the feed ({dashboard.diagnose(key)})")
    # the page catches up from v1/changes first, then opens the stream: live once the stream says ready
    eventually(lambda: dashboard.live() == "live", 15, lambda: f"the stream open again ({dashboard.diagnose(key)})")

    # 2. The api server itself restarts (as a Cloud Run instance is replaced): EventSource reconnects by
    # itself (Last-Event-ID), the page goes live again and the next change arrives, once.
    page.evaluate("window.__liveStates.length = 0")
    e2e.restart_function("api")
    eventually(lambda: "reconnecting" in dashboard.live_states() and dashboard.live() == "live", 20,
               lambda: f"the page to reconnect to the restarted api ({dashboard.diagnose(key)})")
    aws.publish_now("vm", rid, "RUNNING", "up again").result(timeout=30)
    eventually(lambda: [f["new"] for f in dashboard.feed(key)] == ["RUNNING", "STOPPED", "RUNNING"], 10,
               lambda: f"the change after the restart, in the feed ({dashboard.diagnose(key)})")
    time.sleep(2.5)  # past the settle time: a duplicate from the settled feed would have arrived by now
    items = dashboard.feed(key)
    assert [f["new"] for f in items] == ["RUNNING", "STOPPED", "RUNNING"], f"each change once: {items}"
    assert len({f["id"] for f in items}) == 3
    assert dashboard.not_reloaded()
    eventually(lambda: dashboard.banner() is None, 15,
               lambda: f"the error banner to clear once the API is back ({dashboard.diagnose(key)})")
    assert not dashboard.errors


def test_the_callbacks_panel_shows_each_receivers_delivery_stats(e2e, uid, dashboard):
    """Two callbacks: one failing (its failures in a row, highlighted, and its last error), one disabled
    by a 410. Their stats are set in Firestore, as notify writes them (shared/callbacks/store.py)."""
    base = e2e.api_url
    failing = requests.post(base + "v1/callbacks", json={"hook": f"http://127.0.0.1:9/failing-{uid}",
                                                         "filter": {"label": f"tenant:{uid}"}}, headers=WRITE, timeout=30).json()
    gone = requests.put(base + f"v1/resources/aws/vm/cbpanel-{uid}/callback",
                        params={"hook": f"http://127.0.0.1:9/gone-{uid}"}, headers=WRITE, timeout=30).json()
    ids = [failing["callback"]["id"], gone["callback"]["id"]]
    try:
        e2e.db.collection("callbacks").document(ids[0]).update({
            "stats.consecutiveFailures": 7, "stats.lastFailureAt": "2026-11-22T10:00:00.000000Z",
            "stats.lastStatus": 503, "stats.lastError": f"HTTP 503 from receiver {uid}"})
        e2e.db.collection("callbacks").document(ids[1]).update({"disabled": "the receiver answered 410 Gone"})
        dashboard.open()
        rows = '[data-testid="callbacks"] tr[data-callback="{}"]'
        eventually(lambda: dashboard.page.query_selector(rows.format(ids[0])) is not None, 15,
                   lambda: f"the callbacks panel: {dashboard.page.text_content('[data-testid=callbacks]')!r}")
        first = dashboard.page.query_selector(rows.format(ids[0]))
        assert f"failing-{uid}" in first.text_content() and f"label=tenant:{uid}" in first.text_content()
        assert first.query_selector('[data-testid="callback-failing"]').text_content().strip() == "7"
        assert uid in first.query_selector('[data-testid="callback-error"]').get_attribute("title")
        second = dashboard.page.query_selector(rows.format(ids[1]))
        assert second.query_selector('[data-testid="callback-disabled"]').get_attribute("title").endswith("410 Gone")
        assert f"aws/vm/cbpanel-{uid}" in second.text_content()
        assert second.query_selector('[data-testid="callback-failing"]') is None
        assert not dashboard.errors, dashboard.errors
    finally:
        for callback_id in ids:
            requests.delete(base + f"v1/callbacks/{callback_id}", headers=WRITE, timeout=30)


def test_a_provider_silent_as_a_whole_is_one_alarm_on_the_overview(e2e, uid, dashboard):
    """As the sweep records it (shared/sweep/handler.py): one line, however many resources it holds."""
    name = f"silent-{uid}"  # not a provider of the stack: the sweep never rewrites it
    e2e.db.collection("providers").document(name).set({
        "provider": name, "state": "SILENT", "since": "2026-11-22T10:15:00.000000Z",
        "lastSeenAt": "2026-11-22T09:00:00.000000Z"})
    try:
        # the summary snapshot as the sweep's next tick writes it (not up to a period later), then the page
        wait_until(lambda: summary_written_as_the_sweep_does(e2e), 30, what="the summary snapshot written")
        wait_until(lambda: name in {p["provider"] for p in api(e2e, "v1/summary")["silentProviders"]}, 30,
                   what="the api to serve that snapshot")  # it keeps the one it read up to 5 s
        dashboard.open()
        line = f'[data-testid="silent-{name}"]'
        eventually(lambda: dashboard.page.query_selector(line) is not None, 45,
                   lambda: f"the providers panel: {dashboard.page.text_content('[data-testid=providers]')!r}")
        text = dashboard.page.text_content(line)
        assert name in text and "silent" in text
        assert dashboard.page.query_selector(f'{line} [data-ago="2026-11-22T09:00:00.000000Z"]') is not None
        assert len(dashboard.page.query_selector_all(f'[data-testid="providers"] .silent:has-text("{name}")')) == 1
        assert not dashboard.errors, dashboard.errors
    finally:
        e2e.db.collection("providers").document(name).delete()


def summary_written_as_the_sweep_does(e2e) -> bool:
    """The fleet summary snapshot computed and stored as the sweep writes it each tick (shared/sweep/handler.py
    ``Sweep.snapshot``), at once; False when another writer (the sweep) stored one in between."""
    current, read_as = snapshots.read(e2e.db, snapshots.SnapshotKind.SUMMARY)
    figures, marker = aggregates.summary_since(e2e.db, e2e.state.providers, current)
    every = current.every_seconds if current is not None else int(LOCAL_SETTINGS["DCM_SUMMARY_EVERY_SECONDS"])
    return snapshots.store(e2e.db, snapshots.SnapshotKind.SUMMARY, figures, every, read_as, "sweep", 0, None, marker)


def take_every_stream_place(e2e, held: list[requests.Response]) -> int:
    """Open live streams until the api refuses one (429, the per-caller cap: docs/api.md), adding each
    to ``held``; returns the cap the refusal names."""
    for _ in range(50):
        response = requests.get(e2e.api_url + "v1/changes/stream", stream=True, timeout=30)
        if response.status_code == 429:
            detail = response.json()["detail"]
            assert "DCM_MAX_STREAMS_PER_CALLER" in detail and response.headers["Retry-After"], detail
            return int(re.search(r"holds (\d+) live streams", detail).group(1))
        held.append(response)
    pytest.fail("the api never refused a stream")


def test_a_refused_live_stream_falls_back_to_polling_and_goes_live_again(e2e, uid, dashboard):
    """The api caps live streams per caller (429 beyond: docs/api.md): the page, refused, says "polling",
    reads the changes from v1/changes meanwhile and opens the stream again once a place is free."""
    aws = e2e.reporter("aws")
    rid, key = f"poll-{uid}", f"aws/vm/poll-{uid}"
    dashboard.open("#/")
    dashboard.page.evaluate("window.dcmDashboard.state.retryMax = 2000")  # the back-off's ceiling: 2 s, not 30
    held: list[requests.Response] = []
    try:
        # Every place this caller may hold on the instance, taken by the test: the page's own stream is
        # dropped first, and its place is taken once the api has given it back, when it next writes to the
        # closed connection (a change, or a heartbeat). Taken before that, the page's reconnect would find
        # it free. A neighbour's changes make every stream write sooner than its heartbeat.
        dashboard.page.evaluate("window.dcmDashboard.dropConnection(-1)")
        cap = take_every_stream_place(e2e, held)
        deadline = time.monotonic() + 3 * HEARTBEAT_SECONDS
        for i in itertools.count():
            if len(held) >= cap:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the api kept the dropped page's stream place: the test holds {len(held)} of {cap}")
            aws.publish_now("vm", f"{rid}-nudge", "STOPPED" if i % 2 else "RUNNING", "nudge").result(timeout=30)
            time.sleep(1.0)
            take_every_stream_place(e2e, held)
        dashboard.page.evaluate("window.dcmDashboard.reconnect()")
        eventually(lambda: dashboard.live() == "polling", 20, lambda: f"the page to poll ({dashboard.diagnose(key)})")
        assert "refused" in dashboard.page.get_attribute('[data-testid="live"]', "title")
        aws.publish_now("vm", rid, "RUNNING", "up").result(timeout=30)
        e2e.wait_for_status(key, "RUNNING")
        eventually(lambda: [f["new"] for f in dashboard.feed(key)] == ["RUNNING"], 60,
                   lambda: f"the change, polled while the stream is refused ({dashboard.diagnose(key)})")
    finally:
        for response in held:
            response.close()
    eventually(lambda: dashboard.live() == "live", 30, lambda: f"the stream open again ({dashboard.diagnose(key)})")
    aws.publish_now("vm", rid, "STOPPED", "down").result(timeout=30)
    eventually(lambda: [f["new"] for f in dashboard.feed(key)] == ["STOPPED", "RUNNING"], 30,
               lambda: f"the next change, live, once ({dashboard.diagnose(key)})")
    assert not dashboard.errors, dashboard.errors


def test_a_busy_moment_of_the_api_is_read_again_not_left_on_the_page(e2e, uid, dashboard):
    """A read the api answers 503 (a loaded instance, Cloud Run's "try again") is tried again after its
    Retry-After: the resource page draws its timeline and no error stays in the banner. Before, one 503 left the
    page on "No timeline." until the next change."""
    aws = e2e.reporter("aws")
    key = f"aws/vm/busy-{uid}"
    aws.publish_now("vm", f"busy-{uid}", "RUNNING", "up").result(timeout=30)
    e2e.wait_for_status(key, "RUNNING")
    refused: list[str] = []

    def busy_once(route: Any) -> None:
        if refused:
            route.continue_()
            return
        refused.append(route.request.url)
        route.fulfill(status=503, headers={"Retry-After": "1", "Content-Type": "application/problem+json"},
                      body='{"title": "Service Unavailable", "status": 503, "detail": "busy"}')

    dashboard.open("#/")
    dashboard.page.route(re.compile(r".*/history(\?.*)?$"), busy_once)
    dashboard.page.goto(dashboard.base + f"#/resource/aws/vm/busy-{uid}")
    dashboard.wait_for('[data-testid="timeline"] svg rect.tl-seg', "the timeline, read again after the 503", 15_000)
    assert len(refused) == 1, refused
    eventually(lambda: dashboard.banner() is None, 10, lambda: f"no error left in the banner ({dashboard.diagnose(key)})")
    assert not dashboard.errors, dashboard.errors
