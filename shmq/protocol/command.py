"""RemotingCommand and its two header encodings: pure functions, no I/O.

A frame on the wire (all integers big-endian, signed as in Java)::

    +-----------+-----------+---------------------+------------------+
    | total i32 | mark i32  | header (headerLen)  | body (the rest)  |
    +-----------+-----------+---------------------+------------------+
                 mark = serializeType << 24 | headerLen
                 total = 4 + headerLen + bodyLen   (the length word does not count itself)

``frame.py`` splits a byte stream into frames; this module turns the part after ``total``
into a :class:`RemotingCommand` and back.

JSON header (serialize type 0), as Java's fastjson writes it (keys sorted)::

    {"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,
     "serializeTypeCurrentRPC":"JSON","version":409}

``remark`` is left out when null and ``extFields`` when empty. On input unknown keys are ignored and
extFields values may be strings, numbers, booleans or null (ali-ons sends numbers and
booleans unquoted); they are turned into the strings Java would hold. Output is always
strings, because the Go client decodes extFields as ``map[string]string``.

ROCKETMQ binary header (serialize type 1, ``RocketMQSerializable.java``):

============  ======  ====================================================
field         width   meaning
============  ======  ====================================================
code          i16     request or response code
language      u8      LanguageCode number
version       i16     MQVersion ordinal
opaque        i32     request id
flag          i32     bit 0 response, bit 1 oneway
remarkLen     i32     then remarkLen bytes of UTF-8; 0 means no remark
extLen        i32     byte length of the entries that follow
 keyLen       i16     then keyLen bytes of UTF-8 key   } repeated
 valueLen     i32     then valueLen bytes of UTF-8     } until extLen used up
============  ======  ====================================================

A response is encoded with the serialize type of its request
(:meth:`RemotingCommand.make_response` copies it): ali-ons and the old C++ client read
``mark`` as a plain header length, so they only work because they only ever send JSON.
"""
from __future__ import annotations

import struct
from typing import Any

import msgspec

from shmq.errors import HeaderDecodeError, error_for_response
from shmq.protocol.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SHMQ_VERSION,
    LanguageCode,
    ResponseCode,
    SerializeType,
)

__all__ = [
    "RemotingCommand",
    "decode_command",
    "encode_command",
    "encode_header",
    "java_str",
    "request",
]

_LANGUAGE_BY_NUMBER = {int(lc): lc.name for lc in LanguageCode}
_LANGUAGE_NUMBER = {lc.name: int(lc) for lc in LanguageCode}


class RemotingCommand(msgspec.Struct, kw_only=True, gc=False):
    """One request or response.

    ``ext_fields`` is the flat string map RocketMQ calls extFields (the "custom header");
    :mod:`shmq.protocol.headers` converts it to and from typed Structs. ``serialize_type``
    is how the command arrived (or is to be sent); it is not a wire field of its own.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = msgspec.field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = SHMQ_VERSION
    serialize_type: int = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def raise_for_code(self, *accepted: int) -> "RemotingCommand":
        """Return ``self`` if its code is accepted (SUCCESS by default), else raise the
        :mod:`shmq.errors` exception for the code, carrying the remark."""
        if self.code in (accepted or (ResponseCode.SUCCESS,)):
            return self
        raise error_for_response(self.code, self.remark)

    def make_response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
    ) -> "RemotingCommand":
        """The answer to this request: same opaque and serialize type, response flag set."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=self.serialize_type,
        )


# ---- extFields values --------------------------------------------------------------------
def java_str(value: object) -> str:
    """The text Java would hold for a JSON scalar read into a ``Map<String,String>``."""
    if type(value) is str:
        return value  # type: ignore[return-value]
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e7:
        return f"{value:.1f}"  # Java's Double.toString(1.0) is "1.0"
    return str(value)


def _ext_out(ext: dict[str, Any]) -> dict[str, str]:
    """extFields as strings, dropping nulls (Java skips null values when encoding)."""
    for v in ext.values():
        if type(v) is not str:
            break
    else:
        return ext
    return {k: java_str(v) for k, v in ext.items() if v is not None}


# ---- JSON header --------------------------------------------------------------------------
class _JsonHeaderIn(msgspec.Struct, gc=False):
    """Liberal reading: every field optional, scalars of any JSON type where Java coerces."""

    code: int | str = 0
    language: str | int = "JAVA"
    version: int | str = 0
    opaque: int | str = 0
    flag: int | str = 0
    remark: str | None = None
    extFields: dict[str, str | int | float | bool | None] | None = None


class _JsonHeaderStrict(msgspec.Struct, gc=False):
    """What every Java and shmq peer sends: integers as numbers, extFields all strings. Tried
    first (no Python pass over the fields); anything else goes to :class:`_JsonHeaderIn`."""

    code: int = 0
    language: str = "JAVA"
    version: int = 0
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    extFields: dict[str, str] | None = None


_json_decoder = msgspec.json.Decoder(_JsonHeaderIn)
_json_strict = msgspec.json.Decoder(_JsonHeaderStrict)
_json_encoder = msgspec.json.Encoder()


