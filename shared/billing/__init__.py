"""billing: store every status change as a transition; usage intervals, rate cards and
reports are computed from that set."""
