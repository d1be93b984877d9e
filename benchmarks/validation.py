"""Ingest validation cost, µs per event: our hot path against the naive one, in the same run.

- ours:  shared.ingest.normalize.normalize_message (orjson + compiled fastjsonschema
         envelope and data schemas, identity, provider isolation, status enum);
- naive: cloudevents.http.from_http + jsonschema.validate(data, schema), which
         rebuilds the validator on every call;
- floor: orjson.loads + the compiled envelope and data schemas, nothing else.

Prints figures; asserts nothing (run: make bench). No target of its own any more (issue 32): validation is
tens of µs of what ingest spends per event, inside ingest's target (within 2x of its minimal handler's CPU,
benchmarks/pipeline.py); the figures stay, to see what validation costs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("DCM_PROJECT", "bench")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fastjsonschema  # noqa: E402
import jsonschema  # noqa: E402
import orjson  # noqa: E402
from cloudevents.http import from_http  # noqa: E402
from dcm_status_contracts.errors import Rejected  # noqa: E402
from dcm_status_contracts.model import PubSubMessage  # noqa: E402
from dcm_status_contracts.schemas import ENVELOPE_URI, registry  # noqa: E402
from dcm_status_contracts.pubsub_binding import to_message  # noqa: E402
from dcm_status_contracts.status_report import build_event  # noqa: E402

from shared.ingest.normalize import normalize_message  # noqa: E402
from shared.runtime import settings  # noqa: E402

ROUNDS, N = 5, 2000


def events(valid: bool) -> list[tuple[bytes, dict]]:
    out = []
    for i in range(N):
        event = build_event("aws", "vm", f"i-{i:06d}", "RUNNING" if valid else 7, "VM is running and healthy.",
                            time="2026-01-01T00:00:00Z", last_transition_time="2026-01-01T00:00:00Z",
                            metadata={"region": "eu-west-1", "environment": "prod", "tenant": "acme"},
                            resource_specific={"cpus": 4, "memoryMb": 8192, "image": "debian-12",
                                               "ipAddress": "10.0.0.12", "hostname": f"web-{i}.example.com"})
        out.append(to_message(event))
    return out


def ours(msgs):
    s = settings.from_env()
    for data, attrs in msgs:
        try:
            normalize_message(PubSubMessage(data, attrs, "1", None, "dcm-status-ingress-aws"), s)
        except Rejected:
            pass


def naive(msgs, schema):
    for data, attrs in msgs:
        event = from_http({"content-type": "application/cloudevents+json"}, data)
        try:
            jsonschema.validate(event.data, schema)
        except jsonschema.ValidationError:
            pass


def floor(msgs):
    """The least any validating ingest does: parse the JSON and run the compiled envelope and data schemas."""
    reg = registry()
    envelope = reg.get(ENVELOPE_URI).check
    data_schema = reg.current["vm"].compiled.check
    for data, _ in msgs:
        event = orjson.loads(data)
        try:
            envelope(event)
            data_schema(event["data"])
        except fastjsonschema.JsonSchemaException:
            pass


def timeit(fn, *args) -> float:
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn(*args)
        samples.append((time.perf_counter() - start) / N * 1e6)
    return statistics.median(samples)


def main() -> None:
    schema = registry().current["vm"].compiled.schema
    resolved = json.loads(json.dumps(schema))  # the naive path inlines the common schema
    resolved["allOf"] = [registry().get("https://schemas.dcm.org/common/status-v1.json").schema]
    size = len(events(True)[0][0])
    print(f"ingest validation, {N} events of {size} bytes, median of {ROUNDS} rounds")
    for label, valid in (("valid", True), ("invalid", False)):
        msgs = events(valid)
        fast, slow, least = timeit(ours, msgs), timeit(naive, msgs, resolved), timeit(floor, msgs)
        print(f"  {label:<8} ours {fast:7.1f} µs/event   floor (orjson + fastjsonschema) {least:6.1f} µs = "
              f"{fast / least:4.1f}x the floor   naive {slow:7.1f} µs = {slow / fast:5.1f}x slower than ours")


if __name__ == "__main__":
    main()
