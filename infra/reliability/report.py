"""The reliability table as ``docs/reliability.md`` holds it."""

from __future__ import annotations

import os
import platform
from datetime import datetime, timezone

from infra.reliability.accounting import Row


def markdown(rows: list[Row], events: int) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    lines = ["# Reliability", "",
             f"Measured by `make reliability` (`python -m infra.reliability --events {events}`) on "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {machine}, with the official Pub/Sub and Firestore "
             "emulators. Every scenario starts on empty subscriptions and a fresh Firestore; `lost` looks every "
             "published message up; "
             "`wrong` compares every resource's final status with the last one reported.", "",
             "| scenario | published | applied | unchanged | duplicate | stale | dead-lettered | lost | wrong | 5xx "
             "| seconds | note |", "|---|" + "---:|" * 10 + "---|"]
    for r in rows:
        lines.append(f"| {r.scenario} | {r.published} | {r.applied} | {r.unchanged} | {r.duplicate} | {r.stale} | "
                     f"{r.deadlettered} | {r.lost} | {r.wrong} | {r.errors} | {r.seconds:.0f} | {r.note} |")
    lines += ["", "The fuzz row counts inputs, not messages: `applied` is what was forwarded or acked, "
              "`dead-lettered` what was rejected with a reason; `5xx` is a failing property (a function "
              "answering an error it would be retried for).", "",
              "`function killed` and `outage > retries` make pushes fail en masse. The local stack declares "
              "delivery so that the Pub/Sub emulator neither stops an ordered subscription nor strands a failed "
              "push (no ordering, no back-off, attempts spanning the declared schedule) and restarts a killed "
              "function server on its port: see `docs/local-stack.md`. A server its keeper brings back later "
              "than the retry schedule lasts (the note gives each one's seconds until it answered again) leaves "
              "messages as `delivery_exhausted` dead letters: both rows replay them as an operator does "
              "(`docs/operations.md#delivery-exhausted`) and account for the replays.", "",
              "`server killed under load` and `worker killed under load` kill upsert's gunicorn master, then "
              "one of its workers, halfway through a paced burst with pushes in flight: the keeper ends a dead "
              "server's orphaned workers before restarting it (they held its port), the emulator sends a push "
              "cut mid-request again, and one never answered is failed at the push deadline (the ack "
              "deadline, as in production): see `docs/local-stack.md`.", "",
              "`nats ingress killed` publishes its burst on NATS (the real nats-server), each provider as its own "
              "NATS identity, and kills the NATS ingress twice while it has messages delivered and not acked: "
              "JetStream delivers them again after ack_wait, a copy already on Pub/Sub is dropped as a duplicate "
              "by ingest and upsert: see `docs/nats.md`.", "",
              "`poisoned NATS provider` has one provider publish 1,000 messages Pub/Sub can never carry (a `ce-` "
              "header name over its 256-byte attribute key) and 1,000 valid ones on NATS while another publishes "
              "1,000 valid ones: the poisoned ones are dead-lettered as `oversize` without that header, every valid "
              "event is stored once, and the quiet provider's p99 is printed (a stream, a consumer and a budget of "
              "unsettled messages per provider: `docs/nats.md`, `docs/security.md` item 15).", ""]
    return "\n".join(lines)
