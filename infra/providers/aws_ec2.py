"""The AWS reference provider: EC2 instance states -> DCM vm status events.

It polls ``DescribeInstances`` and publishes a status CloudEvent for every
instance whose state changed since the last poll (the proposal's debounce: an
unchanged state is not re-sent). EC2 states map onto the DCM vm enum as the
proposal's table says, with ``stopping`` kept apart from ``stopped``:

    pending -> PROVISIONING   running -> RUNNING         stopping -> STOPPING
    stopped -> STOPPED        shutting-down -> DELETING  terminated -> DELETED

Event ids are derived from (instance, state, transition time), so a restarted
bridge that reports the same state again publishes an exact duplicate, which
the pipeline drops. Tags ``tenant`` and ``environment`` become metadata labels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator

from infra.providers.reporter import StatusReporter
from shared.contracts import timeutil

EC2_STATES = {
    "pending": "PROVISIONING",
    "running": "RUNNING",
    "stopping": "STOPPING",
    "stopped": "STOPPED",
    "shutting-down": "DELETING",
    "terminated": "DELETED",
}
LABEL_TAGS = ("tenant", "environment")
_REASON_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:UTC|GMT)\)")


@dataclass(frozen=True)
class Observation:
    instance_id: str
    state: str  # the EC2 state name
    status: str  # the DCM status
    transition_time: str
    message: str
    metadata: dict[str, str]
    resource_specific: dict[str, Any]

    @property
    def event_id(self) -> str:
        return f"{self.instance_id}/{self.state}/{self.transition_time}"


def transition_time(instance: dict[str, Any], now: datetime) -> str:
    """When the instance entered its state: from StateTransitionReason, LaunchTime, or now."""
    match = _REASON_TIME.search(instance.get("StateTransitionReason") or "")
    if match:
        return timeutil.format(datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc))
    if instance["State"]["Name"] in ("pending", "running") and instance.get("LaunchTime"):
        return timeutil.format(instance["LaunchTime"])
    return timeutil.format(now)


def observe(instance: dict[str, Any], region: str, now: datetime) -> Observation:
    state = instance["State"]["Name"]
    tags = {t["Key"].lower(): t["Value"] for t in instance.get("Tags", [])}
    cpu = instance.get("CpuOptions") or {}
    reason = instance.get("StateTransitionReason") or ""
    return Observation(
        instance_id=instance["InstanceId"],
        state=state,
        status=EC2_STATES.get(state, state.upper()),  # an unmapped state reaches DCM as UNKNOWN, raw kept
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
    reporter: StatusReporter
    region: str
    last: dict[str, tuple[str, str]] = field(default_factory=dict)

    def poll_once(self) -> list[Observation]:
        """Publish every state change since the last poll; return what was published."""
        now = timeutil.now()
        changed = []
        for instance in instances(self.ec2):
            obs = observe(instance, self.region, now)
            if self.last.get(obs.instance_id) == (obs.state, obs.transition_time):
                continue
            changed.append(obs)
        futures = [self.reporter.report("vm", o.instance_id, o.status, o.message, event_id=o.event_id,
                                        source=f"aws-ec2/{self.region}", time=o.transition_time,
                                        last_transition_time=o.transition_time, metadata=o.metadata,
                                        resource_specific=o.resource_specific) for o in changed]
        for obs, future in zip(changed, futures):
            future.result(timeout=60)  # only a published state counts as reported
            self.last[obs.instance_id] = (obs.state, obs.transition_time)
        return changed
