"""The AWS reference provider, built on the provider kit: EC2 instance states -> DCM vm status.

It polls ``DescribeInstances`` and reports every instance whose state changed since the
last poll through a ``dcm_status_sdk.Reporter`` (which checks, debounces, rate limits and
retries). The kit's ``aws-ec2`` mapping table maps the state name, with the state reason
code as context (``terminated`` by a server failure is FAILED, by a user DELETED; see
docs/mappings.md). Every ``resync_every``-th poll republishes the whole inventory as one
resync batch, so the platform can tell which instances disappeared.

Event ids of live reports are derived from (instance, state, transition time), so a
restarted bridge that reports the same state again publishes an exact duplicate, which the
pipeline drops. Tags ``tenant`` and ``environment`` become metadata labels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

from dcm_status_contracts import timeutil
from dcm_status_sdk import MappedStatus, MappingTable, Reporter, ResourceState

LABEL_TAGS = ("tenant", "environment")
_REASON_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:UTC|GMT)\)")


@dataclass(frozen=True)
class Observation:
    instance_id: str
    state: str  # the EC2 state name
    status: MappedStatus  # the DCM status, with the raw state it came from
    transition_time: str
    message: str
    metadata: dict[str, str]
    resource_specific: dict[str, Any]

    @property
    def event_id(self) -> str:
        return f"{self.instance_id}/{self.state}/{self.transition_time}"

    def resource_state(self) -> ResourceState:
        return ResourceState("vm", self.instance_id, self.status, self.message, metadata=self.metadata,
                             resource_specific=self.resource_specific, last_transition_time=self.transition_time)


def transition_time(instance: dict[str, Any], now: datetime) -> str:
    """When the instance entered its state: from StateTransitionReason, LaunchTime, or now."""
    match = _REASON_TIME.search(instance.get("StateTransitionReason") or "")
    if match:
        return timeutil.format(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc))
    if instance["State"]["Name"] in ("pending", "running") and instance.get("LaunchTime"):
        return timeutil.format(instance["LaunchTime"])
    return timeutil.format(now)


def observe(instance: dict[str, Any], region: str, now: datetime, table: MappingTable) -> Observation:
    state = instance["State"]["Name"]
    tags = {t["Key"].lower(): t["Value"] for t in instance.get("Tags", [])}
    cpu = instance.get("CpuOptions") or {}
    reason = instance.get("StateTransitionReason") or ""
    return Observation(
        instance_id=instance["InstanceId"],
        state=state,
        status=table.map(state=state, stateReason=(instance.get("StateReason") or {}).get("Code", "")),
        transition_time=transition_time(instance, now),
        message=f"EC2 instance is {state}" + (f": {reason}" if reason else ""),
        metadata={"region": region, "zone": (instance.get("Placement") or {}).get("AvailabilityZone", ""),
                  **{k: tags[k] for k in LABEL_TAGS if k in tags}},
        resource_specific={k: v for k, v in {
            "cpus": cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 1) if cpu else None,
            "image": instance.get("ImageId"),
            "ipAddress": instance.get("PrivateIpAddress"),
            "hostname": instance.get("PrivateDnsName"),
            "instanceType": instance.get("InstanceType"),
        }.items() if v is not None},
    )


def instances(ec2: Any) -> Iterator[dict[str, Any]]:
    for page in ec2.get_paginator("describe_instances").paginate():
        for reservation in page["Reservations"]:
            yield from reservation["Instances"]


@dataclass
class Ec2Bridge:
    ec2: Any  # a boto3 EC2 client
    reporter: Reporter
    region: str
    resync_every: int = 10  # polls; 0: never (OSAC republishes everything every 10 polls too)
    table: MappingTable = field(default_factory=lambda: MappingTable.load("aws-ec2"))
    last: dict[str, tuple[str, str]] = field(default_factory=dict)
    polls: int = 0

    def poll_once(self) -> list[Observation]:
        """Report every state change since the last poll (every instance on a resync poll); return them."""
        now = timeutil.now()
        seen = [observe(instance, self.region, now, self.table) for instance in instances(self.ec2)]
        self.polls += 1
        if self.resync_every and self.polls % self.resync_every == 0 and seen:
            self.reporter.resync([o.resource_state() for o in seen], taken_at=timeutil.format(now))  # listed after it
            changed = seen
        else:
            changed = [o for o in seen if self.last.get(o.instance_id) != (o.state, o.transition_time)]
            for o in changed:
                s = o.resource_state()
                self.reporter.report(s.resource_type, s.resource_id, s.status, s.message, metadata=s.metadata,
                                     resource_specific=s.resource_specific, time=o.transition_time,
                                     last_transition_time=o.transition_time, event_id=o.event_id)
        for o in changed:
            self.last[o.instance_id] = (o.state, o.transition_time)
        return changed
