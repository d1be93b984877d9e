"""``dcm-status trace EVENT_ID``: one event's path through the local stack, as a tree, from the spans its
functions wrote under the state directory (shared/runtime/tracing.py, docs/tracing.md).

Each line is one hop: the function, how long its message was queued (from its publish to the start of the
span: time in Pub/Sub), how long it ran, and what it says of the event (key, outcome, reason). The
root is the provider's publish, a span the platform does not record (the SDK's context, or the
provider's own span): its time is the ingress message's publish time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Iterator

import click
import orjson
from dcm_status_contracts import timeutil

from infra.local.stack import LocalStack
from shared.runtime.tracing import PUBLISHED_AT, SPAN_FILE_SUFFIX


class NoTrace(click.ClickException):
    """No span names the event: one line on stderr, exit 1."""


@dataclass(frozen=True)
class Span:
    record: dict[str, Any]

    @property
    def id(self) -> str:
        return self.record["spanId"]

    @property
    def parent(self) -> str | None:
        return self.record.get("parentSpanId")

    @property
    def attributes(self) -> dict[str, Any]:
        return self.record.get("attributes") or {}

    @property
    def start_ns(self) -> int:
        return int(self.record["start"])

    @property
    def duration_ms(self) -> float:
        return (int(self.record["end"]) - self.start_ns) / 1e6

    def published_ns(self) -> int | None:
        """When the message this span handled was published (ns since the epoch), if it says."""
        value = self.attributes.get(PUBLISHED_AT)
        return int(_parse(value).timestamp() * 1e9) if value else None

    def timing(self, parent: "Span | None") -> str:
        """How long the message waited in Pub/Sub (publish to this span's start) and how long the span ran; a
        span handling no message (a webhook call): when it started in its parent."""
        ran = f"ran {self.duration_ms:.1f} ms"
        published = self.published_ns()
        if published is not None:
            return f"queued {(self.start_ns - published) / 1e6:.1f} ms, {ran}"
        if parent is not None:
            return f"started +{(self.start_ns - parent.start_ns) / 1e6:.1f} ms, {ran}"
        return ran


def _parse(value: str) -> datetime:
    """An RFC 3339 time with any number of fractional digits (Pub/Sub's publishTime has nanoseconds)."""
    head, dot, rest = value.partition(".")
    if not dot:
        return timeutil.parse(value)
    digits = "".join(c for c in rest if c.isdigit())
    return timeutil.parse(f"{head}.{digits[:6]}{rest[len(digits):]}")


def read_spans(directory: Path) -> list[Span]:
    """Every span the local functions wrote; a line cut short (a process killed mid-write) is skipped."""
    spans = []
    for path in sorted(directory.glob(f"*{SPAN_FILE_SUFFIX}")):
        for line in path.read_bytes().splitlines():
            try:
                spans.append(Span(orjson.loads(line)))
            except orjson.JSONDecodeError:
                continue
    return spans


def traces_of(spans: Iterable[Span], event_id: str) -> list[str]:
    """The trace ids of the spans that name the event (its CloudEvent id, or its change event's id)."""
    return sorted({s.record["traceId"] for s in spans if s.attributes.get("dcm.event_id") == event_id})


def _describe(span: Span, parent: Span | None) -> str:
    a = span.attributes
    said = [a.get("dcm.key"), a.get("dcm.outcome") or a.get("dcm.ack"),
            f"reason {a['dcm.reason']}" if a.get("dcm.reason") else None,
            f"http {a['http.response.status_code']}" if "http.response.status_code" in a else None]
    name = span.record.get("service") or span.record["name"]
    if span.record["name"] != name:
        name = f"{name}/{span.record['name']}"
    return f"{name}  {span.timing(parent)}  {'  '.join(str(s) for s in said if s)}".rstrip()


def render(spans: list[Span], trace_id: str) -> Iterator[str]:
    """The trace as a tree: the provider's publish, then each hop under the one that published to it."""
    mine = sorted((s for s in spans if s.record["traceId"] == trace_id), key=lambda s: s.start_ns)
    by_id = {s.id: s for s in mine}
    children: dict[str | None, list[Span]] = {}
    for s in mine:
        children.setdefault(s.parent if s.parent in by_id else None, []).append(s)
    roots = children.get(None, [])
    first = next((s for s in roots if s.published_ns() is not None), None)
    published = first.attributes[PUBLISHED_AT] if first else "?"
    provider = next((s.attributes["dcm.provider"] for s in mine if s.attributes.get("dcm.provider")), "?")
    yield f"trace {trace_id}"
    yield f"publish  provider {provider}  at {published}"

    def walk(span: Span, parent: Span | None, prefix: str, last: bool) -> Iterator[str]:
        yield f"{prefix}{'└─ ' if last else '├─ '}{_describe(span, parent)}"
        kids = children.get(span.id, [])
        for i, kid in enumerate(kids):
            yield from walk(kid, span, prefix + ("   " if last else "│  "), i == len(kids) - 1)

    for i, root in enumerate(roots):
        yield from walk(root, None, "", i == len(roots) - 1)


@click.command()
@click.argument("event_id")
def trace(event_id: str) -> None:
    """Print one event's path through the local stack as a tree, with each hop's latency.

    EVENT_ID is the CloudEvent id the provider sent (what the SDK's report() returns, the
    --event-id of `dcm-status publish`) or a change event's id.

    Example: dcm-status trace evt-20250101-0001
    """
    spans = read_spans(LocalStack().paths.trace_dir)
    found = traces_of(spans, event_id)
    if not found:
        raise NoTrace(f"no span names event {event_id!r} under {LocalStack().paths.trace_dir} (spans are exported "
                      "about every 200 ms; is it an event of this local stack?)")
    for i, trace_id in enumerate(found):
        if i:
            click.echo("")
        for line in render(spans, trace_id):
            click.echo(line)
