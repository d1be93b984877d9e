"""PLACEHOLDER until the dead-letter issue."""


def handle(message) -> None:
    return None
