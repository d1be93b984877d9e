"""``make reliability``: the pipeline's guarantees measured on the emulators, one line per scenario.

    python -m infra.reliability [--events 10000] [--quick] [--write docs/reliability.md]

Each scenario runs on a local stack of its own making (emulators, functions-framework servers,
push subscriptions, a fault proxy in front of Firestore), with Firestore emptied between scenarios,
and accounts for every message it published:

- ``applied + unchanged + duplicate + stale + dead-lettered = published``, from the pipeline's own
  counters;
- ``lost``: a valid event with neither a ledger entry, nor a place in its resource's ring of latest
  re-reports (a re-report of unchanged state writes no ledger entry; the ring holds the last
  ``RE_REPORT_RING``, the document's ``documentReReports`` counts the ones before: ``unaccounted``), nor a
  dead-letter entry, or an invalid one with no dead-letter entry, looked
  up one by one after the pipeline went quiet;
- ``wrong``: resources whose final status is not the last one their provider reported, as the API
  serves it and in the document lists read (a hot resource's, written by the sweep, within 20 s);
- ``5xx``: (fuzz) inputs a function answered with an error, i.e. would have retried.

It prints the table and, with ``--write``, writes it with the date and the machine to
``docs/reliability.md``.
"""
