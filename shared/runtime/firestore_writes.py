"""A batch's writes encoded as the Firestore client library encodes them, for a fraction of its CPU (issue 42).

The library (google-cloud-firestore 2.x, ``_helpers.pbs_for_*``) builds every value as a proto-plus message and
converts each again into the request: 1.35 ms of CPU for the three documents of an applied change (ledger entry,
resource, transition), a tenth of upsert's CPU per event on the local stack. This fills the same protobuf in place:
0.15 ms (benchmarks/pipeline.py prints upsert's CPU per event against its minimal handler's).

Only what upsert writes takes this path: ``create``, ``set`` (no merge) and ``update`` whose keys are all plain
top-level field names, with values of JSON's kinds (strings, integers, floats, booleans, null, maps, lists: any other
value is encoded by the library's ``encode_value``, one value at a time) and top-level ``SERVER_TIMESTAMP`` and
``Increment`` transforms. Anything else (a dotted path, a nested or other transform, ``DELETE_FIELD``) is handed to
the library whole. tests/unit/test_firestore_writes.py checks, byte for byte, that every write equals the library's.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.types import write

_Write = write.Write.pb()
_Transform = write.DocumentTransform.FieldTransform.pb()
_REQUEST_TIME = write.DocumentTransform.FieldTransform.ServerValue.REQUEST_TIME
_PLAIN_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*\Z")  # a field name a field path writes unquoted


class _Unplain(Exception):
    """A value this module does not encode: the library encodes the whole write."""


def create(batch: Any, ref: Any, data: Mapping[str, Any]) -> None:
    """``batch.create(ref, data)``."""
    pb = _encoded_or_none(ref, data)
    if pb is None:
        batch.create(ref, data)
        return
    pb.current_document.exists = False
    _add(batch, pb)


def set(batch: Any, ref: Any, data: Mapping[str, Any]) -> None:  # noqa: A001 - the batch's own verb
    """``batch.set(ref, data)``: the whole document replaced."""
    pb = _encoded_or_none(ref, data)
    if pb is None:
        batch.set(ref, data)
        return
    _add(batch, pb)


def update(batch: Any, ref: Any, data: Mapping[str, Any], option: Any) -> None:
    """``batch.update(ref, data, option=option)`` (``option``: a precondition from ``client.write_option``)."""
    pb = _encoded_or_none(ref, data)
    if pb is None:
        batch.update(ref, data, option=option)
        return
    transformed = {t.field_path for t in pb.update_transforms}
    pb.update_mask.field_paths.extend(sorted(k for k in data if k not in transformed))
    option.modify_write(write.Write.wrap(pb))
    _add(batch, pb)


def _encoded_or_none(ref: Any, data: Mapping[str, Any]) -> Any:
    """The write of ``data`` to ``ref``, or None when the library is to encode it (``_Unplain``)."""
    try:
        return _document_write(ref, data)
    except _Unplain:
        return None


def _document_write(ref: Any, data: Mapping[str, Any]) -> Any:
    """The write of ``data`` to ``ref`` (no precondition, no mask), its transforms sorted by field as the
    library sorts them; ``_Unplain`` when a key or a value is not one this module encodes."""
    pb = _Write()
    pb.update.name = ref._document_path
    fields = pb.update.fields
    transforms = []
    for name, value in data.items():
        if not _PLAIN_NAME.match(name) or value is firestore.DELETE_FIELD:
            raise _Unplain(name)
        if value is firestore.SERVER_TIMESTAMP:
            transforms.append(_Transform(field_path=name, set_to_server_value=_REQUEST_TIME))
        elif isinstance(value, firestore.Increment):
            transforms.append(_Transform(field_path=name, increment=_helpers.encode_value(value.value)._pb))
        else:
            _fill(fields[name], value)
    transforms.sort(key=lambda t: t.field_path)
    pb.update_transforms.extend(transforms)
    return pb


def _fill(value_pb: Any, value: Any) -> None:
    """``value`` into the protobuf ``Value`` in place, as the library's ``encode_value`` builds it."""
    kind = type(value)
    if kind is str:
        value_pb.string_value = value
    elif value is None:
        value_pb.null_value = 0
    elif kind is bool:
        value_pb.boolean_value = value
    elif kind is int:
        value_pb.integer_value = value
    elif kind is float:
        value_pb.double_value = value
    elif isinstance(value, dict):
        _fill_map(value_pb, value)
    elif isinstance(value, (list, tuple)):
        values = value_pb.array_value.values
        value_pb.array_value.SetInParent()
        for item in value:
            _fill(values.add(), item)
    else:
        value_pb.CopyFrom(_encoded(value))


def _fill_map(value_pb: Any, value: dict) -> None:
    fields = value_pb.map_value.fields
    value_pb.map_value.SetInParent()
    for name, item in value.items():
        if not isinstance(name, str):
            raise _Unplain(name)  # the library's own error, raised by the library
        _fill(fields[name], item)


def _encoded(value: Any) -> Any:
    """A value of another kind (a datetime, bytes, a reference...), encoded by the library; a sentinel inside a
    map or a list is a nested transform, which only the library knows how to split off."""
    if value is firestore.SERVER_TIMESTAMP or value is firestore.DELETE_FIELD or isinstance(
            value, (firestore.Increment, firestore.ArrayUnion, firestore.ArrayRemove)):
        raise _Unplain(value)
    return _helpers.encode_value(value)._pb


def _add(batch: Any, pb: Any) -> None:
    """The encoded write into the batch, as ``batch.create``/``set``/``update`` add theirs (proto-plus wraps it
    without a copy)."""
    batch._add_write_pbs([write.Write.wrap(pb)])

