"""TensorBoard summaries beyond scalars, encoded by hand like the scalars of the event writer.

* histograms: ``Summary.Value.histo`` (a ``HistogramProto``), what TensorBoard's histogram and
  distribution dashboards and ``EventAccumulator.Histograms`` read;
* text: a string tensor with the ``text`` plugin's metadata (``EventAccumulator.Tensors``);
* hyper-parameters: the ``hparams`` plugin's ``experiment`` and ``session_start_info``
  summaries, as ``torch.utils.tensorboard``'s ``add_hparams`` writes them (the plugin's own
  ``metadata.parse_*_plugin_data`` read them back).

Field numbers are those of ``tensorboard/compat/proto/summary.proto``, ``tensor.proto`` and
``tensorboard/plugins/hparams/{api,plugin_data}.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from trainmon.core.events import Histogram, HparamValue

_MASK64 = (1 << 64) - 1
_pack_d = struct.Struct("<d").pack

HPARAMS_EXPERIMENT_TAG = "_hparams_/experiment"
HPARAMS_SESSION_START_TAG = "_hparams_/session_start_info"
_DT_FLOAT = 1
_DT_STRING = 7
_HPARAM_STRING, _HPARAM_BOOL, _HPARAM_FLOAT64 = 1, 2, 3
_DATA_CLASS_TENSOR = 3


def varint(value: int) -> bytes:
    """Protobuf base-128 varint (negatives as 64-bit two's complement)."""
    value &= _MASK64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): strings, bytes, messages, packed lists."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def _string(number: int, text: str) -> bytes:
    return _field(number, text.encode("utf-8", "backslashreplace"))


def _double(number: int, value: float) -> bytes:
    return varint(number << 3 | 1) + _pack_d(value)


def _uint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def _doubles(number: int, values: Iterable[float]) -> bytes:
    packed = b"".join(_pack_d(float(v)) for v in values)
    return _field(number, packed) if packed else b""


def _value(tag: str, body: bytes) -> bytes:
    """One ``Summary.value`` entry (field 1 of Summary): the tag, then ``body``'s fields."""
    return _field(1, _string(1, tag) + body)


def _metadata(plugin: str, content: bytes, data_class: int | None = None) -> bytes:
    """``Summary.Value.metadata`` (field 9): ``SummaryMetadata.plugin_data``."""
    plugin_data = _string(1, plugin) + (_field(2, content) if content else b"")
    body = _field(1, plugin_data)
    if data_class is not None:
        body += _uint(4, data_class)
    return _field(9, body)


def histogram_summary(record: Histogram) -> bytes:
    """A Summary with one ``histo`` value: TensorBoard's bucket ``i`` ends at ``edges[i+1]``."""
    finite = record.num > 0
    proto = b"".join(
        (
            _double(1, record.min if finite else 0.0),
            _double(2, record.max if finite else 0.0),
            _double(3, float(record.num)),
            _double(4, record.sum),
            _double(5, record.sum_squares),
            _doubles(6, record.edges[1:]),
            _doubles(7, record.counts),
        )
    )
    return _value(record.name, _field(5, proto))


def text_summary(tag: str, text: str) -> bytes:
    """A Summary with one scalar string tensor marked for the ``text`` plugin."""
    tensor = _uint(1, _DT_STRING) + _field(2, b"") + _field(8, text.encode("utf-8", "replace"))
    return _value(tag, _metadata("text", b"", _DATA_CLASS_TENSOR) + _field(8, tensor))


def _null_tensor() -> bytes:
    """``Summary.Value.tensor``: an empty float tensor of shape (0,), as the plugin writes."""
    shape = _field(2, _uint(1, 0))  # TensorShapeProto.dim[0].size = 0
    return _field(8, _uint(1, _DT_FLOAT) + _field(2, shape))


def _google_value(value: HparamValue) -> bytes:
    """``google.protobuf.Value``: number_value 2, string_value 3, bool_value 4."""
    if isinstance(value, bool):
        return _uint(4, int(value))
    if isinstance(value, (int, float)):
        return _double(2, float(value))
    return _string(3, value)


def _hparam_type(value: HparamValue) -> int:
    if isinstance(value, bool):
        return _HPARAM_BOOL
    if isinstance(value, (int, float)):
        return _HPARAM_FLOAT64
    return _HPARAM_STRING


def hparams_summaries(
    hparams: Mapping[str, HparamValue], metrics: Iterable[str], start_time: float
) -> list[bytes]:
    """The ``experiment`` Summary (hparam and metric names) and the ``session_start_info``
    Summary (this run's values), each with the ``hparams`` plugin's metadata."""
    hparam_infos = b"".join(
        _field(4, _string(1, name) + _uint(4, _hparam_type(value)))
        for name, value in hparams.items()
    )
    metric_infos = b"".join(_field(5, _field(1, _string(2, name))) for name in metrics)
    experiment = _field(2, hparam_infos + metric_infos)  # HParamsPluginData.experiment
    entries = b"".join(
        _field(1, _string(1, name) + _field(2, _google_value(value)))
        for name, value in hparams.items()
    )
    start = _field(3, entries + _double(5, start_time))  # HParamsPluginData.session_start_info
    version = _uint(1, 0)
    return [
        _value(
            HPARAMS_EXPERIMENT_TAG,
            _metadata("hparams", version + experiment, _DATA_CLASS_TENSOR) + _null_tensor(),
        ),
        _value(
            HPARAMS_SESSION_START_TAG,
            _metadata("hparams", version + start, _DATA_CLASS_TENSOR) + _null_tensor(),
        ),
    ]
