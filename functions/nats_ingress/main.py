"""The NATS ingress worker (not a push function): ``python -m functions.nats_ingress.main``; the behaviour
lives in `shared/nats_ingress/`, its settings in `shared/runtime/settings.py` (NATS_URL, ...)."""

import sys

from shared.nats_ingress.worker import main
from shared.runtime import settings  # noqa: F401 - the settings it reads (nats_from_env)

if __name__ == "__main__":
    sys.exit(main())
