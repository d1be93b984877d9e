"""How a function runs on Google Cloud: the ack/retry entry point, Pub/Sub push decoding,
push authentication, settings, clients, publishing, Firestore policy and structured logs."""
