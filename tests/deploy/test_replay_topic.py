"""Issue 25, item 6, as Terraform deploys it: the replay topic, the one way into ingest that carries replay
markers, is pushed to ingest like an ingress topic, and no provider and no function may publish to it
(replay runs with the operator's identity, from the CLI)."""

from __future__ import annotations

from infra import topology as topo
from tests.deploy import tf


def test_no_provider_and_no_function_may_publish_to_the_replay_topic(terraform):
    got = tf.evaluate({"topics": "local.topics", "subscriptions": "local.subscriptions",
                       "grants": "local.function_publisher_grants", "env": "local.topology_env"}, {}, terraform)
    declared = topo.load()
    assert got["topics"]["replay"]["name"] == declared.topic("replay") == got["env"]["DCM_TOPIC_REPLAY"]
    [lane] = [s for s in got["subscriptions"].values() if s["topic_key"] == "replay"]
    assert lane["push"] == "ingest" and lane["dead_letter"]
    assert not [g for g in got["grants"].values() if g["topic"] == "replay"]  # no function publishes there
    # the provider grant is on ingress topics only (pubsub.tf), so never on the replay topic
    config = tf.load()
    grant = config.resource("google_pubsub_topic_iam_member", "provider_publisher")
    assert 't.key == "ingress"' in str(grant["for_each"])
    ingress = got["env"]["DCM_INGRESS_SUBSCRIPTION"].split(",")
    assert ingress == ["dcm-ingest-{provider}"] and lane["name"] not in ingress
