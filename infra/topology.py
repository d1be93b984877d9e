"""Load ``infra/topology.yaml`` and expand it for a list of providers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml
from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import ConfigError
from dcm_status_contracts.identity import provider_name_problem

TOPOLOGY_FILE = Path(__file__).resolve().parent / "topology.yaml"


def seconds(value: str | int) -> int:
    """'604800s' -> 604800."""
    return timeutil.duration_seconds(value)


@dataclass(frozen=True)
class TopicSpec:
    key: str  # ingress | normalized | changed | deadletter
    name: str
    provider: str | None = None


@dataclass(frozen=True)
class SubscriptionSpec:
    name: str
    topic: str
    topic_key: str
    push: str | None  # function name, or None for a pull subscription
    enable_message_ordering: bool
    dead_letter: bool
    ack_deadline_seconds: int
    max_delivery_attempts: int
    minimum_backoff: int
    maximum_backoff: int
    message_retention: int
    filter: str | None = None
    provider: str | None = None
    dead_letter_topic: str | None = None  # where Pub/Sub dead-letters its failures (None: no policy)
    oldest_unacked_alert: int | None = None  # production alert past this age, seconds (None: no alert)


@dataclass(frozen=True)
class ExportSpec:
    """A topic written straight into a BigQuery table by a Pub/Sub BigQuery subscription (``exports:``).
    Production only: the emulator has no BigQuery subscriptions, the local stack skips it."""

    name: str
    topic: str
    topic_key: str
    dataset: str
    table: str
    event_schema: str  # the JSON schema of the event's data, relative to the repository root
    oldest_unacked_alert: int | None
    production_only: bool = True


@dataclass(frozen=True)
class NatsSpec:
    """The NATS JetStream ingress (``nats:`` in topology.yaml): the stream the providers' events land in,
    what each provider may publish, the prefix the server puts before it, the ingress's durable consumer."""

    stream: str  # a stream per provider, e.g. "dcm-status-{provider}"
    subjects: str  # what a provider's stream captures, e.g. "providers.{provider}.dcm.*" (one token after dcm.)
    provider_subjects: str  # what a provider may publish in its own account, e.g. "dcm.>"
    provider_prefix: str  # "providers.{provider}.": written by the server, never by a provider
    consumer: str
    ack_wait_seconds: int
    max_deliver: int  # deliveries before a message that cannot be forwarded is dead-lettered
    max_age_seconds: int
    worker: str = "nats_ingress"  # functions/<worker>/main.py, a long-running worker (not a push function)
    max_ack_pending: int = 1000  # per provider: its consumer's unsettled messages
    max_bytes: int = -1  # per provider's stream, discard new (-1: the account's limit only)
    max_msgs: int = -1
    control_plane_stream: str = "dcm-status"  # every provider's stored events republished, for a control-plane
    control_plane_prefix: str = "dcm-status."

    def stream_of(self, provider: str) -> str:
        return self.stream.replace("{provider}", provider)

    def subject_prefix(self, provider: str) -> str:
        return self.provider_prefix.replace("{provider}", provider)

    def env(self) -> dict[str, str]:
        """The ingress's settings (shared/runtime/nats_settings.py ``nats_from_env``), beside ``Topology.env()``."""
        return {
            "NATS_STREAM_NAME": self.stream,
            "NATS_STATUS_SUBJECT": self.subjects,
            "NATS_CONSUMER_NAME": self.consumer,
            "NATS_PROVIDER_PREFIX": self.provider_prefix,
            "NATS_ACK_WAIT_SECONDS": str(self.ack_wait_seconds),
            "NATS_MAX_DELIVER": str(self.max_deliver),
            "NATS_MAX_AGE_SECONDS": str(self.max_age_seconds),
            "NATS_MAX_ACK_PENDING": str(self.max_ack_pending),
            "NATS_PROVIDER_MAX_BYTES": str(self.max_bytes),
            "NATS_PROVIDER_MAX_MSGS": str(self.max_msgs),
            "NATS_CONTROL_PLANE_STREAM": self.control_plane_stream,
            "NATS_CONTROL_PLANE_PREFIX": self.control_plane_prefix,
        }


