"""Fold the history written before issue 32 into the ledger (docs/api.md, "History"):

    python -m infra.backfill_history --project PROJECT

Run once against the production database after the deploy that writes history on the ledger entries (and
creates the indexes the history API reads them by); idempotent, so a rerun after an interruption finishes
the job, and a second run folds nothing. Until it has run, the history API and ``?at=`` show the updates
since that deploy only. Uses the ambient Google credentials (a role that may read both collections and
write the ledger).
"""

from __future__ import annotations

import sys

from infra.backfill_job import PAGE_WHY, Bounded, run
from shared.state.history import fold_history

PAGE = Bounded("--page", 250, 1, 500, "history entries read (and at most ledger entries written) per batch", PAGE_WHY)


def _fold(db, args) -> str:
    done = fold_history(db, args.page)
    return (f"history folded into the ledger: {done['updated']} ledger entries given their history, "
            f"{done['created']} created for expired ones, {done['kept']} already history")


def main(argv: list[str] | None = None) -> int:
    return run("backfill_history", __doc__, (PAGE,), _fold, argv)


if __name__ == "__main__":
    sys.exit(main())
