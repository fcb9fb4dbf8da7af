"""A fast reader of the scalars in TensorBoard event files, with no TensorFlow or protobuf.

An event file is a sequence of TFRecords (``uint64 length``, ``uint32 masked crc``, ``data``,
``uint32 masked crc``), each holding one serialised ``Event``. Only the few fields a scalar
needs are decoded by hand:

* ``Event``: ``wall_time`` (1, double), ``step`` (2, int64), ``summary`` (5);
* ``Summary``: repeated ``value`` (1);
* ``Summary.Value``: ``tag`` (1), ``simple_value`` (2, float), ``metadata`` (9: its
  ``plugin_data.plugin_name``, and for the ``hparams`` plugin its ``content``, decoded by
  :mod:`trainmon.report.hparams`) and ``tensor`` (8: a 0-d numeric ``TensorProto``, as written
  by TensorFlow 2 and newer writers).

The usual value (``tag`` then ``simple_value``, as torch's ``SummaryWriter``, tensorboardX,
DeepSpeed and trainmon write it) takes a fast path. Images, histograms, audio, text and other
plugins' tensors are counted and skipped. Both CRCs of every record (the length's and the
data's, masked CRC-32C as TFRecord defines them) are checked unless ``verify=False`` (the CLI's
``--fast``): a flipped bit is then reported as a damaged file instead of read as real data. A
record cut short by a killed (or still running) writer ends the file cleanly; so does a corrupt
one, and the note says which it was.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmon.report.wallclock import StepClock

_U64 = struct.Struct("<Q").unpack_from
_F32 = struct.Struct("<f").unpack_from
_F64 = struct.Struct("<d").unpack_from
_U32 = struct.Struct("<I").unpack_from

try:
    from crc32c import crc32c as _crc_function
except ImportError:  # a core dependency; without it records are read unchecked (and noted)
    _crc_function = None  # type: ignore[assignment]
_CRC: Any = _crc_function

#: TensorProto dtype → struct format of one element (bfloat16 is handled on its own).
_DTYPE_FORMATS = {
    1: "<f",  # DT_FLOAT
    2: "<d",  # DT_DOUBLE
    3: "<i",  # DT_INT32
    4: "<B",  # DT_UINT8
    5: "<h",  # DT_INT16
    6: "<b",  # DT_INT8
    9: "<q",  # DT_INT64
    10: "<?",  # DT_BOOL
    17: "<H",  # DT_UINT16
    19: "<e",  # DT_HALF
    22: "<I",  # DT_UINT32
    23: "<Q",  # DT_UINT64
}
_DT_BFLOAT16 = 14
_SCALAR_PLUGINS = ("", "scalars")


class _Corrupt(Exception):
    """A record's bytes do not parse as an Event."""


