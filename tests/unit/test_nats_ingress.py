"""The NATS ingress's decisions, on fakes: where a message goes, what it carries, when it is acked,
nak'ed or dead-lettered; and the server configuration the topology generates."""

from __future__ import annotations

import asyncio
import json
import stat
from concurrent.futures import Future

import orjson
import pytest
from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import limits
from google.api_core import exceptions as gexc
from dcm_status_contracts.errors import ConfigError, Reason, Rejected
from dcm_status_contracts.pubsub_binding import BindingMode, mode_of

from infra import nats_accounts
from infra.topology import load
from shared.nats_ingress.forward import Forwarder, ForwardOutcome, backoff, permanent
from shared.nats_ingress.health import IngressHealth
from shared.nats_ingress.route import MSG_ID, STREAM_SEQUENCE, SUBJECT, Inbound, route
from shared.runtime import nats_settings
from shared.runtime import settings as settings_module
from tests import samples
from tests.fakes import pubsub_refuses

SETTINGS = settings_module.from_env({"DCM_PROJECT": "p", "DCM_PROVIDERS": "osac,aws,kubevirt,acm-cluster,"
                                     "k8s-storage,k8s-container,three-tier-app"})
NATS = nats_settings.nats_from_env({"NATS_URL": "nats://127.0.0.1:4222", "NATS_MAX_DELIVER": "3"})
UPSTREAM = samples.load("upstream")


def osac_event(**extra) -> bytes:
    return orjson.dumps({"specversion": "1.0", "id": "e-1", "source": "dcm/providers/osac-sp-vm",
                         "type": "dcm.status.vm", "subject": "dcm.vm", "time": "2026-01-01T00:00:00Z",
                         "datacontenttype": "application/json",
                         "data": {"id": "vm-1", "status": "RUNNING", "message": ""}, **extra})


def inbound(data: bytes = b"", subject: str = "providers.osac.dcm.vm", headers=None, delivered: int = 1,
            seq: int = 7) -> Inbound:
    return Inbound(subject, data or osac_event(), headers or {}, seq, delivered, "2026-01-01T00:00:01Z")


# ---- route -----------------------------------------------------------------------------------
def test_the_provider_is_the_server_written_prefix_never_the_event():
    forged = osac_event(source="dcm/providers/aws")  # claims aws: ingest's provider_mismatch, not ours to decide
    out = route(inbound(forged), NATS, SETTINGS)
    assert (out.provider, out.topic) == ("osac", "dcm-status-ingress-osac")
    assert out.data == forged  # the bytes as published


@pytest.mark.parametrize("subject", ["providers.nobody.dcm.vm", "dcm.vm", "providers..dcm.vm", "other.osac.dcm.vm"])
def test_a_subject_naming_no_provider_of_ours_is_unknown_provider(subject):
    with pytest.raises(Rejected) as caught:
        route(inbound(subject=subject), NATS, SETTINGS)
    assert caught.value.reason is Reason.UNKNOWN_PROVIDER


def test_structured_keeps_the_payload_and_says_where_it_was_in_the_stream():
    out = route(inbound(headers={"Nats-Msg-Id": "m-1", "X-Trace": "t"}, seq=42), NATS, SETTINGS)
    assert out.attributes == {STREAM_SEQUENCE: "42", MSG_ID: "m-1", SUBJECT: "dcm.vm"}  # no other header crosses
    assert out.resource_key == "osac/vm/vm-1"  # the resource key, as ingest computes it


def test_binary_headers_become_the_pubsub_binding_attributes():
    headers = {"ce-specversion": "1.0", "ce-id": "e-2", "ce-source": "dcm/providers/osac-sp-vm",
               "ce-type": "dcm.status.vm", "Content-Type": "application/json", "Other": "x"}
    out = route(inbound(b'{"id": "vm-2", "status": "RUNNING"}', headers=headers), NATS, SETTINGS)
    assert mode_of(out.attributes) is BindingMode.BINARY
    assert out.attributes == {**{k: v for k, v in headers.items() if k.startswith("ce-")},
                              "content-type": "application/json", STREAM_SEQUENCE: "7", SUBJECT: "dcm.vm"}
    assert out.resource_key == "osac/vm/vm-2"


