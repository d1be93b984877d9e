"""Cloud Function `sweep`: a thin entry point; the behaviour lives in `shared/sweep/`."""

import functions_framework

from shared.runtime.entrypoint import pubsub_function
from shared.sweep.handler import Sweep

sweep = functions_framework.cloud_event(pubsub_function("sweep", Sweep.build))
