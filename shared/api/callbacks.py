"""The callbacks' registry (shared/callbacks/registry.py) as the api serves it: who acts is the api's
caller (shared/api/callers.py), and, called with none, the operator (the CLI, with Firestore
credentials: an admin)."""

from __future__ import annotations

from typing import Any

from shared.api.callers import LOCAL, Caller, require_identity
from shared.callbacks.registry import Registry

OPERATOR = "operator"  # the owner the operator's CLI records (outside the local stack)


class Callbacks(Registry):
    def __init__(self, db: Any, local_mode: bool, *args: Any, **options: Any):
        super().__init__(db, local_mode, *args, operator=Caller(LOCAL if local_mode else OPERATOR, admin=True),
                         identify=require_identity, **options)
