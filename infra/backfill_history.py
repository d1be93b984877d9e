"""Fold the history written before issue 32 into the ledger (docs/api.md, "History"):

    python -m infra.backfill_history --project PROJECT

Run once against the production database after the deploy that writes history on the ledger entries (and
creates the indexes the history API reads them by); idempotent, so a rerun after an interruption finishes
the job, and a second run folds nothing. Until it has run, the history API and ``?at=`` show the updates
since that deploy only. Uses the ambient Google credentials (a role that may read both collections and
write the ledger).
"""

from __future__ import annotations

import argparse
import sys

from shared.state.history import fold_history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.backfill_history", description=__doc__.splitlines()[0])
    parser.add_argument("--project", required=True, help="the Google Cloud project of the Firestore database")
    parser.add_argument("--page", type=int, default=250,
                        help="history entries read (and at most ledger entries written) per batch")
    args = parser.parse_args(argv)
    if not 1 <= args.page <= 500:
        print("backfill_history: --page must be 1..500 (a Firestore batch holds 500 writes)", file=sys.stderr)
        return 2
    from google.cloud import firestore

    try:
        done = fold_history(firestore.Client(project=args.project), args.page)
    except Exception as exc:  # one line, never a traceback: the job is idempotent, rerun it
        print(f"backfill_history: stopped ({type(exc).__name__}: {str(exc)[:200]}); rerun to finish", file=sys.stderr)
        return 1
    print(f"history folded into the ledger: {done['updated']} ledger entries given their history, "
          f"{done['created']} created for expired ones, {done['kept']} already history")
    return 0


if __name__ == "__main__":
    sys.exit(main())
