"""Java's ``String.hashCode()`` in Python, bit for bit.

RocketMQ stores this hash on disk in two places, so shmq must compute exactly what a JVM does:
the tag code of a ConsumeQueue entry (the hash of the TAGS property) and the key hash of an
IndexFile entry (the hash of "topic#key"); a store written by RocketMQ must read the same.

Java defines it over the string's UTF-16 code units, not over code points:

    h = s[0]*31^(n-1) + s[1]*31^(n-2) + ... + s[n-1]      (mod 2^32, read as signed int32)

so a character outside the Basic Multilingual Plane counts as its two surrogates, and a lone
surrogate (legal in a Java String, and in a Python str) counts as itself.

Speed: keys are hashed once per index put and once per query, tags once per message. Instead
of a Python-level Horner loop we take the dot product of the code units with precomputed
powers of 31, which ``sum(map(mul, ...))`` evaluates in C; the result is reduced mod 2^32 once
at the end (the powers are kept reduced so the partial sums stay small).
"""
from __future__ import annotations

import sys
from functools import lru_cache
from operator import mul

__all__ = ["java_string_hash", "java_string_hash_cached"]

_MASK = 0xFFFFFFFF
_SIGN = 0x80000000
# UTF-16 in the machine's byte order, so memoryview.cast("H") reads code units directly.
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"

# _POW[k] = 31**k mod 2^32, lowest power first. Never mutated: _powers() publishes a grown
# copy by rebinding the global, so a thread on another core always sees a complete list.
_POW: list[int] = [1]


def _powers(n: int) -> list[int]:
    """Return a list of at least ``n`` powers of 31 (mod 2^32), lowest first."""
    pow_ = _POW
    if len(pow_) < n:
        grown = list(pow_)
        last = grown[-1]
        while len(grown) < n:
            last = (last * 31) & _MASK
            grown.append(last)
        globals()["_POW"] = grown
        return grown
    return pow_


def java_string_hash(s: str) -> int:
    """``s.hashCode()`` as a JVM computes it: a signed 32-bit int.

    >>> java_string_hash("hello")
    99162322
    >>> java_string_hash("polygenelubricants")
    -2147483648
    """
    if s.isascii():
        # ASCII: one byte per UTF-16 code unit, and iterating bytes yields ints.
        units = s.encode("ascii")
    else:
        # surrogatepass: a lone surrogate is one code unit in Java too.
        units = memoryview(s.encode(_UTF16, "surrogatepass")).cast("H")
    n = len(units)
    if n == 0:
        return 0
    # s[i] is multiplied by 31^(n-1-i): pair the reversed units with ascending powers.
    h = sum(map(mul, reversed(units), _powers(n))) & _MASK
    return h - 0x100000000 if h & _SIGN else h


@lru_cache(maxsize=4096)
def java_string_hash_cached(s: str) -> int:
    """``java_string_hash`` memoized, for the small set of strings hashed over and over
    (TAGS values, topics). Do not use it for unique keys such as UNIQ_KEY: they only churn
    the cache."""
    return java_string_hash(s)
