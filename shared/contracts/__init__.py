"""What crosses a topic, one module per contract with both directions (build and decode),
and the identities, schemas, errors and times they share. No I/O here."""
