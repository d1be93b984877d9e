"""Cloud Function `audit`: thin entry point, all behaviour lives in shared.audit."""

import functions_framework

from shared import audit as use_case
from shared.entrypoint import pubsub_function


@functions_framework.cloud_event
@pubsub_function("audit")
def audit(message):
    use_case.handle(message)
