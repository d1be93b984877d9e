"""upsert: deduplicate, refuse stale updates, store state, history and outbox in one commit,
announce real changes; and the read side of that state."""
