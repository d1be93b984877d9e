"""The functions' publisher (shared/runtime/clients.py SyncPublisher): one Publish call in the caller's thread,
the message as the library would send it, a failure a Transient (issue 32)."""

from __future__ import annotations

import threading

import pytest
from dcm_status_contracts.errors import Transient
from google.api_core import exceptions as gexc

from shared.runtime import publishing
from shared.runtime.clients import SyncPublisher, publisher_client


class FakeGapic:
    """The generated client's ``publish``: records each call and the thread it ran in."""

    def __init__(self, fail: Exception | None = None):
        self.calls: list[dict] = []
        self.fail = fail

    def publish(self, topic, messages, retry, timeout):
        self.calls.append({"topic": topic, "messages": list(messages), "timeout": timeout,
                           "thread": threading.get_ident()})
        if self.fail is not None:
            raise self.fail

        class Response:
            message_ids = [f"id-{len(self.calls)}"]

        return Response()


def test_a_publish_is_one_call_in_the_callers_thread_with_key_attributes_and_timeout():
    gapic = FakeGapic()
    threads_before = threading.active_count()
    message_id = publishing.publish(SyncPublisher(gapic), "projects/p/topics/t", b"{}", {"key": "k"}, ordering_key="k")
    assert message_id == "id-1"
    (call,) = gapic.calls
    assert call["thread"] == threading.get_ident() and threading.active_count() == threads_before
    (message,) = call["messages"]
    assert (call["topic"], message.data, message.ordering_key) == ("projects/p/topics/t", b"{}", "k")
    assert message.attributes["key"] == "k" and "traceparent" not in message.attributes  # no span current
    assert call["timeout"] == publishing.PUBLISH_TIMEOUT_SECONDS


def test_a_failed_publish_is_transient_and_needs_no_resume():
    publisher = SyncPublisher(FakeGapic(fail=gexc.ServiceUnavailable("down")))
    with pytest.raises(Transient):
        publishing.publish(publisher, "projects/p/topics/t", b"{}", {}, ordering_key="k")
    publishing.publish(SyncPublisher(FakeGapic()), "projects/p/topics/t", b"{}", {}, ordering_key="k")


def test_the_functions_publisher_is_the_synchronous_one(monkeypatch):
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1")  # no credentials needed to build it
    assert isinstance(publisher_client(), SyncPublisher)
