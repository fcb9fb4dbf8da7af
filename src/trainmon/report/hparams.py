"""Hyper-parameters read back from TensorBoard event files (the ``hparams`` plugin).

``Monitor.log_hparams`` (like torch's ``add_hparams``) writes two summaries whose metadata
content is a serialised ``HParamsPluginData``: ``experiment`` (names and types only) and
``session_start_info`` (the run's values, a ``map<string, google.protobuf.Value>``). The reader
in :mod:`trainmon.report.tfevents` keeps those contents; here the values are decoded by hand,
as the event files themselves are (TensorBoard folders are read without TensorBoard or protobuf
installed, as trainmon writes them without), one code path whatever is installed. So
``compare`` and ``report`` show the same hyper-parameters for a TensorBoard folder as for the
run's journal.

TensorBoard holds every number as a double: an integer logged as ``3`` reads back as ``3.0``
(``hparam_differences`` counts them as the same value).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

#: A hyper-parameter as read back: TensorBoard holds every number as a double.
HparamValue = str | float | bool
_F64 = struct.Struct("<d").unpack_from
_SESSION_START_INFO = 3  # HParamsPluginData.session_start_info


class _Malformed(ValueError):
    """Bytes that are not an ``HParamsPluginData``."""


def read_hparams(contents: Iterable[bytes], notes: list[str]) -> dict[str, HparamValue]:
    """The hyper-parameters of every ``session_start_info`` in ``contents`` (in order; a later
    value of a key wins, as a later ``log_hparams`` does in the journal). An unreadable content
    is skipped and noted."""
    found: dict[str, HparamValue] = {}
    pending = list(contents)
    bad = 0
    for content in pending:
        try:
            found.update(decode_by_hand(content))
        except _Malformed:
            bad += 1
    if bad:
        notes.append(f"skipped {bad} unreadable TensorBoard hparams summary(ies)")
    return found


def decode_by_hand(content: bytes) -> dict[str, HparamValue]:
    """``HParamsPluginData.session_start_info.hparams`` decoded field by field (field numbers
    of ``tensorboard/plugins/hparams/plugin_data.proto`` and ``google/protobuf/struct.proto``);
    {} for the other summaries (``experiment``, ``session_end_info``)."""
    found: dict[str, HparamValue] = {}
    for number, start, end in _fields(content, 0, len(content)):
        if number != _SESSION_START_INFO or start < 0:
            continue
        for entry, entry_start, entry_end in _fields(content, start, end):
            if entry != 1 or entry_start < 0:  # SessionStartInfo.hparams (map entries)
                continue
            key = ""
            value: HparamValue = "None"
            for part, part_start, part_end in _fields(content, entry_start, entry_end):
                if part == 1 and part_start >= 0:
                    key = content[part_start:part_end].decode("utf-8", "replace")
                elif part == 2 and part_start >= 0:
                    value = _value_by_hand(content, part_start, part_end)
            found[key] = value
    return found


def _value_by_hand(buf: bytes, pos: int, end: int) -> HparamValue:
    """``google.protobuf.Value``: null 1, number 2 (double), string 3, bool 4."""
    value: HparamValue = "None"
    for number, start, stop in _fields(buf, pos, end):
        if number == 2 and stop - start == 8:
            value = float(_F64(buf, start)[0])
        elif number == 3 and start >= 0:
            value = buf[start:stop].decode("utf-8", "replace")
        elif number == 4:
            value = bool(stop)
    return value


def _fields(buf: bytes, pos: int, end: int) -> Iterable[tuple[int, int, int]]:
    """(field number, start, end) of each field of the message in ``buf[pos:end]``: the bytes
    of a length-delimited or fixed-size field; a varint's value as ``(number, -1, value)``."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, -1, value
            continue
        size = 8 if wire == 1 else 4 if wire == 5 else -1
        if wire == 2:
            size, pos = _varint(buf, pos, end)
        if size < 0 or pos + size > end:
            raise _Malformed(f"field {number}: wire type {wire} or length {size} out of place")
        yield number, pos, pos + size
        pos += size


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed("a varint runs past its message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
