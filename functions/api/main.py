"""Cloud Function `api` (HTTP): a thin entry point; the behaviour lives in `shared/api/`."""

import functions_framework

from shared.api.app import Api, check_identity_configured, unrouted
from shared.runtime import secretbox
from shared.runtime.entrypoint import http_function

# refuses to start without the keyring, or without what checks its callers' tokens (DCM_API_AUDIENCE)
api = functions_framework.http(http_function("api", Api.build,
                                             needs=(secretbox.check_configured, check_identity_configured)))
functions_framework.errorhandler(404)(unrouted)  # a path the framework itself cannot route (e.g. a newline in it)
