"""The NATS ingress: moves status CloudEvents from a JetStream stream onto each provider's ingress topic."""