@pytest.mark.parametrize("sample", UPSTREAM, ids=lambda s: s.name)
def test_every_upstream_golden_sample_goes_to_its_providers_topic_as_published(sample):
    out = route(inbound(sample.data, f"providers.{sample.provider}.dcm.x", dict(sample.attributes)), NATS, SETTINGS)
    assert out.topic == f"dcm-status-ingress-{sample.provider}" and out.data == sample.data
    assert {k: v for k, v in out.attributes.items() if k not in (STREAM_SEQUENCE, SUBJECT)} == \
        {k.lower(): v for k, v in sample.attributes.items()}
    assert out.attributes[SUBJECT] == "dcm.x"  # the subject as the provider published it
    assert out.resource_key == sample.expect["key"]


@pytest.mark.parametrize("data, reason", [(b"not json", Reason.MALFORMED_JSON), (b"[1, 2]", Reason.NOT_A_CLOUDEVENT),
                                          (b'{"hello": "world"}', Reason.NOT_A_CLOUDEVENT)])
def test_what_is_not_a_cloudevent_is_refused_with_ingests_reason(data, reason):
    with pytest.raises(Rejected) as caught:
        route(inbound(data), NATS, SETTINGS)
    assert caught.value.reason is reason


def test_an_event_ingest_cannot_key_has_no_ordering_key_and_still_goes():
    out = route(inbound(osac_event(type="something.else")), NATS, SETTINGS)
    assert out.resource_key == ""  # ingest dead-letters it with its reason


# ---- forward ---------------------------------------------------------------------------------
class FakePublisher:
    """Pub/Sub as production answers: InvalidArgument for what it can never carry (tests/fakes.py), and
    unavailable for the topics or data it is told to fail."""

    def __init__(self, fail_topics=(), refuse_topics=()):
        self.fail_topics, self.refuse_topics = set(fail_topics), set(refuse_topics)
        self.fail_data: set[bytes] = set()
        self.published: list[tuple[str, bytes, dict]] = []
        self.refused: list[tuple[str, dict]] = []

    def publish(self, topic, data, retry=None, timeout=None, **attrs):  # no ordering key: forward.waves orders
        future: Future = Future()
        refused = pubsub_refuses(data, attrs, "") or (
            "refused (fake)" if topic.rsplit("/", 1)[-1] in self.refuse_topics else None)
        if refused:
            self.refused.append((topic.rsplit("/", 1)[-1], attrs))
            future.set_exception(gexc.InvalidArgument(refused))
        elif topic.rsplit("/", 1)[-1] in self.fail_topics or data in self.fail_data:
            future.set_exception(RuntimeError("UNAVAILABLE"))
        else:
            self.published.append((topic.rsplit("/", 1)[-1], data, attrs))
            future.set_result(str(len(self.published)))
        return future


class FakeDelivery:
    def __init__(self):
        self.acked, self.naks = False, []

    async def ack(self):
        self.acked = True

    async def nak(self, delay=None):
        self.naks.append(delay)


def forward(message: Inbound, publisher: FakePublisher) -> tuple[ForwardOutcome, FakeDelivery, IngressHealth]:
    delivery, health = FakeDelivery(), IngressHealth()
    [outcome] = asyncio.run(Forwarder(SETTINGS, NATS, publisher, health).forward([(message, delivery)]))
    return outcome, delivery, health


def test_acked_only_once_pubsub_has_it():
    publisher = FakePublisher()
    outcome, delivery, health = forward(inbound(), publisher)
    assert outcome is ForwardOutcome.FORWARDED and delivery.acked and not delivery.naks
    assert [p[0] for p in publisher.published] == ["dcm-status-ingress-osac"]
    assert health.snapshot()["forwarded"] == 1


