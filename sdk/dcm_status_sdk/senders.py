"""How the reporter's batches reach Pub/Sub: one Publish RPC per batch through the client library
(``_Batches``), or one publish per report through any other publisher (``_OneByOne``, a test's)."""

from __future__ import annotations

from typing import Any

from .refusal import PublishRefused, refusal_of


def pubsub_client(project: str, provider: str, topic_name: str) -> Any:
    """The client library's publisher; PublishRefused (how to get credentials) when it cannot be made."""
    from google.cloud import pubsub_v1

    try:
        return pubsub_v1.PublisherClient()
    except Exception as exc:  # no credentials: PublishRefused says how to get some
        refusal = refusal_of(exc)
        if refusal is None:
            raise
        topic = f"projects/{project}/topics/{topic_name}"
        raise PublishRefused.of(exc, refusal, provider, topic) from exc


class _Batches:
    """One Publish RPC per batch, whatever resources it holds.

    The client library's own batching keeps one batch per ordering key, so with a key per
    resource every report would be an RPC of its own (measured: 7% of the unkeyed throughput,
    benchmarks/provider_kit.py). The coalescer keeps one publish per resource in flight, so the
    order of a resource's reports holds across batches."""

    MAX_BYTES = 9 * 1024 * 1024  # the API takes 10 MB per request

    def __init__(self, client: Any, timeout: float):
        from google.api_core import exceptions as gexc
        from google.api_core.retry import Retry, if_exception_type
        from google.pubsub_v1 import PubsubMessage
        from google.pubsub_v1.services.publisher import PublisherClient as Gapic

        self._client, self._message, self._publish = client, PubsubMessage, Gapic.publish
        self._timeout = timeout
        self._retry = Retry(initial=0.1, maximum=5.0, multiplier=2.0, timeout=timeout, predicate=if_exception_type(
            gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.Aborted,
            gexc.ResourceExhausted, gexc.Unknown, gexc.Cancelled))

    def send(self, topic: str, messages: list[tuple[bytes, dict[str, str], str]]) -> dict[str, BaseException]:
        """The keys whose publish failed, with the error."""
        failures: dict[str, BaseException] = {}
        batch: list[Any] = []
        size = 0
        for data, attrs, key in messages:
            if batch and size + len(data) > self.MAX_BYTES:
                failures.update(self._send(topic, batch))
                batch, size = [], 0
            batch.append(self._message(data=data, attributes=attrs, ordering_key=key))
            size += len(data)
        failures.update(self._send(topic, batch))
        return failures

    def _send(self, topic: str, batch: list[Any]) -> dict[str, BaseException]:
        try:
            self._publish(self._client, request={"topic": topic, "messages": batch}, retry=self._retry,
                          timeout=self._timeout)
        except Exception as exc:
            return {m.ordering_key: exc for m in batch}
        return {}


class _OneByOne:
    """Any publisher with the client library's ``publish(topic, data, ordering_key, **attrs)`` (a test's)."""

    def __init__(self, client: Any, timeout: float):
        self._client, self._timeout = client, timeout

    def send(self, topic: str, messages: list[tuple[bytes, dict[str, str], str]]) -> dict[str, BaseException]:
        """The keys whose publish failed, with the error."""
        futures = [(key, self._client.publish(topic, data, ordering_key=key, timeout=self._timeout, **attrs))
                   for data, attrs, key in messages]
        failures: dict[str, BaseException] = {}
        for key, future in futures:
            try:
                future.result(timeout=self._timeout)
            except Exception as exc:
                failures[key] = exc
                resume = getattr(self._client, "resume_publish", None)
                if resume is not None:
                    resume(topic, key)  # the client library pauses a key whose publish failed
        return failures


def sender_for(publisher: Any, timeout: float) -> Any:
    """How reports reach ``publisher``: in batches (the client library's), or one by one (any other, a test's)."""
    from google.cloud import pubsub_v1

    kind = _Batches if isinstance(publisher, pubsub_v1.PublisherClient) else _OneByOne
    return kind(publisher, timeout)
