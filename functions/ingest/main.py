"""Cloud Function `ingest`: thin entry point, all behaviour lives in shared.ingest."""

import functions_framework

from shared import ingest as use_case
from shared.entrypoint import pubsub_function


@functions_framework.cloud_event
@pubsub_function("ingest")
def ingest(message):
    use_case.handle(message)