def test_a_failed_publish_is_nakd_with_a_backoff_never_acked():
    publisher = FakePublisher(fail_topics={"dcm-status-ingress-osac"})
    outcome, delivery, health = forward(inbound(delivered=2), publisher)
    assert outcome is ForwardOutcome.RETRYING and not delivery.acked and delivery.naks == [backoff(2)]
    assert "UNAVAILABLE" in health.snapshot()["lastError"]


def update(vm: str, n: int) -> bytes:
    return osac_event(id=f"e-{vm}-{n}", data={"id": vm, "status": ["RUNNING", "STOPPED"][n % 2], "message": ""})


def test_a_batch_publishes_each_resources_updates_in_natss_order_in_waves():
    """No Pub/Sub ordering key (one request per key): a resource's later update waits for its earlier one."""
    batch = [update("vm-1", 0), update("vm-2", 0), update("vm-1", 1), update("vm-1", 2), update("vm-3", 0)]
    publisher = FakePublisher()
    outcomes = asyncio.run(Forwarder(SETTINGS, NATS, publisher, IngressHealth()).forward(
        [(inbound(data, seq=i), FakeDelivery()) for i, data in enumerate(batch)]))
    assert outcomes == [ForwardOutcome.FORWARDED] * 5
    assert [data for _, data, _ in publisher.published] == [batch[0], batch[1], batch[4], batch[2], batch[3]]


def test_a_resources_update_waits_when_its_earlier_one_is_delivered_again():
    batch = [update("vm-1", 0), update("vm-1", 1), update("vm-2", 0)]
    publisher = FakePublisher()
    publisher.fail_data = {batch[0]}
    deliveries = [FakeDelivery() for _ in batch]
    outcomes = asyncio.run(Forwarder(SETTINGS, NATS, publisher, IngressHealth()).forward(
        [(inbound(data, seq=i), d) for i, (data, d) in enumerate(zip(batch, deliveries))]))
    assert outcomes == [ForwardOutcome.RETRYING, ForwardOutcome.RETRYING, ForwardOutcome.FORWARDED]
    assert [data for _, data, _ in publisher.published] == [batch[2]]  # vm-1's second never overtakes its first
    assert deliveries[1].naks and not deliveries[1].acked


def test_still_not_forwarded_after_max_deliver_it_is_dead_lettered_and_acked():
    publisher = FakePublisher(fail_topics={"dcm-status-ingress-osac"})
    outcome, delivery, _ = forward(inbound(delivered=NATS.max_deliver), publisher)
    assert outcome is ForwardOutcome.DEAD_LETTERED and delivery.acked
    [(topic, data, attrs)] = publisher.published
    assert topic == "dcm-status-deadletter" and data == osac_event()
    assert attrs[dl.REASON] == Reason.DELIVERY_EXHAUSTED.value and attrs[dl.PROVIDER] == "osac"
    assert attrs[dl.SOURCE_TOPIC] == "dcm-status-ingress-osac" and attrs[dl.REJECTED_BY] == "nats_ingress"


def test_pubsub_down_for_the_dead_letter_too_the_message_is_held():
    publisher = FakePublisher(fail_topics={"dcm-status-ingress-osac", "dcm-status-deadletter"})
    outcome, delivery, _ = forward(inbound(delivered=NATS.max_deliver + 4), publisher)
    assert outcome is ForwardOutcome.RETRYING and not delivery.acked and delivery.naks


def test_a_non_cloudevent_is_dead_lettered_with_its_reason_at_once():
    publisher = FakePublisher()
    outcome, delivery, health = forward(inbound(b"hello"), publisher)
    assert outcome is ForwardOutcome.DEAD_LETTERED and delivery.acked
    [(topic, data, attrs)] = publisher.published
    assert (topic, data, attrs[dl.REASON]) == ("dcm-status-deadletter", b"hello", Reason.MALFORMED_JSON.value)
    assert health.snapshot()["deadLettered"] == 1


