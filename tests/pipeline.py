"""The whole pipeline in process (issue 41): every function's real entry point (functions/<name>/main.py through
functions-framework's test client), the Firestore emulator of the functional tier, and a Pub/Sub stand-in that
delivers each published message to the subscriptions ``infra/topology.yaml`` declares for its topic.

What the stand-in does as production Pub/Sub does (the emulator does less: /work/shared/NOTES.md):
- refuses what production refuses (``tests.fakes.pubsub_refuses``: size, attribute and ordering-key limits;
  an unknown topic; a message with neither data nor attributes; an attribute value that is not a string);
- applies each subscription's ``filter`` (the emulator ignores them), a filtered-out message is acked by
  Pub/Sub itself and never reaches the function;
- pushes the push body Pub/Sub sends to the endpoint path the stack wires (``/projects/P/topics/T``), with
  ``deliveryAttempt`` where the subscription has a dead-letter policy; 102/200/201/202/204 ack, anything else
  nacks and the message is delivered again;
- keeps each ordering key's order on a subscription with message ordering: a nacked message holds back the
  later messages of its key (other keys go on);
- after ``max_delivery_attempts`` nacks, moves the message to the subscription's dead-letter topic with the
  ``CloudPubSubDeadLetter*`` attributes; a subscription without a policy keeps it (``undelivered``), as
  production keeps retrying until retention ends;
- a pull subscription (the dead-letter archive) keeps what it receives (``pulled``).

Delivery is synchronous and explicit: ``publish`` queues, ``settle`` delivers until nothing is left (what a
function publishes while handling is queued and delivered in turn). No back-off, no deadlines, no concurrency:
those need the local stack (tests/e2e).

Use: the ``pipeline`` fixture (imported by tests/functional/conftest.py), then ``pipeline.publish(topic, data,
**attributes)`` and ``pipeline.settle()``, or ``pipeline.reporter(provider)`` (the provider kit on the stand-in);
what the functions log: tests/conftest.py's ``logged``.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import re
import tempfile
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, Callable, Iterator
from unittest import mock

import orjson
import pytest
from dcm_status_contracts import timeutil
from dcm_status_sdk import BindingMode, Reporter, ReporterConfig, ReportForm
from google.api_core import exceptions as gexc

from infra.topology import SubscriptionSpec, Topology, load
from shared.runtime.logs import get_logger
from tests.fakes import FakePublisher, pubsub_refuses, runtime_of
from tests.functional.conftest import _ENTRIES, PROJECT, Checked, client_for

ACKS = frozenset({102, 200, 201, 202, 204})  # what a push endpoint answers to ack (anything else: nack)
MAX_STEPS = 10_000  # deliveries in one settle(): more is a loop (a message that never settles)


# ---- subscription filters (https://cloud.google.com/pubsub/docs/subscription-message-filter) -------------
_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>!=|=|:|\(|\)|,|-)|(?P<word>[A-Za-z_][\w.-]*))')


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"filter {text!r}: cannot read at {pos}")
        out.append(m.group(0).strip())
        pos = m.end()
    return out


def _attribute(token: str) -> str:
    if not token.startswith("attributes."):
        raise ValueError(f"filter: {token!r} is not attributes.KEY")
    return token[len("attributes."):]


class _Filter:
    """Pub/Sub's filter syntax: ``attributes.K = "v"``, ``!=``, ``attributes:K``, ``hasPrefix(attributes.K, "p")``,
    ``NOT``/``-``, ``AND``, ``OR``, parentheses. Anything else is an error, never a silent match."""

    def __init__(self, text: str):
        self.tokens, self.pos, self.attributes = _tokens(text), 0, {}
        self.text = text

    def matches(self, attributes: dict[str, str]) -> bool:
        self.pos, self.attributes = 0, attributes
        value = self._or()
        if self.pos != len(self.tokens):
            raise ValueError(f"filter {self.text!r}: unexpected {self.tokens[self.pos]!r}")
        return value

    def _next(self) -> str:
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _chain(self, op: str, operand: Callable[[], bool], combine: Callable[[bool, bool], bool]) -> bool:
        """``operand (op operand)*``, every operand parsed (and evaluated) whatever the value so far."""
        value = operand()
        while self._peek() == op:
            self._next()
            value = combine(operand(), value)
        return value

    def _or(self) -> bool:
        return self._chain("OR", self._and, lambda a, b: a or b)

    def _and(self) -> bool:
        return self._chain("AND", self._not, lambda a, b: a and b)

    def _not(self) -> bool:
        if self._peek() in ("NOT", "-"):
            self._next()
            return not self._not()
        if self._peek() == "(":
            self._next()
            value = self._or()
            assert self._next() == ")", self.text
            return value
        return self._term()

    def _term(self) -> bool:
        word = self._next()
        if word == "hasPrefix":
            _, key, _, prefix, _ = (self._next() for _ in range(5))
            return self.attributes.get(_attribute(key), "").startswith(orjson.loads(prefix))
        if word == "attributes" and self._peek() == ":":
            self._next()
            return self._next() in self.attributes
        key, op = _attribute(word), self._next()
        value = orjson.loads(self._next())
        if op == "=":
            return self.attributes.get(key) == value
        if op == "!=":
            return key in self.attributes and self.attributes[key] != value
        raise ValueError(f"filter {self.text!r}: unknown operator {op!r}")


# ---- the Pub/Sub stand-in ---------------------------------------------------------------------------
@dataclass
class Message:
    """One published message, as Pub/Sub keeps it."""

    topic: str  # the topic's name
    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    message_id: str
    publish_time: str = ""  # RFC 3339, microseconds; each later than the one before (the bus's clock)


@dataclass
class Delivery:
    subscription: SubscriptionSpec
    message: Message
    attempt: int = 0
    answers: list[int] = field(default_factory=list)  # the push endpoint's status codes, one per attempt


def push_body(delivery: Delivery) -> dict[str, Any]:
    """What Pub/Sub POSTs to a push endpoint."""
    m = delivery.message
    body: dict[str, Any] = {"message": {"data": base64.b64encode(m.data).decode(), "attributes": m.attributes,
                                        "messageId": m.message_id, "publishTime": m.publish_time},
                            "subscription": f"projects/{PROJECT}/subscriptions/{delivery.subscription.name}"}
    if m.ordering_key:
        body["message"]["orderingKey"] = m.ordering_key
    if delivery.subscription.dead_letter_topic:  # Pub/Sub counts attempts only under a dead-letter policy
        body["deliveryAttempt"] = delivery.attempt
    return body


def refuses(topics: set[str], topic: str, data: bytes, attributes: dict[str, Any], ordering_key: str) -> Exception | None:
    """What production Pub/Sub (or its client) answers this publish with, or None."""
    if topic not in topics:
        return gexc.NotFound(f"Resource not found (resource={topic})")
    if any(not isinstance(v, str) for v in attributes.values()):
        return TypeError("All attributes being published to Pub/Sub must be sent as text strings.")
    if not data and not attributes:
        return gexc.InvalidArgument("A message must have at least one of data or attributes")
    refused = pubsub_refuses(data, attributes, ordering_key)
    return gexc.InvalidArgument(refused) if refused else None


class Bus(FakePublisher):
    """The publisher every function is given: records what is published (``FakePublisher``'s ``messages``,
    ``on``, ``normalized``) and queues its delivery to the topic's subscriptions."""

    def __init__(self, topology: Topology, push: Callable[[str, str, dict[str, Any]], int]):
        super().__init__()
        self.topology, self._push = topology, push
        self.filters = {s.name: _Filter(s.filter) for s in topology.subscriptions if s.filter}
        self.queue: deque[Delivery] = deque()
        self.delivered: list[Delivery] = []  # every settled delivery, acked or dead-lettered
        self.filtered: list[Delivery] = []  # acked by Pub/Sub itself: the subscription's filter refused them
        self.undelivered: list[Delivery] = []  # nacked max_delivery_attempts times, no dead-letter policy
        self.pulled: dict[str, list[Message]] = {}
        self._ids = itertools.count(1)
        self._last = timeutil.now()

    def forget(self) -> None:
        """Nothing queued, nothing recorded (one pipeline for many inputs, e.g. hypothesis' examples)."""
        for kept in (self.messages, self.queue, self.delivered, self.filtered, self.undelivered, self.pulled):
            kept.clear()

    def publish(self, topic: str, data: bytes, ordering_key: str = "", retry: Any = None, timeout: Any = None,
                **attributes: Any) -> Future:
        name = topic.rsplit("/", 1)[-1]
        refused = refuses({t.name for t in self.topology.topics}, name, data, attributes, ordering_key)
        if refused:
            future: Future = Future()
            future.set_exception(refused)
            return future
        future = super().publish(topic, data, ordering_key, retry, timeout, **attributes)
        if future.exception() is None:  # its id is the bus's: unique for the bus's life (forget() or not)
            message = Message(name, bytes(data), dict(attributes), ordering_key, str(next(self._ids)), self._clock())
            self.enqueue(message)
            future = Future()
            future.set_result(message.message_id)
        return future

    def _clock(self) -> str:
        """Now, as Pub/Sub stamps a publish: strictly later than the last (two publishes never tie)."""
        self._last = max(timeutil.now(), self._last + timedelta(microseconds=1))
        return timeutil.format(self._last)

    def enqueue(self, message: Message) -> None:
        for sub in (s for s in self.topology.subscriptions if s.topic == message.topic):
            delivery = Delivery(sub, message)
            if sub.name in self.filters and not self.filters[sub.name].matches(message.attributes):
                self.filtered.append(delivery)
            elif sub.push is None:
                self.pulled.setdefault(sub.name, []).append(message)
            else:
                self.queue.append(delivery)

    def settle(self, only: tuple[str, ...] | None = None) -> list[Delivery]:
        """Deliver until nothing is queued (``only``: to these functions; the others' stay queued, in order);
        the deliveries settled now, in order."""
        start, held = len(self.delivered), deque()
        for _ in range(MAX_STEPS):
            if not self.queue:
                self.queue.extend(held)
                return self.delivered[start:]
            delivery = self.queue.popleft()
            if only is None or delivery.subscription.push in only:
                self._deliver(delivery)
            else:
                held.append(delivery)
        raise AssertionError(f"pipeline did not settle in {MAX_STEPS} deliveries: {self.queue[0]}")

    def _deliver(self, delivery: Delivery) -> None:
        delivery.attempt += 1
        status = self._push(delivery.subscription.push, delivery.message.topic, push_body(delivery))
        delivery.answers.append(status)
        if status in ACKS:
            self.delivered.append(delivery)
        elif delivery.attempt < delivery.subscription.max_delivery_attempts:
            self._again(delivery)
        elif delivery.subscription.dead_letter_topic:
            self.delivered.append(delivery)
            self._dead_letter(delivery)
        else:
            self.undelivered.append(delivery)

    def _again(self, delivery: Delivery) -> None:
        """A nacked message comes again; on an ordered subscription, before the later messages of its key."""
        key, sub = delivery.message.ordering_key, delivery.subscription
        if key and sub.enable_message_ordering:
            for i, queued in enumerate(self.queue):
                if queued.subscription == sub and queued.message.ordering_key == key:
                    self.queue.insert(i, delivery)
                    return
        self.queue.append(delivery)

    def _dead_letter(self, delivery: Delivery) -> None:
        m, sub = delivery.message, delivery.subscription
        attributes = {**m.attributes, "CloudPubSubDeadLetterSourceDeliveryCount": str(delivery.attempt),
                      "CloudPubSubDeadLetterSourceSubscription": sub.name,
                      "CloudPubSubDeadLetterSourceSubscriptionProject": PROJECT,
                      "CloudPubSubDeadLetterSourceTopicPublishTime": m.publish_time}
        self.publish(f"projects/{PROJECT}/topics/{sub.dead_letter_topic}", m.data, **attributes).result()

    def take(self, function: str) -> list[Delivery]:
        """The deliveries queued for ``function``, taken off the queue (a test applies them when it chooses:
        ``again``)."""
        taken = [d for d in self.queue if d.subscription.push == function]
        self.queue = deque(d for d in self.queue if d.subscription.push != function)
        return taken

    def again(self, deliveries: list[Delivery]) -> None:
        """These messages delivered (once more), each a new delivery of the same message, as Pub/Sub redelivers."""
        self.queue.extend(Delivery(d.subscription, d.message) for d in deliveries)


