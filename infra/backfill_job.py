"""How a one-off backfill over the production Firestore database runs from the command line
(infra/backfill_history.py, infra/backfill_shards.py): ``--project`` and bounded integer options, a mistake
said in one line (exit 2), a failure in one line asking for a rerun (exit 1: every backfill is idempotent),
never a traceback. The backfill's logic is shared/state's; this module imports nothing of ours.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Bounded:
    """An integer option of a backfill, refused outside ``low..high`` with ``why`` (what the bounds are)."""

    flag: str
    default: int
    low: int
    high: int
    help: str
    why: str

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


PAGE_WHY = "a Firestore batch holds 500 writes"


def run(module: str, doc: str, options: tuple[Bounded, ...], job: Callable[[Any, argparse.Namespace], str],
        argv: list[str] | None = None) -> int:
    """Parse ``argv`` for ``python -m infra.<module>``, open the project's database and print what ``job``
    (database, arguments) -> summary line did."""
    parser = argparse.ArgumentParser(prog=f"python -m infra.{module}", description=doc.splitlines()[0])
    parser.add_argument("--project", required=True, help="the Google Cloud project of the Firestore database")
    for option in options:
        parser.add_argument(option.flag, type=int, default=option.default, help=option.help)
    args = parser.parse_args(argv)
    for option in options:
        if not option.low <= getattr(args, option.dest) <= option.high:
            print(f"{module}: {option.flag} must be {option.low}..{option.high} ({option.why})", file=sys.stderr)
            return 2
    from google.cloud import firestore

    try:
        summary = job(firestore.Client(project=args.project), args)
    except Exception as exc:  # one line, never a traceback: the job is idempotent, rerun it
        print(f"{module}: stopped ({type(exc).__name__}: {str(exc)[:200]}); rerun to finish", file=sys.stderr)
        return 1
    print(summary)
    return 0