def _nats(doc: Mapping[str, Any] | None) -> NatsSpec | None:
    if not doc:
        return None
    for name in ("provider_prefix", "stream", "subjects"):
        if "{provider}" not in doc[name]:
            raise ValueError(f"nats.{name} must contain '{{provider}}' (a stream per provider), got {doc[name]!r}")
    return NatsSpec(stream=doc["stream"], subjects=doc["subjects"], provider_subjects=doc["provider_subjects"],
                    provider_prefix=doc["provider_prefix"], consumer=doc["consumer"],
                    ack_wait_seconds=int(doc["ack_wait_seconds"]), max_deliver=int(doc["max_deliver"]),
                    max_age_seconds=seconds(doc["max_age"]), worker=doc.get("worker", "nats_ingress"),
                    max_ack_pending=int(doc["max_ack_pending"]), max_bytes=int(doc["max_bytes"]),
                    max_msgs=int(doc["max_msgs"]), control_plane_stream=doc["control_plane_stream"],
                    control_plane_prefix=doc["control_plane_prefix"])


@dataclass(frozen=True)
class Topology:
    topics: tuple[TopicSpec, ...]
    subscriptions: tuple[SubscriptionSpec, ...]
    functions: tuple[str, ...]
    providers: tuple[str, ...]
    deadletter_topic: str
    ingress_template: str
    normalized_template: str
    provider_profiles: Mapping[str, Any] = field(default_factory=dict)
    freshness: Mapping[str, Any] = field(default_factory=dict)  # how often providers report, by default
    flapping: Mapping[str, Any] = field(default_factory=dict)  # how many changes in what window is flapping
    http_functions: tuple[str, ...] = ()  # called over HTTP by people and tools, not pushed to
    ingress_subscriptions: tuple[str, ...] = ("dcm-ingest-{provider}",)  # the subscriptions on each ingress topic
    nats: NatsSpec | None = None  # the NATS JetStream ingress, when declared
    exports: tuple[ExportSpec, ...] = ()  # BigQuery subscriptions: production only

    def topic(self, key: str, provider: str | None = None) -> str:
        return next(t.name for t in self.topics if t.key == key and t.provider == provider)

    def env(self) -> dict[str, str]:
        """The settings every function reads (shared/runtime/settings.py)."""
        return {
            "DCM_NORMALIZED_TOPIC_TEMPLATE": self.normalized_template,
            "DCM_TOPIC_CHANGED": self.topic("changed"),
            "DCM_TOPIC_DEADLETTER": self.deadletter_topic,
            "DCM_TOPIC_CALLBACKS": self.topic("callbacks"),
            "DCM_TOPIC_CALLBACKS_RETRY": self.topic("callbacks_retry"),
            "DCM_INGRESS_TOPIC_TEMPLATE": self.ingress_template,
            "DCM_PROVIDERS": ",".join(self.providers),
            # compact, keys sorted: byte for byte what Terraform's jsonencode() writes
            "DCM_PROVIDER_PROFILES": json.dumps(self.provider_profiles, separators=(",", ":"), sort_keys=True),
            "DCM_FRESHNESS": json.dumps(self.freshness, separators=(",", ":"), sort_keys=True),
            "DCM_FLAPPING": json.dumps(self.flapping, separators=(",", ":"), sort_keys=True),
            "DCM_TOPIC_PROVIDERS": self.topic("providers"),
            "DCM_TOPIC_REPLAY": self.topic("replay"),
            "DCM_INGRESS_SUBSCRIPTION": ",".join(self.ingress_subscriptions),
        }


def alert_after(value: str | int | bool | None) -> int | None:
    """``oldest_unacked_alert``: '300s' -> 300; false (or absent) -> None, no alert."""
    return None if value is False or value is None else seconds(value)


