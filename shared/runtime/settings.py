"""Runtime settings of the functions, read once from the environment.

The deployers set these from ``infra/topology.yaml``: the local stack
(``infra/local/stack.py``) and Terraform (``terraform/functions.tf``). A test checks
that the defaults below agree with the topology declaration.
"""

from __future__ import annotations

import enum
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from dcm_status_contracts import limits, timeutil
from dcm_status_contracts.errors import ConfigError
from dcm_status_contracts.ingress import (
    INGRESS_SUBSCRIPTION_TEMPLATE,
    INGRESS_TOPIC_TEMPLATE,
    REPLAY_TOPIC_NAME,
    Origins,
)
from dcm_status_contracts.outputs import Redaction

from shared.state.documents import STALE_SHARDS, FlapPolicy
from shared.state.usage.rates import RateCard, RateCardError


@dataclass(frozen=True)
class ProviderProfile:
    """How one provider speaks, when it is not the generic contract (``provider_profiles`` in
    ``infra/topology.yaml``): its own status vocabulary, and the other names it gives itself in
    ``source = dcm/providers/{name}``."""

    vocabulary: str | None = None
    names: tuple[str, ...] = ()
    freshness: Mapping[str, Any] = field(default_factory=dict)  # {report_every, grace, types: {TYPE: {...}}}


def _profiles(text: str) -> dict[str, ProviderProfile]:
    try:
        doc = json.loads(text or "{}")
        return {str(p): ProviderProfile(v.get("vocabulary"), tuple(v.get("names", ())), v.get("freshness") or {})
                for p, v in doc.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise ConfigError(f"DCM_PROVIDER_PROFILES must be a JSON object of provider profiles: {exc}") from exc


def _freshness(text: str) -> Mapping[str, Any]:
    try:
        doc = json.loads(text or "{}")
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        for key in ("report_every", "grace"):
            if key in doc:
                timeutil.duration_seconds(doc[key])
        return doc
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"DCM_FRESHNESS must be a JSON object {{report_every, grace}}: {exc}") from exc


def _flapping(text: str) -> FlapPolicy:
    try:
        doc = json.loads(text or "{}")
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        return FlapPolicy.from_dict(doc)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"DCM_FLAPPING must be a JSON object {{changes, window}}: {exc}") from exc


class TraceExporter(enum.StrEnum):
    """Where the spans go (DCM_TRACE_EXPORTER; shared/runtime/tracing.py, docs/tracing.md)."""

    NONE = "none"  # spans made (their ids in the logs), none exported: the default
    FILE = "file"  # JSON lines under DCM_TRACE_DIR, one file per process: the local stack
    CLOUD_TRACE = "cloud_trace"  # Google Cloud Trace: production (terraform/functions.tf)


def _trace_exporter(env: Mapping[str, str]) -> TraceExporter:
    value = env.get("DCM_TRACE_EXPORTER", "") or TraceExporter.NONE.value
    try:
        exporter = TraceExporter(value)
    except ValueError:
        raise ConfigError(f"DCM_TRACE_EXPORTER must be one of {', '.join(TraceExporter)}, got {value[:40]!r}") from None
    if exporter is TraceExporter.FILE and not env.get("DCM_TRACE_DIR"):
        raise ConfigError("DCM_TRACE_EXPORTER=file needs DCM_TRACE_DIR, the directory of the span files")
    return exporter


def _bounded(env: Mapping[str, str], name: str, default: float, high: float, what: str) -> float:
    """A number from 0 to ``high`` (``what`` names it in the error), ``default`` when unset."""
    text = env.get(name, "") or str(default)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= high:
        raise ConfigError(f"{name} must be {what}, got {text[:40]!r}")
    return value


def _ratio(env: Mapping[str, str], name: str) -> float:
    return _bounded(env, name, 1, 1.0, "a number from 0 to 1")


def _redaction(text: str | None) -> Redaction:
    try:
        return Redaction.parse(text)
    except ValueError as exc:
        raise ConfigError(f"DCM_OUTPUT_REDACT: {exc}") from exc