def test_an_unknown_provider_is_dead_lettered_naming_no_topic():
    publisher = FakePublisher()
    outcome, _, _ = forward(inbound(subject="providers.nobody.dcm.vm"), publisher)
    [(_, _, attrs)] = publisher.published
    assert outcome is ForwardOutcome.DEAD_LETTERED and attrs[dl.REASON] == Reason.UNKNOWN_PROVIDER.value
    assert attrs[dl.SOURCE_TOPIC] == "" and dl.PROVIDER not in attrs  # nothing to replay it into


# ---- Pub/Sub's limits and permanent answers (issue 37 item 2) ----------------------------------------
LONG_KEY = "ce-" + "k" * limits.PUBSUB_MAX_ATTRIBUTE_KEY_BYTES  # 259 bytes: Pub/Sub refuses it


@pytest.mark.parametrize("headers, what", [
    ({LONG_KEY: "v"}, "key"),
    ({"ce-id": "x" * (limits.PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES + 1)}, "value"),
    ({"ce-partitionkey": "é" * 513}, "value"),  # 1,026 bytes in 513 characters
    ({f"ce-x{i}": "v" for i in range(limits.PUBSUB_MAX_ATTRIBUTES - 2)}, "count"),  # + sequence + nats-subject + traceparent
])
def test_a_header_pubsub_cannot_carry_is_refused_where_the_attributes_are_built(headers, what):
    with pytest.raises(Rejected) as caught:
        route(inbound(headers=headers), NATS, SETTINGS)
    assert caught.value.reason is Reason.OVERSIZE, what


def test_the_most_headers_pubsub_carries_go_with_the_trace_context():
    binary = {"ce-specversion": "1.0", "ce-id": "e-2", "ce-source": "dcm/providers/osac-sp-vm",
              "ce-type": "dcm.status.vm", "content-type": "application/json"}
    headers = {**binary, **{f"ce-x{i}": "v" for i in range(limits.PUBSUB_MAX_ATTRIBUTES - 4 - len(binary))}}
    publisher = FakePublisher()  # 96 headers + the stream sequence + nats-subject = 98, + traceparent and tracestate = 100
    outcome, delivery, _ = forward(inbound(b'{"id": "vm-2", "status": "RUNNING"}', headers=headers), publisher)
    assert outcome is ForwardOutcome.FORWARDED and delivery.acked and not publisher.refused


@pytest.mark.parametrize("headers", [{LONG_KEY: "v"}, {"ce-id": "x" * 2000},
                                     {f"ce-x{i}": "v" * 1000 for i in range(150)}])
def test_an_uncarriable_message_is_dead_lettered_without_the_offending_headers_and_acked(headers):
    """The issue's poison: Pub/Sub refused the forward and the dead letter alike, so it was nak'ed for ever."""
    publisher = FakePublisher()
    outcome, delivery, health = forward(inbound(headers=headers), publisher)
    assert outcome is ForwardOutcome.DEAD_LETTERED and delivery.acked and not delivery.naks and not publisher.refused
    [(topic, data, attrs)] = publisher.published
    assert topic == "dcm-status-deadletter" and data == osac_event()
    assert attrs[dl.REASON] == Reason.OVERSIZE.value and attrs[dl.PROVIDER] == "osac"
    assert not limits.attribute_breaches(attrs) and len(attrs) <= limits.PUBSUB_MAX_ATTRIBUTES
    assert LONG_KEY not in attrs and int(attrs[dl.ATTRIBUTES_DROPPED]) >= 1


