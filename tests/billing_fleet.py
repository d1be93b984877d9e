"""Billing's known lifecycles (issue 41: shared by tests/functional/test_billing.py, which checks the usage they
give, and tests/e2e/test_charts.py, which draws it): the status updates of seven resources over three days (and
the change events upsert announces for them), and the billable seconds each gives per UTC day, written out by
hand."""

from __future__ import annotations

from dataclasses import dataclass

from dcm_status_contracts import status_changed
from dcm_status_contracts import timeutil
from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.status_update import StatusUpdate

from shared.upsert.decide import resource_document

CHANGED = "dcm-status-changed"
NORMALIZED = "dcm-status-normalized-{provider}"  # upsert's lanes (infra/topology.yaml)
START, END = "2026-03-01T00:00:00Z", "2026-03-04T00:00:00Z"
D1, D2, D3 = "2026-03-01", "2026-03-02", "2026-03-03"
H = 3600


def status_update(key: ResourceKey, status: str, at: str, event_id: str, metadata: dict[str, str]) -> StatusUpdate:
    at = timeutil.canonical(at)
    return StatusUpdate(
        key=key, status=status, raw_status=status.lower(), status_recognized=True, message=f"{status.lower()}",
        reason=None, last_transition_time=at, observed_at=at, metadata=dict(metadata), resource_specific={},
        event_id=event_id, event_source=f"{key.provider}-provider",
        event_type=f"dcm.providers.{key.provider}.{key.resource_type}.{key.resource_id}.status", event_subject=None,
        dataschema=f"https://schemas.dcm.org/{key.resource_type}/status-v1.json", schema_defaulted=False,
        ingress_message_id=event_id, ingress_topic=None, received_at=timeutil.now_str())


@dataclass
class Resource:
    """One resource's lifecycle and the change events upsert would emit for it."""

    key: ResourceKey
    metadata: dict[str, str]
    steps: list[tuple[str, str]]  # (transition time, status), in time order: announced as changes
    late: list[tuple[str, str]]  # announced late (refused as stale for the current state)
    expected: dict[str, int]  # UTC day -> billable seconds in [START, END)

    def updates(self) -> list[StatusUpdate]:
        """The status updates upsert is given (steps in time order, then the late ones): it records each one's
        transition with its ledger entry, and announces the change events ``events`` lists."""
        return ([status_update(self.key, status, at, f"{self.key.resource_id}-{i}", self.metadata)
                 for i, (at, status) in enumerate(self.steps)]
                + [status_update(self.key, status, at, f"{self.key.resource_id}-late-{i}", self.metadata)
                   for i, (at, status) in enumerate(self.late)])

    def events(self) -> list[status_changed.ChangeEvent]:
        out, old = [], None
        for i, (at, status) in enumerate(self.steps):
            upd = status_update(self.key, status, at, f"{self.key.resource_id}-{i}", self.metadata)
            new = resource_document(upd, upd.observed_at)
            out.append(status_changed.build(upd, old, new, late=False))
            old = new
        for i, (at, status) in enumerate(self.late):
            upd = status_update(self.key, status, at, f"{self.key.resource_id}-late-{i}", self.metadata)
            out.append(status_changed.build(upd, None, resource_document(upd, upd.observed_at), late=True))
        return out


def fleet(uid: str, tenant: str) -> list[Resource]:
    eu = {"tenant": tenant, "region": "eu-west", "environment": "prod"}
    us = {"tenant": tenant, "region": "us-east"}

    def R(provider, rtype, name, metadata, steps, expected, late=()):
        return Resource(ResourceKey(provider, rtype, f"{name}-{uid}"), metadata, list(steps), list(late), expected)

    return [
        # stop, restart across midnight, deletion
        R("aws", "vm", "vm-a", eu, [(f"{D1}T08:00:00Z", "PROVISIONING"), (f"{D1}T09:00:00Z", "RUNNING"),
                                    (f"{D1}T17:30:00Z", "STOPPED"), (f"{D1}T22:00:00Z", "RUNNING"),
                                    (f"{D2}T06:15:00Z", "DELETED")],
          {D1: 8 * H + 30 * 60 + 2 * H, D2: 6 * H + 15 * 60}),
        # stuck RUNNING: counted up to the report's end
        R("azure", "container", "ctr-b", us, [(f"{D2}T10:00:00Z", "PENDING"), (f"{D2}T10:00:30Z", "RUNNING")],
          {D2: 13 * H + 59 * 60 + 30, D3: 24 * H}),
        # billable through UPDATING and DEGRADED
        R("kubernetes", "cluster", "cl-c", eu, [(f"{D1}T00:00:00Z", "CREATING"), (f"{D1}T01:00:00Z", "ACTIVE"),
                                                (f"{D1}T12:00:00Z", "UPDATING"), (f"{D2}T00:00:00Z", "DEGRADED"),
                                                (f"{D2}T03:00:00Z", "ACTIVE"), (f"{D3}T12:00:00Z", "DELETED")],
          {D1: 23 * H, D2: 24 * H, D3: 12 * H}),
        # storage is billed while it exists
        R("vmware", "volume", "vol-d", us, [(f"{D1}T10:00:00Z", "CREATING"), (f"{D1}T10:05:00Z", "AVAILABLE"),
                                            (f"{D3}T09:00:00Z", "DELETING"), (f"{D3}T09:10:00Z", "DELETED")],
          {D1: 13 * H + 55 * 60, D2: 24 * H, D3: 9 * H}),
        # one second before the window ends
        R("aws", "network", "net-e", eu, [(f"{D3}T23:00:00Z", "CREATING"), (f"{D3}T23:59:59Z", "ACTIVE")],
          {D3: 1}),
        # stuck in a non-billable state
        R("azure", "vm", "vm-f", eu, [(f"{D1}T12:00:00Z", "PROVISIONING")], {}),
        # late changes that belong before already-announced ones
        R("vmware", "vm", "vm-g", us, [(f"{D1}T10:00:00Z", "RUNNING"), (f"{D2}T00:00:00Z", "DELETED")],
          {D1: 12 * H}, late=[(f"{D1}T12:00:00Z", "STOPPED"), (f"{D1}T14:00:00Z", "RUNNING")]),
    ]
