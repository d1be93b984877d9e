"""sweep: what the platform finds out on a schedule (today: reconciling providers' snapshots)."""