def test_a_permanent_pubsub_answer_is_dead_lettered_at_once_never_nakd():
    publisher = FakePublisher(refuse_topics={"dcm-status-ingress-osac"})
    outcome, delivery, _ = forward(inbound(delivered=1), publisher)
    assert outcome is ForwardOutcome.DEAD_LETTERED and delivery.acked and not delivery.naks
    [(topic, _, attrs)] = publisher.published
    assert topic == "dcm-status-deadletter" and attrs[dl.REASON] == Reason.PUBSUB_REFUSED.value
    assert "InvalidArgument" in attrs[dl.DETAIL]


def test_a_dead_letter_refused_for_good_goes_with_the_platforms_attributes_alone():
    publisher = FakePublisher(refuse_topics={"dcm-status-ingress-osac"})
    real = publisher.publish

    def refuse_originals(topic, data, retry=None, timeout=None, **attrs):  # an original no check foresaw
        if "ce-type" in attrs:
            future: Future = Future()
            future.set_exception(gexc.InvalidArgument("unforeseen"))
            return future
        return real(topic, data, retry, timeout, **attrs)

    publisher.publish = refuse_originals
    headers = {"ce-specversion": "1.0", "ce-id": "e-2", "ce-source": "dcm/providers/osac-sp-vm",
               "ce-type": "dcm.status.vm", "content-type": "application/json"}
    outcome, delivery, _ = forward(inbound(b'{"id": "vm-2", "status": "RUNNING"}', headers=headers), publisher)
    assert outcome is ForwardOutcome.DEAD_LETTERED and delivery.acked
    [(topic, _, attrs)] = publisher.published
    assert topic == "dcm-status-deadletter" and not [k for k in attrs if k.startswith("ce-")]
    assert attrs[dl.ATTRIBUTES_DROPPED] == "5" and attrs[dl.REASON] == Reason.PUBSUB_REFUSED.value


def test_refused_for_good_even_stripped_it_is_acked_and_said_never_nakd_for_ever():
    publisher = FakePublisher(refuse_topics={"dcm-status-ingress-osac", "dcm-status-deadletter"})
    outcome, delivery, health = forward(inbound(), publisher)
    assert outcome is ForwardOutcome.ABANDONED and delivery.acked and not delivery.naks
    assert "refused for good" in health.snapshot()["lastError"]


@pytest.mark.parametrize("exc, expected", [(gexc.InvalidArgument("x"), True), (gexc.OutOfRange("x"), True),
                                           (TypeError("x"), True), (gexc.ServiceUnavailable("x"), False),
                                           (gexc.DeadlineExceeded("x"), False), (gexc.NotFound("topic"), False),
                                           (gexc.PermissionDenied("x"), False), (TimeoutError(), False),
                                           (RuntimeError("UNAVAILABLE"), False)])
def test_only_what_no_retry_fixes_is_permanent(exc, expected):
    assert permanent(exc) is expected


def test_backoff_grows_then_holds():
    assert [backoff(n) for n in range(1, 8)] == [1, 2, 4, 8, 10, 10, 10]


# ---- settings --------------------------------------------------------------------------------
@pytest.mark.parametrize("env", [{}, {"NATS_URL": "http://x"},
                                 {"NATS_URL": "nats://x", "NATS_CREDS": "f", "NATS_PASSWORD": "p"},
                                 {"NATS_URL": "nats://x", "NATS_PROVIDER_PREFIX": "providers."},
                                 {"NATS_URL": "nats://x", "NATS_MAX_DELIVER": "zero"},
                                 {"NATS_URL": "nats://x", "NATS_ACK_WAIT_SECONDS": "5"}])
def test_nats_settings_refuse_what_cannot_work(env):
    with pytest.raises(ConfigError):
        nats_settings.nats_from_env(env)


def test_the_password_never_shows_in_a_repr():
    settings = nats_settings.nats_from_env({"NATS_URL": "nats://x:4222", "NATS_USER": "u", "NATS_PASSWORD": "s3cr3t"})
    assert "s3cr3t" not in repr(settings)
    assert "s3cr3t" not in repr(nats_accounts.Identity("A", "u", "s3cr3t"))


