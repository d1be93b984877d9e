"""Cloud Function `api` (HTTP): a thin entry point; the behaviour lives in `shared/api/`."""

import functions_framework

from shared.api.app import Api, unrouted
from shared.runtime import secretbox
from shared.runtime.entrypoint import http_function

api = functions_framework.http(http_function("api", Api.build, needs=(secretbox.check_configured,)))
functions_framework.errorhandler(404)(unrouted)  # a path the framework itself cannot route (e.g. a newline in it)
