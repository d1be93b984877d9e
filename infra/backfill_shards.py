"""Give their shard fields (``shard``; ``staleShard`` on resources) to the documents written before them
(docs/scale.md, "Deploying it"):

    python -m infra.backfill_shards --project PROJECT

Run once against the production database between the deploy that writes ``shard`` (and creates the
sharded indexes) and the one that reads by it; idempotent, so a rerun after an interruption finishes
the job. Uses the ambient Google credentials (a role that may read and update the two collections).
"""

from __future__ import annotations

import sys

from infra.backfill_job import PAGE_WHY, Bounded, run
from shared.state.resources import backfill_shards

OPTIONS = (Bounded("--page", 500, 1, 500, "documents read (and at most written) per batch", PAGE_WHY),
           Bounded("--stale-shards", 360, 1, 360, "the deployment's DCM_STALE_SHARDS (1..360, what upsert and the "
                   "sweep use)", "the deployment's DCM_STALE_SHARDS"))


def _backfill(db, args) -> str:
    done = backfill_shards(db, args.page, args.stale_shards)
    return ", ".join(f"{collection}: {n} documents given their shard fields" for collection, n in done.items())


def main(argv: list[str] | None = None) -> int:
    return run("backfill_shards", __doc__, OPTIONS, _backfill, argv)


if __name__ == "__main__":
    sys.exit(main())