def _as_int(value: int | str, name: str) -> int:
    if type(value) is int:
        return value  # type: ignore[return-value]
    try:
        return int(str(value).strip())
    except ValueError:
        raise HeaderDecodeError(f"{name} is not an integer: {value!r}", serialize_type=0) from None


def _decode_json_header(data: bytes | memoryview) -> RemotingCommand:
    try:
        h = _json_strict.decode(data)
    except msgspec.DecodeError:  # a scalar of another JSON type, a null, or not JSON at all
        return _decode_json_header_liberal(data)
    return RemotingCommand(code=h.code, opaque=h.opaque, flag=h.flag, remark=h.remark,
                           ext_fields=h.extFields if h.extFields is not None else {}, language=h.language,
                           version=h.version, serialize_type=SerializeType.JSON)


def _decode_json_header_liberal(data: bytes | memoryview) -> RemotingCommand:
    try:
        h = _json_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise HeaderDecodeError(f"JSON header: {e}", serialize_type=0) from None
    ext: dict[str, str] = {}
    if h.extFields:
        for k, v in h.extFields.items():
            if v is not None:
                ext[k] = v if type(v) is str else java_str(v)  # type: ignore[assignment]
    lang = h.language
    if type(lang) is int:
        lang = _LANGUAGE_BY_NUMBER.get(lang, "OTHER")  # type: ignore[arg-type]
    return RemotingCommand(
        code=_as_int(h.code, "code"),
        opaque=_as_int(h.opaque, "opaque"),
        flag=_as_int(h.flag, "flag"),
        remark=h.remark,
        ext_fields=ext,
        language=lang,  # type: ignore[arg-type]
        version=_as_int(h.version, "version"),
        serialize_type=SerializeType.JSON,
    )


def json_text(text: str) -> bytes:
    """``text`` as the JSON header encoder writes a string (quoted, escaped)."""
    return _json_encoder.encode(text)


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    # Keys in fastjson's sorted order; remark and extFields only when present, as Java does.
    h: dict[str, Any] = {"code": cmd.code}
    if cmd.ext_fields:
        h["extFields"] = _ext_out(cmd.ext_fields)
    h["flag"] = cmd.flag
    h["language"] = cmd.language
    h["opaque"] = cmd.opaque
    if cmd.remark is not None:
        h["remark"] = cmd.remark
    h["serializeTypeCurrentRPC"] = "JSON"
    h["version"] = cmd.version
    return _json_encoder.encode(h)


# ---- ROCKETMQ binary header ---------------------------------------------------------------
_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def _to_i32(n: int) -> int:
    """Wrap like a Java int cast; only a JSON peer can hand us something wider."""
    return (n + 2**31) % 2**32 - 2**31


def _to_i16(n: int) -> int:
    return (n + 2**15) % 2**16 - 2**15


