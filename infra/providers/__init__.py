"""Reference providers: bridges from a cloud's own API to DCM status events."""
