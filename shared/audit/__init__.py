"""audit: a record of every "instance stopped" change (a filtered fan-out consumer)."""
