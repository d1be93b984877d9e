"""The one wrapper every function uses: decode -> handle -> ack or raise.

- return            -> HTTP 200 -> Pub/Sub acks;
- raise Rejected    -> the message can never succeed: the original goes to the
  dead-letter topic with its reason, then we ack (a malformed push delivery
  included: its raw body is dead-lettered as ``malformed_push``);
- raise (any other) -> HTTP 500 -> Pub/Sub redelivers (Transient, or a bug:
  logged once, as one JSON line with its stack as a field; after max delivery
  attempts Pub/Sub dead-letters the message as ``delivery_exhausted``, never lost).

The dead-letter function itself never publishes into its own topic: a
rejection there is logged and acked, and the dead-letter archive subscription
keeps the message for its retention period.

The ``Runtime`` (settings and clients) is built from the environment on the
first request and handed to the use case's ``build``; tests ``bind`` their own.
The settings are checked once before, when the function is created (at the
import of its ``main.py``): a misconfigured function (a pushed one without its
push authentication settings, local mode on Cloud Run, any malformed setting)
logs one JSON line saying why and raises ``ConfigError``, so it never starts
and Cloud Run never sends its new revision traffic.
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Callable, Mapping

import flask
import orjson
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import ConfigError, Rejected, Transient
from dcm_status_contracts.ingress import Arrival
from dcm_status_contracts.model import PubSubMessage
from opentelemetry import trace

from shared.runtime import auth, push, tracing
from shared.runtime import settings as settings_module
from shared.runtime.clients import Runtime
from shared.runtime.logs import get_logger
from shared.runtime.publishing import publish

Handler = Callable[[PubSubMessage], Any]
log = get_logger("entrypoint")
ACK = "dcm.ack"  # the span attribute saying what became of the delivery


class Ack(enum.StrEnum):
    """What became of one delivery."""

    ACKED = "acked"  # handled
    DEAD_LETTERED = "dead_lettered"  # Rejected: its original on the dead-letter topic with why (or logged), acked
    REDELIVERED = "redelivered"  # answered 500: Pub/Sub brings it again


def publish_rejection(runtime: Runtime, message: PubSubMessage, exc: Rejected, rejected_by: str,
                      arrival: Arrival | None = None) -> str:
    """Send the original message, annotated with why, to the dead-letter topic. ``arrival``: what its topic
    proves, as the entry point asked it (asked here when not given)."""
    s = runtime.settings
    arrival = arrival or s.origins.arrival(message.topic)
    # On an ingress topic the topic says who the provider is (the provider's own claims do not count);
    # internal messages (normalised updates, change events) carry it as an attribute.
    provider = arrival.provider or message.attributes.get("provider")
    attributes = dl.rejection_attributes(message, exc, rejected_by, provider, timeutil.now_str())
    message_id = publish(runtime.publisher, s.topic_path(s.topic_deadletter), message.data, attributes)
    log.warning("message rejected: %s", exc.message, extra={
        "labels": {"reason": exc.reason.value, "provider": provider or "unknown", "function": rejected_by},
        "messageId": message.message_id, "detail": exc.detail, "key": exc.key})
    return message_id


def _raw_delivery(event: Any) -> PubSubMessage:
    """A push delivery that is not a Pub/Sub message, as a message to dead-letter: its body, intact."""
    attributes = event.get_attributes()
    data = event.data if isinstance(event.data, (bytes, bytearray)) else orjson.dumps(event.data, default=str)
    return PubSubMessage(bytes(data), {}, str(attributes.get("id", "")), attributes.get("time"),
                         push.topic_from_source(attributes.get("source")))


def check_startup(name: str, *, pushed: bool, needs: tuple[Callable[[Any], Any], ...] = ()) -> None:
    """Refuse to start misconfigured: the settings of the environment must parse and, for a function Pub/Sub
    pushes to, say how to check push tokens (``auth.PushAuth``). An HTTP function (the api, behind the Cloud Run
    invoker check) needs no push settings. ``needs``: the function's own checks of the settings (each raises
    ConfigError), e.g. the webhook secrets' keyring (shared/runtime/secretbox.py ``check_configured``)."""
    try:
        settings = settings_module.from_env()
        if pushed:
            auth.PushAuth.of(settings)
        for need in needs:
            need(settings)
        _trace(name, settings)
    except ConfigError as exc:
        log.critical("function %s cannot start: %s", name, exc, extra={
            "labels": {"function": name, "startup": "misconfigured"}})
        raise


def _trace(name: str, settings: settings_module.Settings) -> None:
    """This process's spans (shared/runtime/tracing.py); an exporter that cannot be built is a ConfigError."""
    try:
        tracing.configure(name, settings)
    except Exception as exc:  # e.g. no credentials for Cloud Trace
        raise ConfigError(f"tracing: cannot export spans to {settings.trace_exporter.value}: {exc}") from exc


class _Instance:
    """The runtime and handler of one function instance, each built once (thread-safe)."""

    def __init__(self, build: Callable[[Runtime], Handler], make_runtime: Callable[[], Runtime]):
        self._build, self._make_runtime = build, make_runtime
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None
        self._handler: Handler | None = None

    def bind(self, runtime: Runtime) -> None:
        with self._lock:
            self._runtime, self._handler = runtime, None

    def runtime(self) -> Runtime:
        """Settings, and clients not yet created: enough to check a push token."""
        if self._runtime is None:
            with self._lock:
                if self._runtime is None:
                    self._runtime = self._make_runtime()
        return self._runtime

    def handler(self) -> Handler:
        runtime = self.runtime()
        if self._handler is None:
            with self._lock:
                if self._handler is None:
                    self._handler = self._build(runtime)
        return self._handler


