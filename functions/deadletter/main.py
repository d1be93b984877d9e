"""Cloud Function `deadletter`: thin entry point, all behaviour lives in shared.deadletter."""

import functions_framework

from shared import deadletter as use_case
from shared.entrypoint import pubsub_function


@functions_framework.cloud_event
@pubsub_function("deadletter", dead_letter_rejections=False)
def deadletter(message):
    use_case.handle(message)
