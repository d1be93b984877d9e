"""The local stack: the official emulators, the function servers under their keepers, the fault proxy
that cuts Firestore, and a verifying webhook receiver."""
