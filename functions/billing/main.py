"""Cloud Function `billing`: a thin entry point; the behaviour lives in `shared/billing/` (pushed the sweep's
ticks: infra/topology.yaml)."""

import functions_framework

from shared.billing.handler import Billing
from shared.runtime.entrypoint import pubsub_function

billing = functions_framework.cloud_event(pubsub_function("billing", Billing.build))
