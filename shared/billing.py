"""PLACEHOLDER until the billing issue: acks change events."""


def handle(message) -> None:
    return None
