"""Cloud Function `upsert`: thin entry point, all behaviour lives in shared.upsert."""

import functions_framework

from shared import upsert as use_case
from shared.entrypoint import pubsub_function


@functions_framework.cloud_event
@pubsub_function("upsert")
def upsert(message):
    use_case.handle(message)
