"""The NATS ingress worker (not a push function): ``python -m functions.nats_ingress.main``; the behaviour
lives in `shared/nats_ingress/`, its settings in `shared/runtime/nats_settings.py` (NATS_URL, NATS_STREAM_NAME, ...)."""

import sys

from shared.nats_ingress.worker import main
from shared.runtime import nats_settings, settings

if __name__ == "__main__":
    sys.exit(main(settings.from_env, nats_settings.nats_from_env))
