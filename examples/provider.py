"""A complete provider on the kit: poll the cloud, map its states, report what changed."""
import itertools
import os
import sys
import time

from dcm_status_sdk import MappingTable, PublishRefused, Reporter, ReporterConfig, ResourceState


def list_vms() -> list[tuple[str, str, str]]:
    """Your cloud's API: (id, raw state, state reason) of every VM."""
    return [("vm-1", "running", ""), ("vm-2", "terminated", "Server.SpotInstanceTermination")]


ec2 = MappingTable.load("aws-ec2")
config = ReporterConfig(project=os.environ["DCM_PROJECT"], provider=os.environ.get("PROVIDER", "aws"), rate_per_second=50)
try:
    with Reporter(config) as reporter:  # leaving the block publishes what is still queued
        for poll in itertools.count():
            vms = list_vms()
            if poll % 10 == 0:  # now and then the whole inventory: the platform learns what disappeared
                reporter.resync([ResourceState("vm", i, ec2.map(state=s, stateReason=r)) for i, s, r in vms])
                seen = {vm_id: state for vm_id, state, _ in vms}
            for vm_id, state, reason in vms:
                if seen.get(vm_id) != state:
                    reporter.report("vm", vm_id, ec2.map(state=state, stateReason=reason), f"the VM is {state}")
                    seen[vm_id] = state
            if poll + 1 == int(os.environ.get("POLLS", "0")):  # POLLS=1: poll once and exit
                break
            time.sleep(15)
except PublishRefused as refused:  # no topic, no permission, no credentials: retrying cannot help
    sys.exit(f"error: {refused}")  # one line on stderr (what to do included), exit code 1
