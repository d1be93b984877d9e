"""Cloud Function `upsert`: a thin entry point; the behaviour lives in `shared/upsert/`."""

import functions_framework

from shared.runtime.entrypoint import pubsub_function
from shared.upsert.handler import Upsert

upsert = functions_framework.cloud_event(pubsub_function("upsert", Upsert.build))
