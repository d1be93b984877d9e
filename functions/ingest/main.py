"""Cloud Function `ingest`: a thin entry point; the behaviour lives in `shared/ingest/`."""

import functions_framework

from shared.ingest.handler import Ingest
from shared.runtime.entrypoint import pubsub_function

ingest = functions_framework.cloud_event(pubsub_function("ingest", Ingest.build, pass_arrival=True))
