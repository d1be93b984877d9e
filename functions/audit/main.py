"""Cloud Function `audit`: a thin entry point; the behaviour lives in `shared/audit/`."""

import functions_framework

from shared.audit.handler import Audit
from shared.runtime.entrypoint import pubsub_function

audit = functions_framework.cloud_event(pubsub_function("audit", Audit.build))
