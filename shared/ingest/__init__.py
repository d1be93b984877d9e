"""ingest: validate a provider's CloudEvent, normalise it onto its resource type's status
vocabulary and forward it to upsert; what can never be valid is dead-lettered with its reason."""