def _exports(doc: Mapping[str, Any]) -> tuple[ExportSpec, ...]:
    default = doc["defaults"].get("oldest_unacked_alert")
    return tuple(ExportSpec(name=e["name"], topic=doc["topics"][e["topic"]]["name"], topic_key=e["topic"],
                            dataset=e["dataset"], table=e["table"], event_schema=e["event_schema"],
                            oldest_unacked_alert=alert_after(e.get("oldest_unacked_alert", default)))
                 for e in doc.get("exports") or ())


# libyaml's parser (in PyYAML's wheels), safe as safe_load: topology.yaml in 2.4 ms of CPU instead of 28. The
# local stack, the CLI and the tests read it often (182 times in `make check`: 4.6 s of its CPU).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read(path: Path = TOPOLOGY_FILE) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=_SAFE_LOADER)


def _subscriptions(doc: dict[str, Any], spec: dict[str, Any], providers: tuple[str, ...],
                   ) -> list[SubscriptionSpec]:
    """The subscriptions one declaration makes: one per provider when its name holds ``{provider}``."""
    defaults = doc["defaults"]
    subs: list[SubscriptionSpec] = []
    topic_spec = doc["topics"][spec["topic"]]
    instances = providers if "{provider}" in spec["name"] else (None,)
    retry = {**defaults["retry_policy"], **spec.get("retry_policy", {})}
    dead_letter = bool(spec.get("dead_letter", True))
    dead_letter_key = spec.get("dead_letter_topic", "deadletter")
    for p in instances:
        subs.append(SubscriptionSpec(
            name=spec["name"].replace("{provider}", p) if p else spec["name"],
            topic=topic_spec["name"].replace("{provider}", p) if p else topic_spec["name"],
            topic_key=spec["topic"],
            push=spec.get("push"),
            enable_message_ordering=bool(spec.get("enable_message_ordering", False)),
            dead_letter=dead_letter,
            dead_letter_topic=doc["topics"][dead_letter_key]["name"] if dead_letter else None,
            ack_deadline_seconds=int(spec.get("ack_deadline_seconds", defaults["ack_deadline_seconds"])),
            max_delivery_attempts=int(spec.get("max_delivery_attempts", defaults["max_delivery_attempts"])),
            minimum_backoff=seconds(retry["minimum_backoff"]),
            maximum_backoff=seconds(retry["maximum_backoff"]),
            message_retention=seconds(spec.get("message_retention_duration",
                                               defaults["message_retention_duration"])),
            filter=spec.get("filter"),
            provider=p,
            oldest_unacked_alert=alert_after(spec.get("oldest_unacked_alert",
                                                      defaults.get("oldest_unacked_alert"))),
        ))
    return subs


def load(providers: Iterable[str] | None = None, path: Path = TOPOLOGY_FILE) -> Topology:
    doc = read(path)
    where = "" if providers is not None else f"{path.name}, providers: "
    providers = tuple(providers) if providers is not None else tuple(doc["providers"])
    for problem in filter(None, map(provider_name_problem, providers)):
        raise ConfigError(where + problem)
    topics: list[TopicSpec] = []
    for key, spec in doc["topics"].items():
        if spec.get("per_provider"):
            topics += [TopicSpec(key, spec["name"].replace("{provider}", p), p) for p in providers]
        else:
            topics.append(TopicSpec(key, spec["name"]))
    subs = [sub for spec in doc["subscriptions"] for sub in _subscriptions(doc, spec, providers)]
    return Topology(
        topics=tuple(topics),
        subscriptions=tuple(subs),
        functions=tuple(doc["functions"]),
        http_functions=tuple(n for n, f in doc["functions"].items() if (f or {}).get("http")),
        providers=providers,
        deadletter_topic=doc["topics"]["deadletter"]["name"],
        ingress_template=doc["topics"]["ingress"]["name"],
        normalized_template=doc["topics"]["normalized"]["name"],
        ingress_subscriptions=tuple(s["name"] for s in doc["subscriptions"] if s["topic"] == "ingress"),
        provider_profiles=doc.get("provider_profiles") or {},
        freshness=doc.get("freshness") or {},
        flapping=doc.get("flapping") or {},
        nats=_nats(doc.get("nats")),
        exports=_exports(doc),
    )