@dataclass(frozen=True)
class Settings:
    project: str
    normalized_topic_template: str  # one lane per provider: "dcm-status-normalized-{provider}"
    topic_changed: str
    topic_deadletter: str
    ingress_topic_template: str
    ledger_ttl_days: int
    deadletter_ttl_days: int
    max_event_bytes: int
    local_mode: bool
    push_audience: str | None
    push_service_account: str | None
    provider_profiles: Mapping[str, ProviderProfile] = field(default_factory=dict)
    max_clock_skew_seconds: int = 300  # an event time further ahead than this is clamped to the receive time
    providers: tuple[str, ...] = ()  # the providers of the topology (the api counts resources per provider)
    feed_settle_seconds: float = 2.0  # the change feed serves a change this long after its commit
    stream_seconds: float = 300.0  # a live stream ends after this long; EventSource reconnects at once
    topic_callbacks: str = "dcm-status-callbacks"
    topic_callbacks_retry: str = "dcm-status-callbacks-retry"
    topic_replay: str = REPLAY_TOPIC_NAME  # only the replay path publishes here; ingest trusts its replay markers
    ingress_subscriptions: tuple[str, ...] = (INGRESS_SUBSCRIPTION_TEMPLATE,)  # subscriptions on each ingress topic
    hook_timeout_seconds: float = 10.0  # a receiver that has not answered by then has failed this attempt
    callback_concurrency: int = 8  # calls at once to one fast receiver from one instance (first lane)
    freshness_default: Mapping[str, Any] = field(default_factory=dict)  # topology.yaml's freshness
    flapping: FlapPolicy = FlapPolicy()  # topology.yaml's flapping
    topic_providers: str = "dcm-status-providers"
    hook_ports: tuple[int, ...] = ()  # ports a hook may call beside its scheme's 443/80 (DCM_HOOK_PORTS)
    callback_keys_secret: str | None = None  # the keyring's Secret Manager version (DCM_CALLBACK_KEYS_SECRET)
    callback_keys_file: str | None = None  # ... or its file, locally (DCM_CALLBACK_KEYS_FILE): secretbox.py
    # The api's callers (shared/api/callers.py) and what each may hold (docs/api.md "Security")
    api_admins: tuple[str, ...] = ()  # identities that may change any callback (DCM_API_ADMINS, comma-separated)
    api_iap: bool = False  # behind IAP: the caller is IAP's signed X-Goog-IAP-JWT-Assertion (DCM_API_IAP)
    # the audiences a caller's Google ID token may be for (DCM_API_AUDIENCE, comma-separated: Terraform sets the
    # api's URL and var.api_token_audiences), and IAP's (DCM_API_IAP_AUDIENCE, /projects/NUMBER/...)
    api_audiences: tuple[str, ...] = ()
    api_iap_audience: str | None = None
    max_callbacks_per_caller: int = 100
    max_callbacks: int = 10_000
    min_rotation_grace_seconds: int = 60  # a rotation's previous secret signs at least this long
    # upsert reads the callbacks' summary (shared/callbacks/summary.py) at most once per this many seconds;
    # a callback registered less than this ago can miss a change (docs/callbacks.md). The local stack: 0.
    callback_view_ttl_seconds: float = 10.0
    max_streams: int = 100  # open /v1/changes/stream per api instance
    max_streams_per_caller: int = 10  # ... and per caller on one instance
    trace_exporter: TraceExporter = TraceExporter.NONE  # DCM_TRACE_EXPORTER (docs/tracing.md)
    trace_dir: str | None = None  # DCM_TRACE_DIR: the span files, when the exporter is "file"
    trace_sample_ratio: float = 1.0  # DCM_TRACE_SAMPLE_RATIO: the share of new traces recorded
    # output values readers see as "[redacted]" (DCM_OUTPUT_REDACT: key names and JSON pointers, or "none")
    output_redaction: Redaction = field(default_factory=Redaction.default)
    # the project of the providers' lanes (their normalized topics and upsert's subscriptions to them), so that
    # 5,000 providers fit Pub/Sub's topics and subscriptions per project (docs/scale.md); None: this project
    lanes_project: str | None = None  # DCM_LANES_PROJECT (Terraform lanes_project)
    # The aggregates' snapshots (shared/state/snapshots.py): the sweep writes the fleet summary every tick
    # (its schedule: every minute, infra/topology.yaml; the local stack ticks every tick_seconds and says so)
    # and the accounting, which counts the whole ledger, this often; the api serves them.
    summary_every_seconds: int = 60  # DCM_SUMMARY_EVERY_SECONDS: the sweep's period
    # the index ranges of the resources' freshness deadline (staleShard: docs/scale.md), upsert's and the
    # sweep's alike; fewer on a local stack, whose emulator scans each value of an "in" on its own
    stale_shards: int = 360  # DCM_STALE_SHARDS, 1..360 (shared/state/documents.py STALE_SHARDS)
    stats_every_seconds: int = 900  # DCM_STATS_EVERY_SECONDS
    # DCM_SEARCH_COUNT_ROWS: a search's withCounts reads its rows' statuses in one pass when they are at most this
    # many (0: never; its counts are aggregations, one read per 1,000 resources each). The local stack's emulator
    # scans the whole collection for every query, each count per status included (shared/api/queries.py)
    search_count_rows: int = 0
    # DCM_TRENDS_EVERY_SECONDS: how often the sweep counts the current minute's trends (0: never; by default the
    # summary's period). Each count is one aggregation per provider and outcome over the sharded ledger
    trends_every_seconds: int = 60
    # DCM_USAGE_EVERY_SECONDS: how often the sweep brings the daily usage snapshot up to date (0: never; then a
    # usage computation reads every transition). Longer: fewer chunk rewrites, more transitions read per call.
    usage_every_seconds: int = 300
    # the rate cards /v1/usage prices with, by name (DCM_RATE_CARDS: name=file,...; files of the deployment,
    # read at start: a request names a card, never a file)
    rate_cards: Mapping[str, RateCard] = field(default_factory=dict)

    def profile(self, provider: str) -> ProviderProfile:
        return self.provider_profiles.get(provider) or ProviderProfile()

    def stale_after(self, provider: str, resource_type: str) -> int | None:
        """Seconds after its last report a resource of this provider and type is no longer known to be
        as shown (report_every + grace: the type's, else the provider's, else the default); None: never."""
        own = self.profile(provider).freshness
        layers = [own.get("types", {}).get(resource_type, {}), own, self.freshness_default]
        every = next((layer["report_every"] for layer in layers if "report_every" in layer), None)
        if every is None:
            return None
        grace = next((layer["grace"] for layer in layers if "grace" in layer), 0)
        return timeutil.duration_seconds(every) + timeutil.duration_seconds(grace)

    def topic_path(self, topic: str) -> str:
        return f"projects/{self.project}/topics/{topic}"

    @property
    def origins(self) -> Origins:
        """What a message's origin proves, with these settings' names (which provider a topic is for:
        ``topic_provider``)."""
        return Origins(self.ingress_topic_template, self.ingress_subscriptions, self.topic_replay)

    def ingress_topic(self, provider: str) -> str:
        return self.ingress_topic_template.replace("{provider}", provider)

    def normalized_topic(self, provider: str) -> str:
        """The provider's lane to upsert (its own subscription: a flooding neighbour does not hold it up)."""
        return self.normalized_topic_template.replace("{provider}", provider)

    def lane_path(self, provider: str) -> str:
        """The full path of the provider's lane: in the lanes project when one is set (``DCM_LANES_PROJECT``),
        else in this one. Every publisher to a lane builds its path here."""
        return f"projects/{self.lanes_project or self.project}/topics/{self.normalized_topic(provider)}"


