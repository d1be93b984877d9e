"""How a function runs a tick of the sweep's topic (Cloud Scheduler publishes one a minute; the local stack's
keeper on its own timer: infra/topology.yaml ``sweep``). A tick says nothing but "now": its body is never read.
Every function pushed from that topic (the sweep, billing) runs its steps with ``run``: each due step on its
own, and a step that fails (Firestore or Pub/Sub down: ``Transient``) is logged and the tick acked all the
same: the next tick does the same work, and a tick redelivered or dead-lettered would only add noise.
"""

from __future__ import annotations

from datetime import datetime
from logging import Logger
from typing import Any, Callable, Iterable

from dcm_status_contracts.errors import Transient

# (what the step does, as its failure's line says it; whether it is due (falsy: skipped); the step, given now)
Step = tuple[str, Any, Callable[[datetime], Any]]


def run(log: Logger, name: str, now: datetime, steps: Iterable[Step]) -> None:
    """Each due step of a tick of ``name``, each on its own: a failure leaves the others their turn, and is
    logged "{name} tick failed to {what}" (the sweep's: the sweep_failures metric counts them)."""
    for what, due, step in steps:
        try:
            if due:
                step(now)
        except Transient as exc:
            log.warning(f"{name} tick failed to {what}", extra={"error": str(exc)})
