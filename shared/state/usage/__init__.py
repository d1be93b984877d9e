"""Usage from status changes: the transition sets billing stores (``transitions``), the intervals they make
(``intervals``), rate cards (``rates``) and the report over a window (``report``): one computation, read by
billing's CLI report, the demo and the api's ``/v1/usage`` (shared/api/usage.py). Beneath the use cases:
billing writes the transitions, the api reads them, neither imports the other."""