class Subscriptions:
    """What `dcm-status` asks Pub/Sub's SubscriberClient (``dlq replay``: a subscription's topic), answered from
    the topology's subscriptions, as the stack's Pub/Sub would."""

    def __init__(self, topology: Topology):
        self.topology = topology

    def get_subscription(self, subscription: str) -> Any:
        name = subscription.rsplit("/", 1)[-1]
        spec = next((s for s in self.topology.subscriptions if s.name == name), None)
        if spec is None:
            raise gexc.NotFound(f"Subscription does not exist (resource={name})")
        return SimpleNamespace(name=subscription, topic=f"projects/{PROJECT}/topics/{spec.topic}")

    def close(self) -> None:
        pass


# ---- the pipeline -------------------------------------------------------------------------------------
_CLIENTS: dict[str, Any] = {}  # function -> its test client and entry, created once per session


def _client(function: str) -> tuple[Any, Any]:
    if function not in _CLIENTS:
        client = client_for(function, "http" if function == "api" else "cloudevent")
        _CLIENTS[function] = (client, _ENTRIES[-1])
    return _CLIENTS[function]


class Pipeline:
    """The functions, their topology's subscriptions and one Firestore; ``env`` over the topology's settings."""

    def __init__(self, firestore, providers: tuple[str, ...] | None = None, **env: str):
        self.topology = load(providers)
        self.db = firestore
        self.bus = Bus(self.topology, self.push)
        self.runtime = runtime_of(publisher=self.bus, firestore=firestore, **{
            **self.topology.env(), "DCM_PROJECT": PROJECT, "DCM_FEED_SETTLE_SECONDS": "0", "DCM_STREAM_SECONDS": "0.5",
            **env})
        self.reporters: dict[tuple[str, BindingMode], Reporter] = {}
        self._bound: set[str] = set()

    def bind(self, function: str):
        """``function``'s test client, the function running on this pipeline's runtime (bound once: the
        handler it builds is kept, as an instance keeps it)."""
        client, entry = _client(function)
        if function not in self._bound:
            entry.bind(self.runtime)
            self._bound.add(function)
        return client

    def reporter(self, provider: str, binding: BindingMode = BindingMode.STRUCTURED) -> Reporter:
        """The provider kit for ``provider`` publishing on this pipeline (January form, as tests/e2e's)."""
        if (provider, binding) not in self.reporters:
            config = ReporterConfig(PROJECT, provider, form=ReportForm.JANUARY, binding=binding)
            self.reporters[provider, binding] = Reporter(config, self.bus)
        return self.reporters[provider, binding]

    def cli(self, *args: str, local: bool = False, input: str | None = None) -> Any:
        """``dcm-status ARGS`` in process (click's runner) on this pipeline: its Firestore, its Pub/Sub stand-in,
        no local stack (an empty state directory); the result (exit_code, stdout, stderr); ``input``: what is
        typed at its prompts. ``local``: as against a running local stack, whose rules the commands then apply
        (``callbacks``: loopback hooks allowed, the keyring a file of the state directory), the stack being this
        pipeline (no process of it runs)."""
        from click.testing import CliRunner

        from infra.cli import cli
        from infra.cli.common import Connection

        with tempfile.TemporaryDirectory() as state, \
                mock.patch.object(Connection, "firestore", lambda conn: self.db), \
                mock.patch.object(Connection, "publisher", lambda conn, ordering=False: self.bus), \
                mock.patch("google.cloud.pubsub_v1.SubscriberClient", lambda *a, **k: Subscriptions(self.topology)), \
                self._as_local_stack(local):
            return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False,
                                      env={"DCM_PROJECT": PROJECT, "DCM_STATE_DIR": state, "COLUMNS": "80"})

    @contextlib.contextmanager
    def _as_local_stack(self, local: bool) -> Iterator[None]:
        """When ``local``, `dcm-status` finds a running local stack of this pipeline's providers, all well."""
        if not local:
            yield
            return
        from infra.local.stack import LocalStack
        from infra.local.state import StackState

        none = {"pid": 0, "port": 0}
        running = StackState(PROJECT, none, none, providers=sorted(self.topology.providers))
        with mock.patch.object(LocalStack, "running", lambda stack: running), \
                mock.patch.object(LocalStack, "unwell_functions", lambda stack, state: []), \
                mock.patch.object(LocalStack, "client_env", lambda stack, state: {}):
            yield

    def close(self) -> None:
        for reporter in self.reporters.values():
            reporter.close()

    def push(self, function: str, topic: str, body: dict[str, Any]) -> int:
        """One push delivery to ``function``'s endpoint; its status code."""
        return self.bind(function).post(f"/projects/{PROJECT}/topics/{topic}", json=body).status_code

    def topic(self, name: str) -> str:
        """A topic's path: ``name`` in full, or the topology's key (``changed``) or ``ingress:aws``."""
        key, _, provider = name.partition(":")
        if not any(t.key == key for t in self.topology.topics):  # a name (maybe of no topic: Pub/Sub says so)
            return f"projects/{PROJECT}/topics/{name}"
        return f"projects/{PROJECT}/topics/{self.topology.topic(key, provider or None)}"

    def publish(self, topic: str, data: bytes, ordering_key: str = "", **attributes: Any) -> str:
        """Publish as a client would (refused as production refuses: raises); the message is queued."""
        return self.bus.publish(self.topic(topic), data, ordering_key, **attributes).result()

    def settle(self, only: tuple[str, ...] | None = None) -> list[Delivery]:
        return self.bus.settle(only)

    def send(self, topic: str, data: bytes, ordering_key: str = "", **attributes: Any) -> list[Delivery]:
        """Publish, then settle: every delivery it caused."""
        self.publish(topic, data, ordering_key, **attributes)
        return self.settle()

    @property
    def api(self) -> Checked:
        """The api on this pipeline's Firestore, every answer checked against the OpenAPI document."""
        return Checked(self.bind("api"))

    def resource(self, key: str) -> dict[str, Any] | None:
        from dcm_status_contracts.model import ResourceKey

        snap = self.db.collection("resources").document(ResourceKey.parse(key).doc_id).get()
        return snap.to_dict() if snap.exists else None


def pipeline_of(firestore, providers: tuple[str, ...] | None = None, **env: str) -> Iterator[Pipeline]:
    """A module's own ``pipeline`` fixture: other providers than the topology's, other settings."""
    get_logger("pipeline")  # the functions' loggers configured before any test handler (conftest's logged)
    built = Pipeline(firestore, providers, **env)
    yield built
    built.close()


@pytest.fixture
def pipeline(firestore) -> Iterator[Pipeline]:
    """The in-process pipeline on this test's (emptied) Firestore emulator, the topology's providers."""
    yield from pipeline_of(firestore)
