"""Cloud Function `billing`: thin entry point, all behaviour lives in shared.billing."""

import functions_framework

from shared import billing as use_case
from shared.entrypoint import pubsub_function


@functions_framework.cloud_event
@pubsub_function("billing")
def billing(message):
    use_case.handle(message)
