"""Cloud Native Events end to end: a provider on the kit publishes PTP lock states and metrics for
two nodes in one event, then metrics only, then a change; every resource ends as reported."""

from __future__ import annotations

from dcm_status_sdk import DataType, Reporter, ReporterConfig, Value

from tests.e2e.conftest import E2EStack, wait_until

EVENT = "event.sync.ptp-status.ptp-state-change"


def test_a_ptp_producer_on_the_kit_reports_several_clocks_per_event(e2e: E2EStack, uid: str):
    n1, n2 = (f"/cluster/node/{n}-{uid}/sync/ptp-status/lock-state" for n in ("n1", "n2"))
    key1, key2 = (f"aws/sync{a}" for a in (n1, n2))
    with Reporter(ReporterConfig(project=e2e.project, provider="aws")) as reporter:
        reporter.report_values([Value(n1, DataType.NOTIFICATION, "enumeration", "LOCKED"),
                                Value(n1, DataType.METRIC, "decimal64.3", -5),
                                Value(n2, DataType.NOTIFICATION, "enumeration", "FREERUN")], event_type=EVENT, source=n1)
        e2e.wait_for_status(key1, "LOCKED")
        e2e.wait_for_status(key2, "FREERUN")
        reporter.report_values([Value(n1, DataType.METRIC, "decimal64.3", -9)], event_type=EVENT, source=n1)
        wait_until(lambda: e2e.resource(key1)["resourceSpecific"]["metrics"] == {"decimal64.3": -9.0},
                   what="the new metric stored")
        assert e2e.resource(key1)["status"] == "LOCKED"  # metrics only: the status stays
        reporter.report_values([Value(n1, DataType.NOTIFICATION, "enumeration", "HOLDOVER")], event_type=EVENT,
                               source=n1)
    held = e2e.wait_for_status(key1, "HOLDOVER")
    assert held["updates"] == 3 and e2e.resource(key2)["updates"] == 1
    shown = e2e.cli("get", key1, "--json")
    assert '"HOLDOVER"' in shown.stdout
