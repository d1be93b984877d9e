"""The api's reports over the stored state (issue 40): billing's usage rows (``/v1/usage``, JSON pages or all
as CSV) and the sweep's per-minute trends (``/v1/trends``). The request parsing is in shared/api/usage.py and
shared/api/trends.py; the api (shared/api/app.py) routes here."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import flask
from dcm_status_contracts import timeutil

from shared.api.params import Params
from shared.api.trends import TrendsRequest
from shared.api.usage import CSV_TYPE, Format, Kept, UsageRequest, page
from shared.state import trends as trend_store
from shared.state.usage import report as usage_report
from shared.state.usage.rates import RateCard


class Reporting:
    """``/v1/usage`` and ``/v1/trends``: each answers a request with a response."""

    def __init__(self, db: Any, rate_cards: Mapping[str, RateCard], options: Mapping[str, Any],
                 respond: Callable[[Any], flask.Response]):
        self.db = db
        self.rate_cards = dict(rate_cards)  # /v1/usage's ?rates=NAME: the deployment's cards (DCM_RATE_CARDS)
        self.usage_of = Kept(self._compute)  # a window's usage, computed once per instance per few minutes
        self.options = options
        self.respond = respond

    def _compute(self, start: Any, end: Any) -> tuple[list[usage_report.ResourceUsage], Any]:
        now = timeutil.now()
        return usage_report.resource_usage(self.db, start, end, now=now, options=self.options), min(end, now)

    def usage(self, request: flask.Request) -> flask.Response:
        """Billing's usage rows (docs/billing.md "Usage over the API"): the same rows as ``dcm-status billing
        report --by ... --json`` for the window, paged as JSON or all as CSV."""
        p = Params(request.args, ("from", "to", "by", "rates", "format", "pageSize", "pageToken"))
        ask = UsageRequest.parse(p, request.headers.get("Accept", ""), timeutil.now().date(), self.rate_cards)
        card = self.rate_cards.get(ask.rates) if ask.rates else None
        computed = self.usage_of.get(*ask.window)
        rows = usage_report.aggregate(computed.usages, [ask.by.column], daily=True, rates=card)
        if ask.format is Format.CSV:
            header = usage_report.columns_for([ask.by.column], daily=True, rated=card is not None)
            response = flask.Response(usage_report.to_csv(rows, header, line_end="\r\n"), 200,
                                      content_type=f"{CSV_TYPE}; charset=utf-8; header=present")
            response.headers["Content-Disposition"] = (f'attachment; filename="usage-{ask.start}-{ask.end}-'
                                                       f'{ask.by.value}.csv"')
            response.headers["Cache-Control"] = "no-store"
            return response
        chunk, token = page(rows, ask.by, ask.page_size, ask.page_token)
        return self.respond({"from": ask.start.isoformat(), "to": ask.end.isoformat(), "by": ask.by.value,
                             "column": ask.by.column, "countedUntil": timeutil.format(computed.counted_until),
                             "rates": ask.rates, "currency": card.currency if card else None,
                             "rows": chunk, "nextPageToken": token, "total": usage_report.totals(rows)})

    def trends(self, request: flask.Request) -> flask.Response:
        """The sweep's per-minute counts (shared/state/trends.py), oldest first."""
        p = Params(request.args, ("since", "step", "provider"))
        ask = TrendsRequest.parse(p, timeutil.now())
        minutes = trend_store.read(self.db, ask.since, ask.until, self.options)
        return self.respond({"since": timeutil.format(ask.since), "until": timeutil.format(ask.until),
                             "step": ask.step, **trend_store.bucket(minutes, ask.since, ask.until, ask.step,
                                                                  ask.provider)})
