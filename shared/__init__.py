"""dcm-status common library: everything the stateless functions share.

Layout: ``runtime/`` is how a function runs on Google Cloud, ``contracts/`` is
what crosses a topic (its own distribution, imported as ``dcm_status_contracts`` by
the platform and the provider kit alike, never as ``shared.contracts``), ``state/``
is what is stored in Firestore and its rules, and each function under ``functions/``
has the package of the same name here (``ingest``, ``upsert``, ``deadletter``,
``billing``, ``audit``, ...).

The rule: use-case packages import ``runtime/``, ``contracts/`` and ``state/``, never each
other; code that needs two use cases (the CLI, the demo, operator reads such
as the pipeline's accounting) lives in ``infra/``.
"""

__version__ = "0.1.0"