def _ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.replace(" ", "").split(",") if p)
    except ValueError:
        ports = (0,)
    if any(not 0 < p < 65536 for p in ports):
        raise ConfigError(f"DCM_HOOK_PORTS must be comma-separated TCP ports (e.g. 8443,9443), got {text[:80]!r}")
    return ports


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    return _bounded(env, name, default, 3600.0, "seconds from 0 to 3600")


PROJECT_ID = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")  # Google Cloud's project id rule


def _lanes_project(env: Mapping[str, str]) -> str | None:
    """DCM_LANES_PROJECT: a project id, or unset (the lanes live in DCM_PROJECT)."""
    value = env.get("DCM_LANES_PROJECT", "")
    if value and not PROJECT_ID.fullmatch(value):
        raise ConfigError(f"DCM_LANES_PROJECT must be a Google Cloud project id (6-30 of a-z, 0-9, '-'), "
                          f"got {value[:40]!r}")
    return value or None


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


EMULATOR_HOSTS = ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST")


def local_mode(env: Mapping[str, str]) -> bool:
    """DCM_LOCAL_MODE: exactly "1" on the local emulator stack (no push token check; plain-http and loopback
    hooks), unset or "0" in production. Any other value is refused, not guessed; so is "1" on Cloud Run
    (K_SERVICE set) unless both emulators are configured: it would turn push authentication off in production."""
    value = env.get("DCM_LOCAL_MODE", "")
    if value in ("", "0"):
        return False
    if value != "1":
        raise ConfigError(f"DCM_LOCAL_MODE must be 1 (the local emulator stack) or unset, got {value!r}")
    if env.get("K_SERVICE") and not all(env.get(host) for host in EMULATOR_HOSTS):
        raise ConfigError(f"DCM_LOCAL_MODE=1 on Cloud Run (K_SERVICE={env['K_SERVICE']!r}) without "
                          f"{' and '.join(EMULATOR_HOSTS)}: local mode turns push authentication off; "
                          "unset it (Terraform never sets it)")
    return True