def _settle(name: str, work: Callable[[], Ack], message_id: str) -> Ack:
    """``work``'s answer; a failure logged once and answered 500 (Pub/Sub redelivers)."""
    try:
        return work()
    except Transient as exc:
        trace.get_current_span().set_attribute(ACK, Ack.REDELIVERED.value)
        log.warning("transient failure, Pub/Sub will redeliver", extra={
            "labels": {"function": name}, "messageId": message_id, "error": str(exc)})
        flask.abort(500)  # logged above, as one JSON line: not again as a framework traceback
    except Exception:
        trace.get_current_span().set_attribute(ACK, Ack.REDELIVERED.value)
        log.exception("unexpected failure, Pub/Sub will redeliver", extra={
            "labels": {"function": name}, "messageId": message_id})
        flask.abort(500)


def pubsub_function(name: str, build: Callable[[Runtime], Handler], *, deadletter_rejections: bool = True,
                    make_runtime: Callable[[], Runtime] = Runtime.from_env,
                    needs: tuple[Callable[[Any], Any], ...] = (), pass_arrival: bool = False) -> Callable[[Any], None]:
    """A CloudEvent function named ``name`` that runs the handler ``build(runtime)`` returns.

    ``deadletter_rejections=False`` is for the dead-letter function itself (see the module doc).
    What a delivery's topic proves (``Origins.arrival``) is asked once, here; ``pass_arrival=True`` passes it
    on to the handler as its second argument (ingest, the one use case that reads it).
    """
    check_startup(name, pushed=True, needs=needs)
    instance = _Instance(build, make_runtime)

    def reject(runtime: Runtime, message: PubSubMessage, exc: Rejected, arrival: Arrival | None = None) -> None:
        if deadletter_rejections:
            publish_rejection(runtime, message, exc, rejected_by=name, arrival=arrival)
            return
        log.error("cannot handle message, acked (the dead-letter archive keeps it): %s", exc.message, extra={
            "labels": {"function": name, "reason": exc.reason.value}, "messageId": message.message_id,
            "detail": exc.detail})

    def handle(runtime: Runtime, message: PubSubMessage, arrival: Arrival) -> Ack:
        try:
            instance.handler()(*((message, arrival) if pass_arrival else (message,)))
            return Ack.ACKED
        except Rejected as exc:
            reject(runtime, message, exc, arrival)  # may itself raise Transient: Pub/Sub down while dead-lettering
            return Ack.DEAD_LETTERED

    def entry(event: Any) -> None:
        runtime = instance.runtime()
        auth.verify_push_request(runtime.settings)  # before any client exists
        try:
            message = push.from_push_request(event)
        except Rejected as exc:
            raw, rejection = _raw_delivery(event), exc
            _settle(name, lambda: reject(runtime, raw, rejection) or Ack.DEAD_LETTERED, raw.message_id)
            return
        arrival = runtime.settings.origins.arrival(message.topic)  # asked once per delivery, passed on
        # a provider's context (on its ingress topic, replayed, or a CloudEvent posted straight) is the edge:
        # continued, never trusted to decide sampling (shared/runtime/tracing.py)
        with tracing.continuing(name, message.attributes, edge=arrival.edge, attributes=tracing.message_attributes(
                message.message_id, message.topic, message.publish_time)) as span:
            span.set_attribute(ACK, _settle(name, lambda: handle(runtime, message, arrival), message.message_id).value)

    entry.__name__ = entry.__qualname__ = name
    entry.bind = instance.bind  # type: ignore[attr-defined]
    return entry


def problem(status: int, title: str, detail: str, parameter: str | None = None,
            headers: Mapping[str, str] | None = None) -> flask.Response:
    """An RFC 9457 problem answer (``application/problem+json``), naming the parameter at fault."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if parameter:
        body["parameter"] = parameter
    response = flask.Response(orjson.dumps(body), status, mimetype="application/problem+json")
    response.headers.update(headers or {})
    return response


def http_function(name: str, build: Callable[[Runtime], Callable[[flask.Request], flask.Response]],
                  make_runtime: Callable[[], Runtime] = Runtime.from_env,
                  needs: tuple[Callable[[Any], Any], ...] = ()) -> Callable[[flask.Request], Any]:
    """An HTTP function named ``name`` that answers with the handler ``build(runtime)`` returns.

    No push token here: in production the Cloud Run invoker check (IAM) is the authentication. A failure
    nobody foresaw is logged once and answered 500 as a JSON problem, never as a framework page.
    """
    check_startup(name, pushed=False, needs=needs)
    instance = _Instance(build, make_runtime)

    def entry(request: flask.Request) -> Any:
        try:
            return instance.handler()(request)
        except Exception:
            log.exception("unexpected failure", extra={"labels": {"function": name},
                                                       "path": request.path})
            return problem(500, "Internal error", "the server failed to answer; it is logged")

    entry.__name__ = entry.__qualname__ = name
    entry.bind = instance.bind  # type: ignore[attr-defined]
    return entry
