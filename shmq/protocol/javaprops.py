"""Java ``.properties`` text, the format of RocketMQ's ``broker.conf`` and ``namesrv.conf``.

It lives in ``protocol`` because that is the lowest layer both the NameServer and the
broker may import, and because the same text travels in UPDATE_/GET_*_CONFIG bodies.

Reading follows ``java.util.Properties.load`` where real files go: ``#`` and ``!`` comment
lines, ``key=value``, ``key: value`` or ``key value``, whitespace around the separator
dropped, a trailing backslash continues the line, ``\\t \\n \\r \\f \\uXXXX`` escapes.
"""
from __future__ import annotations

from collections.abc import Mapping

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n:
            nxt = s[i + 1]
            if nxt == "u" and i + 6 <= n:
                try:
                    out.append(chr(int(s[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not buf and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        stripped = line.rstrip("\\")
        if (len(line) - len(stripped)) % 2 == 1:
            buf += line[:-1]
            continue
        lines.append(buf + line)
        buf = ""
    if buf:
        lines.append(buf)
    return lines


def loads(text: str) -> dict[str, str]:
    """Parse properties text into an ordered dict (a later key wins, as in Java)."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i, n = 0, len(line)
        while i < n:
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):  # one separator at most; "k = = v" has the value "= v"
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def load(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return loads(f.read())


def dumps(props: Mapping[str, object]) -> str:
    """``key=value`` lines, as RocketMQ's ``MixAll.properties2String`` writes them."""
    return "".join(f"{k}={v}\n" for k, v in props.items() if v is not None)


def apply(settings, props: Mapping[str, str], *, ignored=frozenset(), source: str = "config", log=None) -> list[str]:
    """Set the dataclass fields of ``settings`` named by ``props`` (text, converted to each field's
    bool / int / float / str type; booleans as Java reads them). Unknown keys are returned (and
    logged as warnings), keys in ``ignored`` are skipped quietly; a value of the wrong type is a
    ValueError naming the key. Broker and NameServer configs both load through here."""
    from dataclasses import fields
    known = {f.name: f for f in fields(settings)}
    unknown: list[str] = []
    for key, raw in props.items():
        f = known.get(key)
        if f is None:
            if key not in ignored:
                if log is not None:
                    log.warning("%s: unknown key %r ignored", source, key)
                unknown.append(key)
            continue
        value = str(raw).strip()
        try:
            if f.type in (bool, "bool"):
                setattr(settings, key, value.lower() == "true")
            elif f.type in (int, "int"):
                setattr(settings, key, int(value))
            elif f.type in (float, "float"):
                setattr(settings, key, float(value))
            else:
                setattr(settings, key, value)
        except ValueError:
            raise ValueError(f"{source}: {key}={raw!r} is not a valid {f.type}") from None
    return unknown