def _template(env: Mapping[str, str], name: str, default: str) -> str:
    """A topic template of the environment: it must name ``{provider}``."""
    value = env.get(name, default)
    if "{provider}" not in value:
        raise ConfigError(f"{name} must contain '{{provider}}', got {value!r}")
    return value


def _api_callers(env: Mapping[str, str]) -> dict[str, Any]:
    """Who the api lets in (its admins, the audiences of the tokens it verifies) and how much each may hold."""
    return dict(
        api_admins=tuple(a.strip() for a in env.get("DCM_API_ADMINS", "").split(",") if a.strip()),
        api_iap=_flag(env, "DCM_API_IAP"),
        api_audiences=tuple(a.strip() for a in env.get("DCM_API_AUDIENCE", "").split(",") if a.strip()),
        api_iap_audience=env.get("DCM_API_IAP_AUDIENCE", "").strip() or None,
        max_callbacks_per_caller=int(env.get("DCM_MAX_CALLBACKS_PER_CALLER", "100")),
        max_callbacks=int(env.get("DCM_MAX_CALLBACKS", "10000")),
        max_streams=int(env.get("DCM_MAX_STREAMS", "100")),
        max_streams_per_caller=int(env.get("DCM_MAX_STREAMS_PER_CALLER", "10")),
    )