def _decode_binary_header(data: bytes | memoryview) -> RemotingCommand:
    n = len(data)
    if n < _FIXED.size + 8:
        raise HeaderDecodeError(f"binary header of {n} bytes is shorter than 21", serialize_type=1)
    code, lang, version, opaque, flag = _FIXED.unpack_from(data, 0)
    pos = _FIXED.size
    (remark_len,) = _I32.unpack_from(data, pos)
    pos += 4
    if remark_len < 0 or pos + remark_len + 4 > n:
        raise HeaderDecodeError(f"binary header remark length {remark_len} out of bounds", serialize_type=1)
    try:
        remark = bytes(data[pos : pos + remark_len]).decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(data, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len > n:
            raise HeaderDecodeError(f"binary header extLen {ext_len} out of bounds", serialize_type=1)
        end = pos + ext_len
        ext: dict[str, str] = {}
        while pos < end:
            if pos + 2 > end:
                raise HeaderDecodeError("binary header: truncated extFields key length", serialize_type=1)
            (klen,) = _I16.unpack_from(data, pos)
            pos += 2
            if klen < 0 or pos + klen + 4 > end:
                raise HeaderDecodeError(f"binary header: key length {klen} out of bounds", serialize_type=1)
            key = bytes(data[pos : pos + klen]).decode()
            pos += klen
            (vlen,) = _I32.unpack_from(data, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise HeaderDecodeError(f"binary header: value length {vlen} out of bounds", serialize_type=1)
            ext[key] = bytes(data[pos : pos + vlen]).decode()
            pos += vlen
    except UnicodeDecodeError as e:
        raise HeaderDecodeError(f"binary header: invalid UTF-8 ({e.reason})", serialize_type=1) from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        language=_LANGUAGE_BY_NUMBER.get(lang, "OTHER"),
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    parts = [
        _FIXED.pack(
            _to_i16(cmd.code),
            _LANGUAGE_NUMBER.get(cmd.language, LanguageCode.OTHER),
            _to_i16(cmd.version),
            _to_i32(cmd.opaque),
            _to_i32(cmd.flag),
        )
    ]
    if cmd.remark:
        r = cmd.remark.encode()
        parts += (_I32.pack(len(r)), r)
    else:
        parts.append(_I32.pack(0))
    entries = []
    for k, v in _ext_out(cmd.ext_fields).items():
        kb, vb = k.encode(), v.encode()
        entries += (_I16.pack(len(kb)), kb, _I32.pack(len(vb)), vb)
    blob = b"".join(entries)
    parts += (_I32.pack(len(blob)), blob)
    return b"".join(parts)


# ---- whole commands -----------------------------------------------------------------------
def encode_header(cmd: RemotingCommand) -> bytes:
    """The header bytes in ``cmd.serialize_type``."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    return _encode_json_header(cmd)


#: The length word and mark word in front of a header (a JSON header's mark is its length). A
#: module that packs it per frame binds it to a name of its own: CPython 3.11 calls a method of
#: a name bound by ``import`` without LOAD_METHOD, ~40 ns more a call.
FRAME_PREFIX = struct.Struct(">ii")

#: The opaque a header template is encoded with (no request has it), replaced by its slot.
_MARK_OPAQUE = 2147480001


def header_template(code: int, ext: dict[str, str], marks: list[tuple[bytes, bytes]], flag: int = 0,
                    remark: str | None = None) -> tuple[bytes, tuple[int, ...]] | None:
    """A request's (or, with ``flag`` FLAG_RESPONSE, an answer's) JSON header as a %-template whose slots take the values that change per
    request, so a frame is made by ``template % values`` (``protocol.headers.SendFrame``,
    ``client.tcp_pull.PullFrame``): the template is this encoder's own output for ``ext`` holding
    stand-ins, so the layout stays defined once and the frames are byte-identical to encoding a
    RemotingCommand. ``marks`` pairs each stand-in as encoded with its slot (``b"%d"``...); the
    opaque's slot is added last. Returns ``(template, order)``: ``order[i]`` is the index (in
    marks + opaque) of the value the i-th slot in the text takes; None when a stand-in does not
    occur exactly once (a group or topic holding one): the caller encodes generically."""
    head = encode_header(RemotingCommand(code=code, ext_fields=ext, opaque=_MARK_OPAQUE, flag=flag, remark=remark))
    head = head.replace(b"%", b"%%")
    marks = [*marks, (b":%d," % _MARK_OPAQUE, b":%d,")]
    if any(head.count(mark) != 1 for mark, _ in marks):
        return None
    order = tuple(sorted(range(len(marks)), key=lambda i: head.find(marks[i][0])))
    for mark, slot in marks:
        head = head.replace(mark, slot)
    return head, order


def encode_command(cmd: RemotingCommand) -> bytes:
    """The complete frame, length word included."""
    header = encode_header(cmd)
    hl = len(header)
    if hl > 0xFFFFFF:
        raise ValueError(f"header of {hl} bytes does not fit the 24-bit header length")
    body = cmd.body
    return b"".join(
        (FRAME_PREFIX.pack(4 + hl + len(body), (cmd.serialize_type << 24) | hl), header, body)
    )


def encode_command_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """``(length + mark + header, body)``: lets a transport write a large body without copying it."""
    header = encode_header(cmd)
    hl = len(header)
    if hl > 0xFFFFFF:
        raise ValueError(f"header of {hl} bytes does not fit the 24-bit header length")
    return FRAME_PREFIX.pack(4 + hl + len(cmd.body), (cmd.serialize_type << 24) | hl) + header, cmd.body


def decode_command(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode the part of a frame after the length word: ``mark | header | body``.

    Raises :class:`~shmq.errors.HeaderDecodeError` for a bad header length, an unknown
    serialize type or a header that does not parse; the frame boundary is still known then,
    but RocketMQ closes the connection and so do shmq's servers.
    """
    n = len(frame)
    if n < 4:
        raise HeaderDecodeError(f"frame of {n} bytes has no mark word")
    (mark,) = _I32.unpack_from(frame, 0)
    stype = (mark >> 24) & 0xFF
    hl = mark & 0xFFFFFF
    if hl == 0 or hl > n - 4:
        raise HeaderDecodeError(f"bad header length {hl} in a frame of {n} bytes", serialize_type=stype)
    view = memoryview(frame)
    header = view[4 : 4 + hl]
    if stype == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif stype == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise HeaderDecodeError(f"unknown serialize type {stype}", serialize_type=stype)
    if n > 4 + hl:
        cmd.body = bytes(view[4 + hl :])
    return cmd


def request(code: int, header: Any = None, body: bytes = b"", **ext: Any) -> RemotingCommand:
    """A new request. ``header`` is a :class:`~shmq.protocol.headers.CommandHeader` or a dict;
    keyword arguments add more extFields (values of any scalar type, sent as strings)."""
    fields: dict[str, Any] = {}
    if header is not None:
        fields.update(header.to_ext() if hasattr(header, "to_ext") else header)
    fields.update(ext)
    return RemotingCommand(code=code, ext_fields=_ext_out(fields) if fields else {}, body=body)
