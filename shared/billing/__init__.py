"""billing: keep the daily usage snapshot of the transitions upsert records with every change; usage
intervals, rate cards and reports are computed from that set."""