def _topics(env: Mapping[str, str]) -> dict[str, Any]:
    """The topics' and subscriptions' names (infra/topology.yaml's, as the deployer set them)."""
    return dict(
        ingress_topic_template=_template(env, "DCM_INGRESS_TOPIC_TEMPLATE", INGRESS_TOPIC_TEMPLATE),
        normalized_topic_template=_template(env, "DCM_NORMALIZED_TOPIC_TEMPLATE", "dcm-status-normalized-{provider}"),
        topic_changed=env.get("DCM_TOPIC_CHANGED", "dcm-status-changed"),
        topic_deadletter=env.get("DCM_TOPIC_DEADLETTER", "dcm-status-deadletter"),
        topic_callbacks=env.get("DCM_TOPIC_CALLBACKS", "dcm-status-callbacks"),
        topic_callbacks_retry=env.get("DCM_TOPIC_CALLBACKS_RETRY", "dcm-status-callbacks-retry"),
        topic_replay=env.get("DCM_TOPIC_REPLAY", REPLAY_TOPIC_NAME),
        ingress_subscriptions=tuple(
            s for s in env.get("DCM_INGRESS_SUBSCRIPTION", INGRESS_SUBSCRIPTION_TEMPLATE).split(",") if s),
        topic_providers=env.get("DCM_TOPIC_PROVIDERS", "dcm-status-providers"),
    )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings the deployer put in the environment (``os.environ`` unless given)."""
    env = os.environ if env is None else env
    project = env.get("DCM_PROJECT") or env.get("GOOGLE_CLOUD_PROJECT")
    if not project:
        raise ConfigError("set DCM_PROJECT (or GOOGLE_CLOUD_PROJECT) to the Google Cloud project id")
    return Settings(
        project=project,
        **_topics(env),
        ledger_ttl_days=int(env.get("DCM_LEDGER_TTL_DAYS", "7")),
        deadletter_ttl_days=int(env.get("DCM_DEADLETTER_TTL_DAYS", "30")),
        max_event_bytes=int(env.get("DCM_MAX_EVENT_BYTES", str(limits.MAX_EVENT_BYTES))),
        local_mode=local_mode(env),
        push_audience=env.get("DCM_PUSH_AUDIENCE") or None,
        push_service_account=env.get("DCM_PUSH_SERVICE_ACCOUNT") or None,
        provider_profiles=_profiles(env.get("DCM_PROVIDER_PROFILES", "")),
        max_clock_skew_seconds=int(env.get("DCM_MAX_CLOCK_SKEW_SECONDS", "300")),
        providers=tuple(p for p in env.get("DCM_PROVIDERS", "").split(",") if p),
        feed_settle_seconds=float(env.get("DCM_FEED_SETTLE_SECONDS", "2")),
        stream_seconds=float(env.get("DCM_STREAM_SECONDS", "300")),
        hook_timeout_seconds=float(env.get("DCM_HOOK_TIMEOUT_SECONDS", "10")),
        callback_concurrency=int(env.get("DCM_CALLBACK_CONCURRENCY", "8")),
        freshness_default=_freshness(env.get("DCM_FRESHNESS", "")),
        flapping=_flapping(env.get("DCM_FLAPPING", "")),
        hook_ports=_ports(env.get("DCM_HOOK_PORTS", "")),
        callback_keys_secret=env.get("DCM_CALLBACK_KEYS_SECRET") or None,
        callback_keys_file=env.get("DCM_CALLBACK_KEYS_FILE") or None,
        **_api_callers(env),
        min_rotation_grace_seconds=int(env.get("DCM_MIN_ROTATION_GRACE_SECONDS", "60")),
        callback_view_ttl_seconds=_seconds(env, "DCM_CALLBACK_VIEW_TTL", 10.0),
        trace_exporter=_trace_exporter(env),
        trace_dir=env.get("DCM_TRACE_DIR") or None,
        trace_sample_ratio=_ratio(env, "DCM_TRACE_SAMPLE_RATIO"),
        output_redaction=_redaction(env.get("DCM_OUTPUT_REDACT")),
        lanes_project=_lanes_project(env),
        summary_every_seconds=integer(env, "DCM_SUMMARY_EVERY_SECONDS", 60),
        search_count_rows=integer(env, "DCM_SEARCH_COUNT_ROWS", 0, minimum=0),
        stale_shards=_stale_shards(env),
        stats_every_seconds=integer(env, "DCM_STATS_EVERY_SECONDS", 900),
        trends_every_seconds=integer(env, "DCM_TRENDS_EVERY_SECONDS", integer(env, "DCM_SUMMARY_EVERY_SECONDS", 60),
                                     minimum=0),
        usage_every_seconds=integer(env, "DCM_USAGE_EVERY_SECONDS", 300, minimum=0),
        rate_cards=_rate_cards(env.get("DCM_RATE_CARDS", "")),
    )


RATE_CARD_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


def _rate_cards(text: str) -> dict[str, RateCard]:
    """DCM_RATE_CARDS: the rate cards by name, either a JSON object ``{name: card}`` (Terraform's ``rate_cards``,
    jsonencoded) or ``name=path`` pairs, comma-separated, each a rate card file of the deployment
    (examples/rates.yaml; the local stack's). ConfigError for a bad name, a missing file or a card that does not
    parse: the api does not start with a card it cannot price by."""
    text = text.strip()
    if text.startswith("{"):
        try:
            given = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"DCM_RATE_CARDS is not a JSON object of rate cards: {exc}") from exc
        pairs = list(given.items())
    else:
        pairs = []
        for pair in (p.strip() for p in text.split(",") if p.strip()):
            name, sep, path = pair.partition("=")
            if not sep or not path.strip():
                raise ConfigError(f"DCM_RATE_CARDS must be a JSON object or name=path pairs, got {pair[:80]!r}")
            pairs.append((name.strip(), path.strip()))
    cards: dict[str, RateCard] = {}
    for name, card in pairs:
        if not isinstance(name, str) or not RATE_CARD_NAME.fullmatch(name):
            raise ConfigError(f"DCM_RATE_CARDS: a card's name is lower-case letters, digits, - and _ (at most 40), "
                              f"got {str(name)[:80]!r}")
        if name in cards:
            raise ConfigError(f"DCM_RATE_CARDS names {name!r} twice")
        try:
            cards[name] = RateCard.load(card) if isinstance(card, str) else RateCard.from_dict(card)
        except (OSError, RateCardError) as exc:
            raise ConfigError(f"DCM_RATE_CARDS {name}: {exc}") from exc
    return cards


def _stale_shards(env: Mapping[str, str]) -> int:
    value = integer(env, "DCM_STALE_SHARDS", STALE_SHARDS)
    if value > STALE_SHARDS:
        raise ConfigError(f"DCM_STALE_SHARDS must be 1 to {STALE_SHARDS} (what the index declares), got {value}")
    return value


def integer(env: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    try:
        value = int(env.get(name) or default)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{name} must be an integer of at least {minimum}, got {env.get(name)!r}")
    return value
