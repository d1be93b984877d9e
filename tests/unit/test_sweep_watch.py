"""When the sweep looks at a provider for silence (shared/sweep/handler.py ``Watch``): the bound on the next
look is the earliest moment a resource of that provider could pass its deadline."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from shared.runtime import settings
from shared.runtime.settings import ProviderProfile
from shared.sweep.handler import UNBOUNDED_LOOK, Watch

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)
HOURLY = {"report_every": "3600s", "grace": "300s"}


def watch_of(**profiles: ProviderProfile) -> Watch:
    return Watch(replace(settings.from_env(), freshness_default=HOURLY, provider_profiles=profiles))


def test_after_a_look_the_next_is_at_the_newest_deadline_seen():
    watch = watch_of()
    assert watch.due(["aws", "azure"], NOW, set()) == ["aws", "azure"]  # never looked at: due
    watch.looked("aws", {"staleAt": "2026-11-27T12:40:00Z"}, NOW)
    assert watch.due(["aws"], NOW + timedelta(minutes=39), set()) == []
    assert watch.due(["aws"], NOW + timedelta(minutes=40), set()) == ["aws"]
    assert watch.due(["aws"], NOW + timedelta(minutes=1), {"aws"}) == ["aws"]  # silent, or a resource stale


def test_with_no_deadline_in_the_future_the_next_look_is_the_shortest_deadline_its_resources_can_have_later():
    """A report after the look gives a deadline no earlier than the look + the shortest deadline of the
    provider's types (a type may have a shorter one than the provider)."""
    fast_disks = ProviderProfile(freshness={"types": {"volume": {"report_every": "120s", "grace": "30s"}}})
    watch = watch_of(aws=fast_disks)
    watch.looked("aws", None, NOW)
    watch.looked("azure", {"staleAt": "2026-11-27T11:00:00Z"}, NOW)  # silent: the past deadline bounds nothing
    assert watch.next_look == {"aws": NOW + timedelta(seconds=150), "azure": NOW + timedelta(seconds=3900)}


def test_a_provider_whose_resources_never_go_stale_is_looked_at_hourly():
    watch = Watch(replace(settings.from_env(), freshness_default={}, provider_profiles={}))
    assert watch.shortest_deadline("aws") == UNBOUNDED_LOOK
