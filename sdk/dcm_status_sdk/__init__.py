"""dcm-status provider kit: report the observed state of the resources a provider runs.

    from dcm_status_sdk import Reporter, ReporterConfig

    with Reporter(ReporterConfig(project="my-project", provider="aws")) as reporter:
        reporter.report("vm", "i-0abc", "RUNNING", "VM is running.")

- ``Reporter``: fire-and-forget publishing, checked locally with ingest's own rules, debounced,
  rate limited, retried (``reporter.py``);
- ``MappingTable``: a cloud's raw states onto the generic enums, as data (``mapping.py``,
  ``mappings/*.json``);
- ``Reporter.report_values``: Cloud Native Events (O-RAN style) values, ``Value``/``DataType``;
- ``Rejected``/``Reason``: the errors and reason codes ingest dead-letters with;
- ``PublishRefused``/``Refusal``: what Pub/Sub refuses for good (no topic, no permission, no
  credentials, an invalid request), never retried; one line naming the provider and the fix.
"""

from dcm_status_contracts.cloud_native_event import DataType, Value
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.pubsub_binding import BindingMode
from dcm_status_contracts.status_report import ReportForm

from .mapping import MappedStatus, MappingTable
from .refusal import PublishRefused, Refusal
from .reporter import (
           Backlogged,
           FlushTimeout,
           Reporter,
           ReporterConfig,
           ResourceState,
           Stats,
)

__all__ = ["Backlogged", "BindingMode", "DataType", "Value", "FlushTimeout", "MappedStatus", "MappingTable", "PublishRefused", "Reason",
           "Refusal", "Rejected", "ReportForm", "Reporter", "ReporterConfig", "ResourceState", "Stats"]
__version__ = "0.1.0"
