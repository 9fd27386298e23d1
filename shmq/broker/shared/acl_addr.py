"""Remote-address patterns of plain_acl.yml (RocketMQ 4.x RemoteAddressStrategyFactory).

``globalWhiteRemoteAddresses`` entries and an account's ``whiteRemoteAddress`` take:

=============================  ==============================================================
pattern                        matches
=============================  ==============================================================
empty / absent                 nothing
``*``, ``*.*.*.*``, ``*:*:…``  every address
``192.168.0.{1,2}``            the listed last parts (IPv4 needs four dotted parts)
``192.168.0.1,10.0.0.3``       exactly the listed addresses
``192.168.1-10.*``, ``10.*``   a range (``a-b`` or ``*``) in the first part that is not a plain
                               number; the parts before it must be equal; later parts are not
                               looked at (as RocketMQ compares them)
``192.168.0.1`` or ``::1``     exactly that address (IPv6 compared in full form)
=============================  ==============================================================

A pattern that does not parse is an :class:`~shmq.broker.shared.acl.AclError` when the file
loads (RocketMQ throws AclException there too).
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable

Matcher = Callable[[str], bool]


class AddressError(ValueError):
    pass


def _full(addr: str) -> str | None:
    """The canonical text of an address (IPv6 expanded), or None when it is not one."""
    try:
        a = ipaddress.ip_address(addr.strip().strip("[]"))
    except ValueError:
        return None
    return a.exploded.upper() if a.version == 6 else str(a)


def _never(_: str) -> bool:
    return False


def _always(_: str) -> bool:
    return True


def compile_pattern(pattern: str | None) -> Matcher:
    if pattern is None or not str(pattern).strip():
        return _never
    p = str(pattern).strip()
    if p in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _always
    if p.endswith("}"):
        return _exact_set(_expand_braces(p))
    if "," in p:
        return _exact_set([a for a in p.split(",") if a.strip()])
    if "*" in p or "-" in p:
        return _range(p)
    full = _full(p)
    if full is None:
        raise AddressError(f"Netaddress examine Exception netaddress is {p}")
    return lambda addr: _full(addr) == full


def _expand_braces(p: str) -> list[str]:
    head, _, tail = p.partition("{")
    sep = ":" if ":" in p else "."
    if sep == "." and len(p.split(".")) < 4:
        raise AddressError(f"MultipleRemoteAddressStrategy has got a/some wrong format IP(s) {p}")
    if not head.endswith(sep) or "}" in head:
        raise AddressError(f"MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress {p}")
    return [head + item.strip() for item in tail[:-1].split(",") if item.strip()]


def _exact_set(addrs: list[str]) -> Matcher:
    full = set()
    for a in addrs:
        f = _full(a)
        if f is None:
            raise AddressError(f"Netaddress examine Exception netaddress is {a.strip()}")
        full.add(f)
    return lambda addr: _full(addr) in full


def _range(p: str) -> Matcher:
    v6 = ":" in p
    if v6:
        parts = _expand_v6_pattern(p)
        base, width = 16, 0xFFFF
    else:
        parts = p.split(".")
        base, width = 10, 255
        if len(parts) != 4:
            raise AddressError(f"Netaddress examine scope Exception netaddress is {p}")
    for i, part in enumerate(parts):
        part = part.strip()
        if i == 0:
            if part == "*" or "-" in part:
                raise AddressError(f"RangeRemoteAddressStrategy netaddress examine scope Exception netaddress is {p}")
            continue
        if part == "*":
            lo, hi = 0, width
        elif "-" in part:
            a, _, b = part.partition("-")
            try:
                lo, hi = int(a, base), int(b, base)
            except ValueError:
                raise AddressError(f"RangeRemoteAddressStrategy netaddress examine scope Exception value {part}") from None
            if not (0 <= lo <= hi <= width):
                raise AddressError(f"RangeRemoteAddressStrategy netaddress examine scope Exception start is {lo} , end is {hi}")
        else:
            continue
        try:
            head = [int(x, base) for x in parts[:i]]
        except ValueError:
            raise AddressError(f"Netaddress examine scope Exception netaddress is {p}") from None
        if any(not 0 <= x <= width for x in head):
            raise AddressError(f"Netaddress examine scope Exception netaddress is {p}")
        return _range_matcher(v6, i, head, lo, hi)
    raise AddressError(f"Netaddress examine scope Exception netaddress is {p}")


def _expand_v6_pattern(p: str) -> list[str]:
    if "::" in p:
        left, _, right = p.partition("::")
        lparts = [x for x in left.split(":") if x]
        rparts = [x for x in right.split(":") if x]
        return lparts + ["0"] * (8 - len(lparts) - len(rparts)) + rparts
    return p.split(":")


def _range_matcher(v6: bool, index: int, head: list[int], lo: int, hi: int) -> Matcher:
    def match(addr: str) -> bool:
        try:
            a = ipaddress.ip_address(addr.strip().strip("[]"))
        except ValueError:
            return False
        if (a.version == 6) != v6:
            return False
        parts = ([int(x, 16) for x in a.exploded.split(":")] if v6 else [int(x) for x in str(a).split(".")])
        return parts[:index] == head and lo <= parts[index] <= hi
    return match
