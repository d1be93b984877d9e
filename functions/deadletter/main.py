"""Cloud Function `deadletter`: a thin entry point; the behaviour lives in `shared/deadletter/`."""

import functions_framework

from shared.deadletter.handler import DeadLetter
from shared.runtime.entrypoint import pubsub_function

# Never publishes into its own topic: a rejection is logged and acked (the archive subscription keeps it).
deadletter = functions_framework.cloud_event(
    pubsub_function("deadletter", DeadLetter.build, deadletter_rejections=False))