def test_the_topologys_nats_names_are_the_ingress_settings():
    spec = load().nats
    settings = nats_settings.nats_from_env({"NATS_URL": "nats://x:4222", **spec.env()})
    assert (settings.stream, settings.subject, settings.consumer) == (spec.stream, spec.subjects, spec.consumer)
    assert settings.provider_of_subject(spec.subject_prefix("osac") + "dcm.vm") == "osac"
    assert (settings.max_ack_pending, settings.max_bytes, settings.max_msgs) == (spec.max_ack_pending, spec.max_bytes,
                                                                                spec.max_msgs)
    assert settings.control_plane_stream == spec.control_plane_stream


def test_a_stream_per_provider_reading_status_one_token_after_dcm():
    """Dedup (per stream) never crosses providers; a provider's budget and storage are its own; the agent's
    ``dcm.agents.*`` and ``dcm.agent.*.cancel`` are not status (the control-plane's filter is ``dcm.*``)."""
    from nats.js.api import DiscardPolicy

    from shared.nats_ingress.worker import consumer_config, control_plane_stream_config, stream_config

    n = nats_settings.nats_from_env({"NATS_URL": "nats://x:4222", **load().nats.env()})
    osac, aws = stream_config(n, "osac"), stream_config(n, "aws")
    assert (osac.name, osac.subjects, aws.name) == ("dcm-status-osac", ["providers.osac.dcm.*"], "dcm-status-aws")
    assert osac.discard is DiscardPolicy.NEW and osac.max_bytes == load().nats.max_bytes > 0 and osac.max_msgs > 0
    consumer = consumer_config(n, "osac")
    assert consumer.filter_subject == "providers.osac.dcm.*" and consumer.max_ack_pending == 1000
    assert osac.republish.dest == "dcm-status.>"
    assert control_plane_stream_config(n).subjects == ["dcm-status.providers.*.dcm.*"]


@pytest.mark.parametrize("env", [{"NATS_STREAM_NAME": "dcm-status"}, {"NATS_STATUS_SUBJECT": "providers.*.dcm.>"},
                                 {"NATS_CONTROL_PLANE_PREFIX": ""}, {"NATS_MAX_ACK_PENDING": "0"}])
def test_a_single_stream_is_refused(env):
    with pytest.raises(ConfigError):
        nats_settings.nats_from_env({"NATS_URL": "nats://x:4222", **env})


