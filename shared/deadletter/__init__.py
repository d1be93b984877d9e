"""deadletter: classify what failed (triage), keep it whole in Firestore, and replay it."""
