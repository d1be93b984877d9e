"""Give their shard fields (``shard``; ``staleShard`` on resources) to the documents written before them
(docs/scale.md, "Deploying it"):

    python -m infra.backfill_shards --project PROJECT

Run once against the production database between the deploy that writes ``shard`` (and creates the
sharded indexes) and the one that reads by it; idempotent, so a rerun after an interruption finishes
the job. Uses the ambient Google credentials (a role that may read and update the two collections).
"""

from __future__ import annotations

import argparse
import sys

from shared.state.resources import backfill_shards


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.backfill_shards", description=__doc__.splitlines()[0])
    parser.add_argument("--project", required=True, help="the Google Cloud project of the Firestore database")
    parser.add_argument("--page", type=int, default=500, help="documents read (and at most written) per batch")
    parser.add_argument("--stale-shards", type=int, default=360,
                        help="the deployment's DCM_STALE_SHARDS (1..360, what upsert and the sweep use)")
    args = parser.parse_args(argv)
    if not 1 <= args.page <= 500:
        print("backfill_shards: --page must be 1..500 (a Firestore batch holds 500 writes)", file=sys.stderr)
        return 2
    if not 1 <= args.stale_shards <= 360:
        print("backfill_shards: --stale-shards must be 1..360 (the deployment's DCM_STALE_SHARDS)", file=sys.stderr)
        return 2
    from google.cloud import firestore

    try:
        done = backfill_shards(firestore.Client(project=args.project), args.page, args.stale_shards)
    except Exception as exc:  # one line, never a traceback: the job is idempotent, rerun it
        print(f"backfill_shards: stopped ({type(exc).__name__}: {str(exc)[:200]}); rerun to finish", file=sys.stderr)
        return 1
    print(", ".join(f"{collection}: {n} documents given their shard fields" for collection, n in done.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
