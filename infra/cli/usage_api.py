"""The CLI as a client of the status API's ``/v1/usage`` (``dcm-status billing report --api URL``): the rows
the api computes with the same code as a local report (shared/state/usage/report.py), read page by page.

The caller's identity: ``DCM_API_TOKEN`` (a Google ID token for the api's audience, e.g. ``gcloud auth
print-identity-token``), else an ID token from the Google credentials in ``GOOGLE_APPLICATION_CREDENTIALS``
for the URL; none against a local stack (local mode)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any, Sequence

import requests
from dcm_status_contracts import timeutil

API_BY = {"tenant": "tenant", "provider": "provider", "resourceType": "type", "resource": "resource"}
PAGE_SIZE = 5000
TIMEOUT = 120.0  # a report over a quarter of a large fleet: 92 days of its daily usage snapshot


class UsageApiError(Exception):
    pass


@dataclass(frozen=True)
class Usage:
    rows: list[dict[str, Any]]
    counted_until: datetime


def _day(dt: datetime, option: str) -> str:
    if dt.time() != time(0) or dt.utcoffset():
        raise UsageApiError(f"{option}: with --api a UTC day (YYYY-MM-DD, or a time at UTC midnight), got "
                            f"{timeutil.format(dt)}")
    return dt.date().isoformat()


@dataclass(frozen=True)
class ApiUsage:
    url: str
    token: str | None = None

    @classmethod
    def from_env(cls, url: str) -> "ApiUsage":
        token = os.environ.get("DCM_API_TOKEN") or None
        if token is None and os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
            from google.auth.transport.requests import Request
            from google.oauth2 import id_token

            token = id_token.fetch_id_token(Request(), url.rstrip("/"))
        return cls(url.rstrip("/"), token)

    def report(self, start: datetime, end: datetime | None, by: Sequence[str], rate_card: str | None) -> Usage:
        if len(by) != 1 or by[0] not in API_BY:
            raise UsageApiError(f"--by: with --api one of {', '.join(API_BY)} (got {', '.join(by)})")
        params: dict[str, Any] = {"from": _day(start, "--from"), "by": API_BY[by[0]], "pageSize": PAGE_SIZE}
        if end is not None:
            params["to"] = _day(end, "--to")
        if rate_card:
            params["rates"] = rate_card
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        rows: list[dict[str, Any]] = []
        until = None
        while True:
            try:
                got = requests.get(f"{self.url}/v1/usage", params=params, headers=headers, timeout=TIMEOUT)
            except requests.RequestException as exc:
                raise UsageApiError(f"{self.url}: {exc}") from exc
            if got.status_code != 200:
                try:
                    detail = got.json().get("detail", got.text[:300])
                except ValueError:
                    detail = got.text[:300]
                raise UsageApiError(f"{self.url}/v1/usage answered {got.status_code}: {detail}")
            body = got.json()
            rows += body["rows"]
            until = until or body["countedUntil"]
            if not body.get("nextPageToken"):
                return Usage(rows, timeutil.parse(until))
            params["pageToken"] = body["nextPageToken"]
