"""The stored state: Firestore's collections and fields, what became of an update, which of two states
is newer, a hot resource's coalescing, and the newest state as the functions read it. Use cases import
it; it imports only ``contracts/``."""
