"""What Pub/Sub refuses for good, and what to do about it.

Most publish failures pass (the service unavailable, a deadline, quota): the reporter retries them
with back-off. A few can never succeed however often they are retried, so retrying only hides them:
the provider's ingress topic does not exist, the credentials may not publish to it, there are no
valid credentials, Pub/Sub takes the request as invalid. ``refusal_of`` tells those apart;
``PublishRefused`` is the one error they become, naming the provider, the topic and the fix.
"""

from __future__ import annotations

import enum

from dcm_status_contracts.errors import DcmError

TERRAFORM_PROVIDERS = "cloud_providers"  # terraform/variables.tf: one ingress topic per name
TERRAFORM_PUBLISHERS = "provider_publishers"  # terraform/variables.tf: who may publish to a provider's topic


class Refusal(str, enum.Enum):
    """Why Pub/Sub will never take a publish, as it is configured now."""

    TOPIC_NOT_FOUND = "topic_not_found"
    PERMISSION_DENIED = "permission_denied"
    UNAUTHENTICATED = "unauthenticated"
    INVALID_ARGUMENT = "invalid_argument"

    @property
    def whole_topic(self) -> bool:
        """Every publish to the topic fails the same way (not only the reports of one request)."""
        return self is not Refusal.INVALID_ARGUMENT


def refusal_of(error: BaseException) -> Refusal | None:
    """The refusal ``error`` is, or None when it may pass (retry it)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(error, gexc.NotFound):
        return Refusal.TOPIC_NOT_FOUND
    if isinstance(error, gexc.PermissionDenied):
        return Refusal.PERMISSION_DENIED
    if isinstance(error, (gexc.Unauthenticated, auth_exc.DefaultCredentialsError)):
        return Refusal.UNAUTHENTICATED
    if isinstance(error, auth_exc.RefreshError) and not getattr(error, "retryable", False):
        return Refusal.UNAUTHENTICATED  # revoked or expired credentials: not a network blip
    if isinstance(error, gexc.InvalidArgument):
        return Refusal.INVALID_ARGUMENT
    return None


def hint(refusal: Refusal, provider: str, topic: str) -> str:
    """What to do, in one sentence."""
    project = topic.split("/")[1] if topic.startswith("projects/") else "?"
    return {
        Refusal.TOPIC_NOT_FOUND: (
            f"the provider {provider} has no ingress topic in project {project}: on the local stack run "
            f"'dcm-status provider add {provider}'; in production add \"{provider}\" to the Terraform variable "
            f"{TERRAFORM_PROVIDERS} and apply"),
        Refusal.PERMISSION_DENIED: (
            f"the credentials in use may not publish to it: in production give the provider's identity through "
            f"the Terraform variable {TERRAFORM_PUBLISHERS} (\"{provider}\" = \"serviceAccount:...\") and apply, "
            f"or run as the service account made for it"),
        Refusal.UNAUTHENTICATED: (
            "no valid Google Cloud credentials: run 'gcloud auth application-default login' or set "
            "GOOGLE_APPLICATION_CREDENTIALS; for the local stack set PUBSUB_EMULATOR_HOST "
            "(eval \"$(dcm-status env)\")"),
        Refusal.INVALID_ARGUMENT: (
            f"check the project ({project}) and the topic name; if they are right, Pub/Sub refused a report "
            f"the kit let through: please report it"),
    }[refusal]


class PublishRefused(DcmError):
    """Pub/Sub refused reports for good: they are not retried. ``str()`` is one line saying what to do."""

    def __init__(self, provider: str, topic: str, refusal: Refusal, detail: str, reports: int = 0):
        self.provider, self.topic, self.refusal, self.detail, self.reports = provider, topic, refusal, detail, reports
        self.hint = hint(refusal, provider, topic)
        what = f"{reports} report(s) not published" if reports else "nothing can be published"
        super().__init__(f"provider {provider}: Pub/Sub refused {topic} ({refusal.value}: {detail}), "
                         f"{what}; {self.hint}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return type(self), (self.provider, self.topic, self.refusal, self.detail, self.reports)

    @classmethod
    def of(cls, error: BaseException, refusal: Refusal, provider: str, topic: str,
           reports: int = 0) -> "PublishRefused":
        return cls(provider, topic, refusal, _first_line(getattr(error, "message", None) or error), reports)


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0][:200] if text else type(value).__name__