@dataclass
class EventScalars:
    """The scalars of one or more event files: per tag, steps and values in file order."""

    tags: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    first_time: float | None = None
    last_time: float | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    """Non-scalar summaries skipped, per tag (images, histograms, text, ...)."""
    problems: list[str] = field(default_factory=list)
    """Files cut short or corrupt: where reading stopped."""
    clock: StepClock = field(default_factory=StepClock)
    """Each step's wall time (that of its first scalar event), for the wall-time axis."""
    hparams_data: list[bytes] = field(default_factory=list)
    """The ``hparams`` plugin's content (a serialised ``HParamsPluginData``) of each of its
    summaries, in file order: the run's hyper-parameters, kept out of :attr:`skipped`."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise _Corrupt("varint runs past the end")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            raise _Corrupt("varint longer than 10 bytes")
    if result >= 1 << 63:
        result -= 1 << 64
    return result, pos


def _skip(buf: bytes, pos: int, key: int) -> int:
    """Position after the value of a field with ``key``, whatever its wire type."""
    wire = key & 7
    if wire == 0:
        return _varint(buf, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        length, pos = _varint(buf, pos)
        return pos + length
    if wire == 5:
        return pos + 4
    raise _Corrupt(f"unsupported wire type {wire}")


def _key(buf: bytes, pos: int) -> tuple[int, int]:
    key = buf[pos]
    if key < 0x80:
        return key, pos + 1
    return _varint(buf, pos)


def _plugin_data(buf: bytes, pos: int, end: int) -> tuple[str, bytes]:
    """``SummaryMetadata.plugin_data``: its ``plugin_name`` (empty when absent) and, for the
    ``hparams`` plugin only (the one whose content is read), its ``content``."""
    while pos < end:
        key, pos = _key(buf, pos)
        if key == 0x0A:  # plugin_data
            length, pos = _varint(buf, pos)
            inner, inner_end = pos, pos + length
            name = ""
            content = b""
            while inner < inner_end:
                inner_key, inner = _key(buf, inner)
                if inner_key in (0x0A, 0x12):  # plugin_name, content
                    size, inner = _varint(buf, inner)
                    if inner_key == 0x0A:
                        name = buf[inner : inner + size].decode("utf-8", "replace")
                    else:
                        content = buf[inner : inner + size]
                    inner += size
                else:
                    inner = _skip(buf, inner, inner_key)
            return name, content if name == "hparams" else b""
        pos = _skip(buf, pos, key)
    return "", b""


def _packed(buf: bytes, pos: int, end: int, fmt: str, size: int) -> list[float]:
    return [float(struct.unpack_from(fmt, buf, p)[0]) for p in range(pos, end - size + 1, size)]


def _tensor_scalar(buf: bytes, pos: int, end: int) -> float | None:
    """The value of a 0-d (or one-element) numeric ``TensorProto``; None for anything else."""
    dtype = 0
    count = 1
    content = b""
    values: list[float] = []
    while pos < end:
        key, pos = _key(buf, pos)
        if key == 0x08:  # dtype
            dtype, pos = _varint(buf, pos)
        elif key == 0x12:  # tensor_shape
            length, pos = _varint(buf, pos)
            shape_pos, shape_end = pos, pos + length
            pos = shape_end
            while shape_pos < shape_end:
                shape_key, shape_pos = _key(buf, shape_pos)
                if shape_key == 0x12:  # dim
                    dim_len, shape_pos = _varint(buf, shape_pos)
                    dim_pos, dim_end = shape_pos, shape_pos + dim_len
                    shape_pos = dim_end
                    size = 0
                    while dim_pos < dim_end:
                        dim_key, dim_pos = _key(buf, dim_pos)
                        if dim_key == 0x08:
                            size, dim_pos = _varint(buf, dim_pos)
                        else:
                            dim_pos = _skip(buf, dim_pos, dim_key)
                    count *= size
                else:
                    shape_pos = _skip(buf, shape_pos, shape_key)
        elif key == 0x22:  # tensor_content
            length, pos = _varint(buf, pos)
            content = buf[pos : pos + length]
            pos += length
        elif key == 0x2A:  # float_val, packed
            length, pos = _varint(buf, pos)
            values += _packed(buf, pos, pos + length, "<f", 4)
            pos += length
        elif key == 0x2D:  # float_val, one
            values.append(_F32(buf, pos)[0])
            pos += 4
        elif key == 0x32:  # double_val, packed
            length, pos = _varint(buf, pos)
            values += _packed(buf, pos, pos + length, "<d", 8)
            pos += length
        elif key == 0x31:
            values.append(_F64(buf, pos)[0])
            pos += 8
        elif key in (0x3A, 0x52, 0x5A, 0x6A):  # int_val, int64_val, bool_val, half_val packed
            length, pos = _varint(buf, pos)
            stop = pos + length
            while pos < stop:
                number, pos = _varint(buf, pos)
                values.append(_half_bits(number, dtype) if key == 0x6A else float(number))
        elif key in (0x38, 0x50, 0x58, 0x68):
            number, pos = _varint(buf, pos)
            values.append(_half_bits(number, dtype) if key == 0x68 else float(number))
        else:
            pos = _skip(buf, pos, key)
    if count != 1 or (dtype not in _DTYPE_FORMATS and dtype != _DT_BFLOAT16):
        return None
    if content:
        if dtype == _DT_BFLOAT16:
            return float(_F32(b"\x00\x00" + content[:2])[0]) if len(content) >= 2 else None
        fmt = _DTYPE_FORMATS[dtype]
        if len(content) < struct.calcsize(fmt):
            return None
        return float(struct.unpack_from(fmt, content)[0])
    return values[0] if len(values) == 1 else None


def _half_bits(bits: int, dtype: int) -> float:
    """``half_val`` holds the 16 bits of a half or a bfloat16 in an int32."""
    raw = (bits & 0xFFFF).to_bytes(2, "little")
    if dtype == _DT_BFLOAT16:
        return float(_F32(b"\x00\x00" + raw)[0])
    return float(struct.unpack("<e", raw)[0])


class EventFileReader:
    """Reads the scalars of event files into one :class:`EventScalars`.

    ``tag_prefix`` is put in front of every tag of the next file (used when two folders of one
    run hold the same tag).
    """

    def __init__(self, *, verify: bool = True) -> None:
        self.verify = verify and _CRC is not None
        self.result = EventScalars()
        if verify and _CRC is None:
            self.result.problems.append(
                "CRCs not checked: the crc32c package is not installed (pip install crc32c)"
            )
        self._by_bytes: dict[bytes, tuple[list[int], list[float]]] = {}
        self._ignored: tuple[list[int], list[float]] = ([], [])
        """Where values of tags known not to be scalars go (emptied after each file)."""
        self._by_prefix: dict[bytes, tuple[list[int], list[float]]] = {}
        self._plugins: dict[str, str] = {}
        self._prefix = ""

    def read(self, path: Path, tag_prefix: str = "") -> None:
        """Add the scalars of one event file; stop cleanly at a truncated or corrupt record."""
        if tag_prefix != self._prefix:
            self._by_prefix = {}
            self._by_bytes = {}
            self._prefix = tag_prefix
        data = path.read_bytes()
        size = len(data)
        pos = 0
        result = self.result
        events = self._event
        by_prefix = self._by_prefix
        ignored = self._ignored
        last_start = -1
        start = 12
        clock = result.clock
        note_time = clock.add
        clock_step = clock.steps[-1] if len(clock) else None
        verify = self.verify
        view = memoryview(data)
        try:
            while pos + 12 <= size:
                (length,) = _U64(data, pos)
                start = pos + 12
                end = start + length
                if end + 4 > size:
                    # past the end: cut short by a writer, or a damaged length (its CRC says)
                    if verify and _masked(_CRC(view[pos : pos + 8])) != _U32(data, pos + 8)[0]:
                        raise _Corrupt("its length fails its CRC")
                    break
                if (
                    verify
                    and (
                        (((crc := _CRC(view[start:end])) >> 15 | crc << 17) + 0xA282EAD8)
                        & 0xFFFFFFFF
                    )
                    != _U32(data, end)[0]
                ):
                    # a damaged length inside the file also lands here: the data CRC of the
                    # misplaced record fails
                    raise _Corrupt(
                        "its length fails its CRC"
                        if _masked(_CRC(view[pos : pos + 8])) != _U32(data, pos + 8)[0]
                        else "its data fails its CRC"
                    )
                pos = end + 4
                # Fast path, one scalar per event (torch, tensorboardX, DeepSpeed): wall_time,
                # step, summary { value { tag, simple_value } } with one-byte lengths.
                if data[start] == 0x09 and data[start + 9] == 0x10:
                    p = start + 10
                    step = data[p]
                    if step < 0x80:
                        p += 1
                    elif data[p + 1] < 0x80:
                        step = (step & 0x7F) | (data[p + 1] << 7)
                        p += 2
                    elif data[p + 2] < 0x80:
                        step = (step & 0x7F) | ((data[p + 1] & 0x7F) << 7) | (data[p + 2] << 14)
                        p += 3
                    elif data[p + 3] < 0x80:  # DeepSpeed's samples pass 2**21 soon
                        step = (
                            (step & 0x7F)
                            | ((data[p + 1] & 0x7F) << 7)
                            | ((data[p + 2] & 0x7F) << 14)
                            | (data[p + 3] << 21)
                        )
                        p += 4
                    else:
                        step, p = _varint(data, p)
                    target = by_prefix.get(data[p : end - 4])
                    if target is None and (
                        end - p < 0x80
                        and data[p] == 0x2A
                        and data[p + 1] == end - p - 2
                        and data[p + 2] == 0x0A
                        and data[p + 3] == end - p - 4
                        and data[p + 4] == 0x0A
                        and data[p + 5] == end - p - 11
                        and data[end - 5] == 0x15
                    ):
                        tag = data[p + 6 : end - 5].decode("utf-8", "replace")
                        target = self._target(tag, None) or ignored
                        by_prefix[data[p : end - 4]] = target
                    if target is not None:
                        if target is not ignored:
                            target[0].append(step)
                            target[1].append(_F32(data, end - 4)[0])
                            if step != clock_step:
                                clock_step = step
                                note_time(step, _F64(data, start + 1)[0])
                            if last_start < 0:
                                self._note_time(_F64(data, start + 1)[0])
                            last_start = start
                        continue
                if last_start >= 0:  # the time span so far ends at the last fast record
                    self._note_time(_F64(data, last_start + 1)[0])
                    last_start = -1
                events(data, start, end)
                clock_step = clock.steps[-1] if len(clock) else None
        except (_Corrupt, IndexError, struct.error, UnicodeDecodeError) as exc:
            result.problems.append(
                f"{path.name}: corrupt record at byte {start - 12} "
                f"({exc or type(exc).__name__}): the file is damaged (garbage, not a record "
                "still being written); read what came before it"
            )
        else:
            if pos != size:
                result.problems.append(
                    f"{path.name}: last record cut short at byte {pos} of {size} "
                    + (
                        "(a writer still running or killed); read every complete record"
                        if verify
                        else "(a writer still running or killed, or damage: --fast skipped the "
                        "CRC checks that tell them apart); read every complete record"
                    )
                )
        if last_start >= 0:
            self._note_time(_F64(data, last_start + 1)[0])
        ignored[0].clear()
        ignored[1].clear()

    def _purge(self, step: int) -> None:
        """TensorBoard's purge marker (a run resumed from a checkpoint logs again from
        ``step``): drop what was read so far at ``step`` and later, as TensorBoard does."""
        for steps, values in self.result.tags.values():
            kept = [i for i, s in enumerate(steps) if s < step]
            if len(kept) != len(steps):
                values[:] = [values[i] for i in kept]
                steps[:] = [steps[i] for i in kept]
        self.result.clock.drop_from(step)

    def _note_time(self, wall_time: float) -> None:
        result = self.result
        if result.first_time is None or wall_time < result.first_time:
            result.first_time = wall_time
        if result.last_time is None or wall_time > result.last_time:
            result.last_time = wall_time

    def _event(self, buf: bytes, pos: int, end: int) -> None:
        wall_time = 0.0
        step = 0
        restart = False
        summaries: list[tuple[int, int]] = []
        while pos < end:
            key = buf[pos]
            pos += 1
            if key == 0x09:
                wall_time = _F64(buf, pos)[0]
                pos += 8
            elif key == 0x10:
                byte = buf[pos]
                if byte < 0x80:
                    step = byte
                    pos += 1
                else:
                    step, pos = _varint(buf, pos)
            elif key == 0x2A:
                length = buf[pos]
                if length < 0x80:
                    pos += 1
                else:
                    length, pos = _varint(buf, pos)
                summaries.append((pos, pos + length))
                pos += length
            elif key == 0x3A:  # session_log: SessionLog.status (field 1) START (1) is a restart
                length, pos = _varint(buf, pos)
                restart = buf[pos : pos + 2] == b"\x08\x01"
                pos += length
            else:
                if key >= 0x80:
                    key, pos = _varint(buf, pos - 1)
                pos = _skip(buf, pos, key)
        if pos != end:
            raise _Corrupt("event fields run past the record")
        if restart:
            self._purge(step)
        if not summaries:
            return
        added = False
        by_bytes = self._by_bytes
        for start, stop in summaries:
            p = start
            while p < stop:
                if buf[p] != 0x0A:
                    key, p = _key(buf, p)
                    p = _skip(buf, p, key)
                    continue
                length = buf[p + 1]
                if length < 0x80:
                    p += 2
                else:
                    length, p = _varint(buf, p + 1)
                value_end = p + length
                # Fast path: exactly `tag` then `simple_value`.
                if (
                    buf[p] == 0x0A
                    and buf[p + 1] < 0x80
                    and buf[p + 1] + 7 == length
                    and buf[value_end - 5] == 0x15
                ):
                    tag_bytes = buf[p + 2 : value_end - 5]
                    target = by_bytes.get(tag_bytes)
                    if target is None:
                        tag = tag_bytes.decode("utf-8", "replace")
                        target = self._target(tag, None) or self._ignored
                        by_bytes[tag_bytes] = target
                    target[0].append(step)
                    target[1].append(_F32(buf, value_end - 4)[0])
                    added = added or target is not self._ignored
                elif self._value(buf, p, value_end, step):
                    added = True
                p = value_end
        if added:  # the run's time span is that of its scalars
            self._note_time(wall_time)
            self.result.clock.add(step, wall_time)

    def _target(self, tag: str, plugin: str | None) -> tuple[list[int], list[float]] | None:
        """The lists a tag's scalars go to; None for tags of a non-scalar plugin."""
        if plugin is not None:
            self._plugins.setdefault(tag, plugin)
        if self._plugins.get(tag, "") not in _SCALAR_PLUGINS:
            return None
        name = self._prefix + tag
        found = self.result.tags.get(name)
        if found is None:
            found = self.result.tags[name] = ([], [])
        return found

    def _value(self, buf: bytes, pos: int, end: int, step: int) -> bool:
        """The general ``Summary.Value``; True when it held a scalar."""
        tag = ""
        plugin: str | None = None
        simple: float | None = None
        tensor: tuple[int, int] | None = None
        other = False
        while pos < end:
            key, pos = _key(buf, pos)
            if key == 0x0A:
                length, pos = _varint(buf, pos)
                tag = buf[pos : pos + length].decode("utf-8", "replace")
                pos += length
            elif key == 0x15:
                simple = _F32(buf, pos)[0]
                pos += 4
            elif key == 0x4A:
                length, pos = _varint(buf, pos)
                plugin, content = _plugin_data(buf, pos, pos + length)
                if plugin == "hparams":
                    self.result.hparams_data.append(content)
                pos += length
            elif key == 0x42:
                length, pos = _varint(buf, pos)
                tensor = (pos, pos + length)
                pos += length
            else:
                other = other or key in (0x1A, 0x22, 0x2A, 0x32)  # histogram, image, audio
                pos = _skip(buf, pos, key)
        value = simple
        if (
            value is None
            and tensor is not None
            and plugin in (None, *_SCALAR_PLUGINS)
            and self._plugins.get(tag, plugin or "") in _SCALAR_PLUGINS
        ):
            value = _tensor_scalar(buf, tensor[0], tensor[1])
        target = self._target(tag, plugin) if value is not None and not other else None
        if target is None or value is None:
            if plugin is not None:
                self._plugins.setdefault(tag, plugin)
            if plugin == "hparams":  # read (its content is kept), not skipped
                return False
            skipped = self.result.skipped
            skipped[tag] = skipped.get(tag, 0) + 1
            return False
        target[0].append(step)
        target[1].append(value)
        return True


def _masked(crc: int) -> int:
    """TFRecord's masked CRC: rotated right by 15 bits plus a constant."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def is_event_file(path: Path) -> bool:
    """TensorBoard's naming: ``events.out.tfevents.<time>.<host>...``."""
    return ".tfevents." in path.name and path.is_file()
