"""DCM_LANES_PROJECT: the providers' lanes in a project of their own (docs/scale.md). Every publisher to a
lane (ingest, the sweep) builds the lane's path from the settings; unset, the lanes are in DCM_PROJECT."""

from __future__ import annotations

import pytest
from dcm_status_contracts.errors import ConfigError

from shared.runtime import settings
from shared.sweep.handler import Sweep

BASE = {"DCM_PROJECT": "main-project"}


def test_unset_the_lanes_are_in_the_functions_project():
    s = settings.from_env(BASE)
    assert s.lanes_project is None
    assert s.lane_path("aws") == "projects/main-project/topics/dcm-status-normalized-aws"
    assert s.topic_path(s.topic_changed) == "projects/main-project/topics/dcm-status-changed"


def test_set_only_the_lanes_move():
    s = settings.from_env({**BASE, "DCM_LANES_PROJECT": "lanes-project"})
    assert s.lane_path("aws") == "projects/lanes-project/topics/dcm-status-normalized-aws"
    assert s.topic_path(s.topic_changed) == "projects/main-project/topics/dcm-status-changed"
    assert s.topic_path(s.ingress_topic("aws")) == "projects/main-project/topics/dcm-status-ingress-aws"
    sweep = Sweep(s, db=None, publisher=None)
    assert sweep.lane("aws") == "projects/lanes-project/topics/dcm-status-normalized-aws"


@pytest.mark.parametrize("value", ["Lanes", "a/b", "lanes-project/topics/x", "x", "p" * 31, "lanes-", "9lanes"])
def test_a_value_that_is_no_project_id_is_refused_clearly(value):
    with pytest.raises(ConfigError, match="DCM_LANES_PROJECT must be a Google Cloud project id"):
        settings.from_env({**BASE, "DCM_LANES_PROJECT": value})


def test_ingest_publishes_each_update_to_its_providers_lane_in_the_lanes_project():
    from dcm_status_contracts.model import PubSubMessage
    from dcm_status_contracts.pubsub_binding import to_message
    from dcm_status_contracts.status_report import ReportForm, build_event

    from shared.ingest.handler import Ingest

    published = []

    class Publisher:
        def publish(self, topic, data, ordering_key="", **attributes):
            published.append(topic)

            class Done:
                def result(self, timeout=None):
                    return "1"
            return Done()

    s = settings.from_env({**BASE, "DCM_LANES_PROJECT": "lanes-project", "DCM_PROVIDERS": "aws"})
    data, attrs = to_message(build_event("aws", "vm", "i-1", "RUNNING", event_id="e1",
                                                time="2026-11-22T09:00:00Z", form=ReportForm.CURRENT))
    Ingest(s, Publisher())(PubSubMessage(data, attrs, "m1", "2026-11-22T09:00:01Z", "dcm-status-ingress-aws"))
    assert published == ["projects/lanes-project/topics/dcm-status-normalized-aws"]