# ---- the server configuration ------------------------------------------------------------------
def test_credentials_are_made_once_and_kept_owner_only(tmp_path):
    path = tmp_path / "credentials.json"
    first = nats_accounts.ensure_credentials(path, ["osac"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = nats_accounts.ensure_credentials(path, ["osac", "aws"])
    assert again.providers["osac"].password == first.providers["osac"].password
    assert again.platform.password == first.platform.password and set(json.loads(path.read_text())["providers"]) == \
        {"osac", "aws"}


def test_each_provider_may_publish_only_its_subjects_and_reaches_the_platform_under_its_prefix(tmp_path):
    spec = load().nats
    credentials = nats_accounts.ensure_credentials(tmp_path / "c.json", ["osac", "acm-cluster"])
    text = nats_accounts.server_config(spec, credentials, ["osac", "acm-cluster"], port=4222)
    osac = text[text.index("PROVIDER_OSAC {"):]
    osac = osac[: osac.index("\n  }\n")]
    assert 'publish: {allow: ["dcm.>"]}' in osac and 'subscribe: {allow: ["_INBOX.>"]}' in osac
    assert '{service: {account: PLATFORM, subject: "providers.osac.dcm.>"}, to: "dcm.>"}' in osac
    assert "jetstream" not in osac and "acm-cluster" not in osac
    assert '{service: "providers.osac.dcm.>", accounts: [PROVIDER_OSAC]}' in text  # exported to osac alone


# ---- the worker's edges ------------------------------------------------------------------------
def test_a_misconfigured_ingress_says_why_in_one_line_and_exits_2(capsys):
    from shared.nats_ingress.worker import main

    def bad() -> nats_settings.NatsSettings:
        raise ConfigError("NATS_URL must be a nats:// (or tls://) URL, got ''")

    assert main(lambda: SETTINGS, bad) == 2
    assert capsys.readouterr().err.strip().splitlines() == ["nats_ingress cannot start: NATS_URL must be a nats:// "
                                                            "(or tls://) URL, got ''"]


def test_healthz_answers_the_lag_and_last_error_503_while_disconnected():
    import requests

    from shared.nats_ingress.health import serve

    health = IngressHealth()
    server = serve(health, 0, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
    try:
        assert requests.get(url, timeout=5).status_code == 503
        health.connected(True)
        health.lag(12, 3)
        health.failed("publish to dcm-status-ingress-osac failed: UNAVAILABLE")
        answer = requests.get(url, timeout=5)
        assert answer.status_code == 200
        body = answer.json()
        assert (body["lag"], body["ackPending"], body["retried"]) == (12, 3, 1) and "UNAVAILABLE" in body["lastError"]
        assert requests.get(url.replace("/healthz", "/other"), timeout=5).status_code == 404
    finally:
        server.shutdown()


class _HangingDrain:
    """A NATS connection whose drain() never returns, as nats-py's does with a pull subscription bound."""

    def __init__(self) -> None:
        self.is_connected, self.calls = True, []

    async def drain(self) -> None:
        self.calls.append("drain")
        await asyncio.Event().wait()

    async def flush(self, timeout: float) -> None:
        self.calls.append("flush")

    async def close(self) -> None:
        self.calls.append("close")


def test_a_stop_flushes_the_acks_then_closes_and_never_waits_on_drain():
    from shared.nats_ingress.worker import disconnect

    nc = _HangingDrain()
    asyncio.run(asyncio.wait_for(disconnect(nc), timeout=5))
    assert nc.calls == ["flush", "close"]


# ---- tracing: a NATS header traceparent continued (docs/tracing.md) ----------------------------
PROVIDER_TRACE, PROVIDER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def test_the_providers_nats_traceparent_is_continued_into_the_pubsub_message(spans):
    publisher = FakePublisher()
    forward(inbound(headers={"Traceparent": f"00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"}), publisher)
    [(_, _, attrs)] = publisher.published
    [span] = spans("nats_ingress")
    assert span.parent.span_id == int(PROVIDER_SPAN, 16) and span.attributes["dcm.outcome"] == "forwarded"
    assert attrs["traceparent"].split("-")[1:3] == [PROVIDER_TRACE, f"{span.context.span_id:016x}"]
    assert "Traceparent" not in attrs  # the provider's header is not forwarded as it came: the span's is


def test_a_malformed_nats_traceparent_starts_a_new_trace_and_a_dead_letter_keeps_its_trace(spans):
    publisher = FakePublisher()
    outcome, delivery, _ = forward(inbound(headers={"traceparent": "00-nonsense"}), publisher)
    assert outcome is ForwardOutcome.FORWARDED and delivery.acked
    [span] = spans("nats_ingress")
    assert span.parent is None and publisher.published[0][2]["traceparent"].split("-")[1] != PROVIDER_TRACE
    dead = FakePublisher()
    forward(inbound(subject="providers.nobody.dcm.vm", headers={"traceparent": f"00-{PROVIDER_TRACE}-{PROVIDER_SPAN}-01"}),
            dead)
    [(topic, _, attrs)] = dead.published
    assert topic == "dcm-status-deadletter" and attrs["traceparent"].split("-")[1] == PROVIDER_TRACE
