"""The properties text of a message (``MessageDecoder.messageProperties2String``)::

    name \\x01 value \\x02 name \\x01 value [\\x02]

Java writes no trailing ``\\x02``; ali-ons and the C++ client do. Java's reader drops pairs
whose name or value is empty, and so does :func:`decode_properties`.

The broker's common send never builds a dict: the byte-level edits below (find a pair, drop
it, append one) rewrite the text in place. A name counts only at the start of a pair (the
start of the text or right after a ``\\x02``), so a value containing ``DELAY\\x01`` is no DELAY.
"""
from __future__ import annotations

from collections.abc import Mapping

from shmq.errors import InvalidMessage

from .names import CLUSTER, WAIT

NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"
_SEP = b"\x02"
_NV = b"\x01"


def encode_properties(props: Mapping[str, str] | None) -> str:
    """Java's form: no trailing separator. Pairs with a None value are skipped, as in Java."""
    if not props:
        return ""
    return "\x02".join([f"{k}\x01{v}" for k, v in props.items() if v is not None])


def decode_properties(text) -> dict[str, str]:
    """A properties text (str, bytes or memoryview) as a dict; a trailing or doubled
    separator and empty pairs are tolerated, invalid UTF-8 is replaced."""
    if not text:
        return {}
    if not isinstance(text, str):
        text = str(text, "utf-8", "replace")
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEP):
        name, sep, value = pair.partition(NAME_VALUE_SEP)
        if sep and name and value:
            out[name] = value
    return out


def properties_bytes(props) -> bytes:
    """The stored text of ``props`` (dict, str or bytes), checked: names and values of a dict
    must be strings without the separators \\1 and \\2; bytes must be UTF-8."""
    if isinstance(props, Mapping):
        for k, v in props.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidMessage(f"property {k!r}: names and values must be strings")
            if NAME_VALUE_SEP in k or PROPERTY_SEP in k or NAME_VALUE_SEP in v or PROPERTY_SEP in v:
                raise InvalidMessage(f"property {k!r} holds a separator character (\\1 or \\2)")
        return encode_properties(props).encode()
    if isinstance(props, str):
        return props.encode()
    raw = bytes(props) if props else b""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidMessage(f"properties are not UTF-8 text: {e}") from None
    return raw


# ---- byte-level edits --------------------------------------------------------------------------
def pair_key(name: str) -> bytes:
    """``name\\x01``: what :func:`find_pair` and :func:`drop_pair` look for."""
    return name.encode() + _NV


def pair(name: str, value: str) -> bytes:
    return name.encode() + _NV + value.encode()


def find_pair(raw: bytes, key: bytes) -> int:
    """Index of the pair starting with ``key`` (from :func:`pair_key`) in raw, or -1."""
    if raw.startswith(key):
        return 0
    i = raw.find(_SEP + key)
    return -1 if i < 0 else i + 1


def pair_value(raw: bytes, key: bytes) -> str | None:
    """The value of the first pair starting with ``key``, or None."""
    i = find_pair(raw, key)
    if i < 0:
        return None
    j = raw.find(_SEP, i)
    return str(raw[i + len(key):j if j >= 0 else len(raw)], "utf-8", "replace")


def drop_pair(raw, key):
    """raw (bytes, or str with a str ``key``) without any pair starting with ``key``."""
    sep = PROPERTY_SEP if raw.__class__ is str else _SEP
    i = raw.find(key)
    while i >= 0:
        if i and raw[i - 1:i] != sep:          # inside a pair, not at its start
            i = raw.find(key, i + 1)
            continue
        j = raw.find(sep, i)
        if j < 0:                              # the last pair: nothing follows it
            return raw[:max(i - 1, 0)]
        raw = raw[:i] + raw[j + 1:]
        i = raw.find(key, i)
    return raw


def append_pair(raw: bytes, p: bytes) -> bytes:
    """raw with the pair ``p`` (from :func:`pair`) added at the end."""
    if not raw:
        return p
    return raw + p if raw[-1] == 2 else raw + _SEP + p


_WAIT, _CLUSTER = pair_key(WAIT), pair_key(CLUSTER)
_WAIT_S, _CLUSTER_S = WAIT + NAME_VALUE_SEP, CLUSTER + NAME_VALUE_SEP


def stored_properties(raw, cluster_pair: bytes) -> bytes:
    """What the broker stores for a client's properties text (bytes, or the str of a remoting
    header): WAIT dropped (it only tells the broker whether to wait for the flush; 4.9.x does
    not store it) and CLUSTER set to this broker's cluster (``cluster_pair``, from
    ``pair(CLUSTER, name)``), replacing any the client sent. Every write path (broker send,
    local producer, put pipeline) stores this. (A str is edited as str: it is faster.)"""
    if raw.__class__ is str:
        if _WAIT_S in raw:
            raw = drop_pair(raw, _WAIT_S)
        if _CLUSTER_S in raw:
            raw = drop_pair(raw, _CLUSTER_S)
        raw = raw.encode()
    else:
        if raw.find(_WAIT) >= 0:
            raw = drop_pair(raw, _WAIT)
        if raw.find(_CLUSTER) >= 0:
            raw = drop_pair(raw, _CLUSTER)
    if not raw:
        return cluster_pair
    return raw + cluster_pair if raw[-1] == 2 else raw + _SEP + cluster_pair
