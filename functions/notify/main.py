"""Cloud Function `notify`: a thin entry point; the behaviour lives in `shared/notify/`."""

import functions_framework

from shared.notify.handler import Notify
from shared.runtime import secretbox
from shared.runtime.entrypoint import pubsub_function

notify = functions_framework.cloud_event(pubsub_function("notify", Notify.build,
                                                         needs=(secretbox.check_configured,)))
