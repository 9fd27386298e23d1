"""SQL92 property filters: what a consumer writes in ``MessageSelector.bySql(...)``.

``compile(text)`` parses once into a tree, checks it the way RocketMQ 4.9.8's
``SelectorParser`` does, and turns it into nested closures, so ``Filter.matches(props)``
costs a few dict lookups and calls. ``Filter.matches_record`` decodes only the properties
of a stored record; pass it as ``record_filter`` to ``MessageStore.get_messages``.

Semantics are RocketMQ 4.9.8's (filter/expression/*.java), including its oddities, because a
consumer moved from RocketMQ must see the same messages:

* Every property value is a string. A comparison with a number literal parses the property
  as the literal's Java type: an integer literal that fits an int parses it like
  ``Integer.valueOf`` (so ``a > 5`` does not match ``a = '5.5'`` nor ``'3000000000'``;
  write ``a > 5.0``), a larger one like ``Long.valueOf``, a decimal like ``Double.valueOf``.
  ``<``/``>`` between two properties parses both as doubles. String literals take only
  ``=``/``<>``; ``a = TRUE`` is ``Boolean.valueOf(a)``.
* A value that does not parse aborts the whole evaluation and the message does not match,
  even under OR or NOT (the broker catches the exception). Evaluation is left to right with
  short circuits, so ``b = 'x' OR a = 5`` matches b='x', a='abc' but ``a = 5 OR b = 'x'`` not.
* Three-valued logic: a missing property makes a comparison unknown (NULL), NOT of unknown
  is unknown, only TRUE matches. ``x IS NULL`` is true when absent. Java's equality is
  asymmetric: ``a = b`` with ``a`` missing is unknown, with only ``b`` missing it is FALSE,
  so ``a <> b`` then matches.
* NOT binds tighter than comparisons: ``NOT a = 1`` is ``(NOT a) = 1``, never true; write
  ``NOT (a = 1)``. ``NOT a > 1`` is rejected with a hint. A bare property used as a
  boolean (``a AND ...``) is FALSE when present (a string is not a Boolean), NULL when absent.

Grammar (keywords case-insensitive, property names case-sensitive)::

    or      := and (OR and)*
    and     := eq (AND eq)*
    eq      := cmp ( ('=' | '<>' | '!=') cmp | IS [NOT] NULL )*
    cmp     := unary ( ('>' | '>=' | '<' | '<=') unary | [NOT] BETWEEN unary AND unary
                     | [NOT] IN '(' string (',' string)* ')' )*
    unary   := ('+' | '-' | NOT) unary | literal | identifier | '(' or ')'
    literal := 'text' ('' escapes a quote) | 12 | 12L | 1.5 | .5 | 1e3 | TRUE | FALSE | NULL

``--`` line and ``/* */`` block comments are skipped. Differences from 4.9.8, all of them
accepting what it rejects: ``!=`` as ``<>``; ``.`` inside identifiers (``order.region``);
a ``--`` comment may end the text without a newline; ``0.0`` is a valid literal (4.9.8
rejects every decimal literal below Double.MIN_VALUE, zero included). CONTAINS, STARTSWITH
and ENDSWITH are 5.x additions and are not supported.
"""
from __future__ import annotations

import functools
import math
import operator
import re

from shmq.errors import FilterExpressionError

from .properties import decode_properties
from .record import record_properties

__all__ = ["Filter", "compile", "compile_cached"]

_INT_MIN, _INT_MAX, _LONG_MIN, _LONG_MAX = -(1 << 31), (1 << 31) - 1, -(1 << 63), (1 << 63) - 1
# Parentheses and prefix operators recurse in the parser (about eight frames a level) and a
# deep tree recurses in matches(); both limits keep well inside Python's default stack.
_MAX_NESTING, _MAX_TREE_DEPTH = 64, 200


class _Long(int):
    """A Java Long. Plain ``int`` stands for a Java Integer: the literal's type decides how a
    property is parsed (Integer.valueOf vs Long.valueOf), so the two must stay apart."""
    __slots__ = ()


class _Abort(Exception):
    """Java threw while evaluating (NumberFormatException, ClassCastException): no match."""


# ---- Java's string to number conversions ----------------------------------------------
def _parse_int(text: str, lo: int, hi: int) -> int:
    # Integer.parseInt: optional sign, then decimal digits only (no spaces, no '_', which
    # int() would take); str.isdecimal() is Java's Character.digit for radix 10.
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body.isdecimal():
        raise _Abort
    if len(body) > 19:  # past a long unless zero-padded; int() refuses 4300+ digits
        body = body.lstrip("0") or "0"
        if len(body) > 19:
            raise _Abort
    n = -int(body) if text[0] == "-" else int(body)
    if n < lo or n > hi:
        raise _Abort
    return n


_to_int = functools.partial(_parse_int, lo=_INT_MIN, hi=_INT_MAX)  # Integer.valueOf


def _to_long(text: str) -> _Long:
    return _Long(_parse_int(text, _LONG_MIN, _LONG_MAX))


_JAVA_TRIM = "".join(map(chr, range(33)))  # String.trim() drops every char <= ' '
_DOUBLE_RE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_HEXDOUBLE_RE = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?")


def _to_double(text: str) -> float:
    """Double.valueOf: trims, takes NaN, Infinity, a float/double suffix and hex floats."""
    t = text.strip(_JAVA_TRIM)
    if _DOUBLE_RE.fullmatch(t):
        return float(t.rstrip("fFdD"))
    if _HEXDOUBLE_RE.fullmatch(t):
        return float.fromhex(t.rstrip("fFdD"))
    raise _Abort


def _to_boolean(text: str) -> bool:
    return text.lower() == "true"  # Boolean.valueOf: anything but "true" is false


_FROM_STRING = {int: _to_int, _Long: _to_long, float: _to_double, bool: _to_boolean}


def _dcmp(x: float, y: float) -> int:
    """Double.compareTo: NaN above everything and equal to itself, -0.0 below 0.0."""
    if x < y:
        return -1
    if x > y:
        return 1
    xn, yn = x != x, y != y
    if xn or yn:
        return xn - yn
    if x == 0.0:
        return (math.copysign(1.0, x) > 0) - (math.copysign(1.0, y) > 0)
    return 0


def _compare(lv, rv) -> int:
    """ComparisonExpression.__compare with string conversion on (as SelectorParser sets it):
    convert the odd one to the other's type, -1 where Java has no conversion."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is bool:
            if rt is str:
                raise _Abort  # Java casts the Boolean to String here: ClassCastException
            return -1
        if lt is str:
            conv = _FROM_STRING.get(rt)
            if conv is None:
                return -1
            lv, lt = conv(lv), rt
        elif rt is str:
            rv = _FROM_STRING[lt](rv)
        elif rt is bool:
            return -1
        elif lt is float or rt is float:
            lv, rv, lt = float(lv), float(rv), float
    if lt is float:
        return _dcmp(lv, rv)
    return (lv > rv) - (lv < rv)


def _negate(v):
    # UnaryExpression.negate: numbers only, anything else (a property's string) is NULL.
    t = type(v)
    return t(-v) if t is int or t is _Long or t is float else None


# ---- the tree ---------------------------------------------------------------------------
class _Node:
    """kinds: const(value, is_boolean_constant) prop(name) neg(x) not(x) cast(name)
    cmp(op, l, r) in(name, values, negated) and(items) or(items)."""
    __slots__ = ("kind", "args", "start", "end", "depth")

    def __init__(self, kind, args, start, end, children=()):
        self.kind, self.args, self.start, self.end = kind, args, start, end
        self.depth = 1 + max((c.depth for c in children), default=0)


_BOOLEAN_KINDS = frozenset(("not", "cast", "cmp", "in", "and", "or"))


def _is_boolean(n: _Node) -> bool:
    """Java's ``instanceof BooleanExpression`` (TRUE, FALSE and NULL literals included)."""
    return n.kind in _BOOLEAN_KINDS or (n.kind == "const" and n.args[1])


def _is_number(v) -> bool:
    return type(v) in (int, _Long, float)


_TOKEN_RE = re.compile(r"""
    (?P<ws>[ \t\n\r\f]+) | (?P<comment>--[^\n\r]*|/\*.*?\*/)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<int>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<str>'(?:[^']|'')*')
  | (?P<id>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<op><>|!=|>=|<=|[=<>(),+-])
""", re.X | re.S)
_KEYWORDS = frozenset(("NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"))


class _Parser:
    """Recursive descent over RocketMQ's grammar; tokens are (kind, value, start, end)."""

    def __init__(self, text: str):
        self.text, self.i, self.nesting = text, 0, 0
        self.tokens = self._tokenize(text)

    def fail(self, reason: str, pos: int | None):
        raise FilterExpressionError(reason, expression=self.text, position=pos)

    def _tokenize(self, text: str) -> list[tuple]:
        out, pos, n = [], 0, len(text)
        while pos < n:
            m = _TOKEN_RE.match(text, pos)
            if m is None:
                if text[pos] == "'":
                    self.fail("unterminated string literal", pos)
                if text.startswith("/*", pos):
                    self.fail("unterminated /* comment", pos)
                self.fail(f"unexpected character {text[pos]!r}", pos)
            kind, value = m.lastgroup, m.group()
            if kind == "int" and value == "0" and text[m.end():m.end() + 1].isdigit():
                self.fail("a number may not start with 0", pos)  # JavaCC: two literals
            if kind == "id" and value.upper() in _KEYWORDS:
                kind, value = "kw", value.upper()
            if kind not in ("ws", "comment"):
                out.append((kind, value, pos, m.end()))
            pos = m.end()
        if not out:
            self.fail("empty expression", None)
        out.append(("eof", "", n, n))
        return out

    # -- token helpers
    def peek(self, ahead: int = 0) -> tuple:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def accept(self, kind: str, value: str | None = None) -> tuple | None:
        t = self.tokens[self.i]
        if t[0] == kind and (value is None or t[1] == value):
            self.i += 1
            return t
        return None

    def expect(self, kind: str, value: str, what: str) -> tuple:
        t = self.accept(kind, value)
        if t is None:
            self.fail(f"expected {what}, found {self.describe(self.peek())}", self.peek()[2])
        return t

    @staticmethod
    def describe(tok: tuple) -> str:
        return "the end of the expression" if tok[0] == "eof" else repr(tok[1])

    def show(self, n: _Node) -> str:
        return self.text[n.start:n.end]

    def node(self, kind, args, start, end, children=()) -> _Node:
        n = _Node(kind, args, start, end, children)
        if n.depth > _MAX_TREE_DEPTH:
            self.fail(f"expression deeper than {_MAX_TREE_DEPTH} operators", start)
        return n

    # -- grammar
    def parse(self) -> _Node:
        e = self.parse_or()
        t = self.peek()
        if t[0] != "eof":
            why = "unbalanced ')'" if t[1] == ")" else f"unexpected {t[1]!r} after a complete expression"
            self.fail(why, t[2])
        return self.as_boolean(e)

    def parse_logic(self, kw: str, operand) -> _Node:
        items = [operand()]
        while self.accept("kw", kw):
            items.append(operand())
        if len(items) == 1:
            return items[0]
        items = [self.as_boolean(x) for x in items]
        return self.node(kw.lower(), items, items[0].start, items[-1].end, items)

    def parse_or(self) -> _Node:
        return self.parse_logic("OR", self.parse_and)

    def parse_and(self) -> _Node:
        return self.parse_logic("AND", self.parse_eq)

    def parse_eq(self) -> _Node:
        left = self.parse_cmp()
        while True:
            t = self.peek()
            if t[0] == "op" and t[1] in ("=", "<>", "!="):
                self.i += 1
                right = self.parse_cmp()
                left = self.equal(left, right, t[1])
                if t[1] != "=":
                    left = self.node("not", left, left.start, left.end, (left,))
            elif self.accept("kw", "IS"):
                negated = self.accept("kw", "NOT") is not None
                end = self.expect("kw", "NULL", "NULL or NOT NULL after IS")[3]
                null = _Node("const", (None, True), end, end)
                left = self.node("cmp", ("=", left, null), left.start, end, (left,))
                if negated:
                    left = self.node("not", left, left.start, end, (left,))
            else:
                return left

    def parse_cmp(self) -> _Node:
        left = self.parse_unary()
        while True:
            t = self.peek()
            negated = t[0] == "kw" and t[1] == "NOT" and self.peek(1)[1] in ("BETWEEN", "IN")
            if negated:
                self.i += 1
                t = self.peek()
            if t[0] == "op" and t[1] in (">", ">=", "<", "<=") and not negated:
                self.i += 1
                left = self.ordered(t[1], left, self.parse_unary())
            elif t[0] == "kw" and t[1] == "BETWEEN":
                self.i += 1
                low = self.parse_unary()
                self.expect("kw", "AND", "AND between the BETWEEN bounds")
                high = self.parse_unary()
                left = self.between(left, low, high, negated)
            elif t[0] == "kw" and t[1] == "IN":
                self.i += 1
                left = self.in_list(left, negated)
            else:
                return left

    def parse_unary(self) -> _Node:
        t = self.peek()
        if t[0] == "op" and t[1] in ("+", "-") or t[0] == "kw" and t[1] == "NOT":
            self.i += 1
            self.enter(t)
            x = self.parse_unary()
            self.nesting -= 1
            if t[1] != "NOT":
                return x if t[1] == "+" else self.node("neg", x, t[2], x.end, (x,))
            x = self.as_boolean(x)
            return self.node("not", x, t[2], x.end, (x,))
        return self.parse_primary()

    def enter(self, tok: tuple) -> None:
        self.nesting += 1
        if self.nesting > _MAX_NESTING:
            self.fail(f"more than {_MAX_NESTING} nested parentheses or prefix operators", tok[2])

    def parse_primary(self) -> _Node:
        t = self.peek()
        kind, value, start, end = t
        self.i += 1
        if kind == "str":
            return _Node("const", (value[1:-1].replace("''", "'"), False), start, end)
        if kind == "int":
            digits = value.rstrip("lL")
            if len(digits) > 19 or int(digits) > _LONG_MAX:
                self.fail(f"integer {value} does not fit a Java long", start)
            n = int(digits)
            return _Node("const", (n if n <= _INT_MAX else _Long(n), False), start, end)
        if kind == "float":
            f = float(value)
            if math.isinf(f):
                self.fail(f"number {value} is larger than the largest double", start)
            return _Node("const", (f, False), start, end)
        if kind == "kw" and value in ("TRUE", "FALSE", "NULL"):  # Java: BooleanConstantExpression
            return _Node("const", ({"TRUE": True, "FALSE": False}.get(value), True), start, end)
        if kind == "id":
            return _Node("prop", value, start, end)
        if kind == "op" and value == "(":
            self.enter(t)
            e = self.parse_or()
            self.nesting -= 1
            if self.peek()[1] != ")" or self.peek()[0] != "op":
                self.fail(f"expected ')' to close the '(' at column {start + 1}, "
                          f"found {self.describe(self.peek())}", self.peek()[2])
            self.i += 1
            return e
        self.i -= 1
        if kind == "eof":
            self.fail("the expression ends where an operand is expected", start)
        self.fail(f"expected a property, literal or '(', found {value!r}", start)

    # -- RocketMQ's construction-time checks (ComparisonExpression.create*, asBooleanExpression)
    def as_boolean(self, n: _Node) -> _Node:
        if _is_boolean(n):
            return n
        if n.kind == "prop":
            return _Node("cast", n.args, n.start, n.end)
        self.fail(f"{self.show(n)!r} is not a boolean expression", n.start)

    def check_ordered_operand(self, n: _Node, op: str) -> None:
        if n.kind == "const" and not _is_number(n.args[0]):
            self.fail(f"{self.show(n)} cannot be compared with {op!r}: only numbers and "
                      "properties can (strings take only = and <>)", n.start)
        if _is_boolean(n):
            hint = "; NOT binds tighter than comparisons, write NOT (...)" if n.kind == "not" else ""
            self.fail(f"{self.show(n)!r} is a boolean and cannot be compared with {op!r}{hint}", n.start)

    def ordered(self, op: str, left: _Node, right: _Node) -> _Node:
        self.check_ordered_operand(left, op)
        self.check_ordered_operand(right, op)
        return self.node("cmp", (op, left, right), left.start, right.end, (left, right))

    def equal(self, left: _Node, right: _Node, op: str) -> _Node:
        for n in (left, right):
            if n.kind == "const" and n.args[0] is None:
                self.fail(f"NULL cannot be compared with {op!r}; use IS NULL", n.start)
        if left.kind == right.kind == "const" and left.args[1] and not right.args[1]:
            self.fail(f"{self.show(left)} cannot be compared with {self.show(right)}", left.start)
        return self.node("cmp", ("=", left, right), left.start, right.end, (left, right))

    def between(self, x: _Node, low: _Node, high: _Node, negated: bool) -> _Node:
        if not negated and low.kind == high.kind == "const":  # 4.9.8 checks BETWEEN only
            lo, hi = low.args[0], high.args[0]
            if lo is None or hi is None:
                self.fail("BETWEEN bounds cannot be NULL", low.start)
            try:
                inverted = _compare(hi, lo) < 0
            except _Abort:
                inverted = False  # not comparable: the operand check below says why
            if inverted:
                self.fail(f"BETWEEN lower bound {self.show(low)} is greater than the upper "
                          f"bound {self.show(high)}", low.start)
        if negated:
            items = [self.ordered("<", x, low), self.ordered(">", x, high)]
        else:
            items = [self.ordered(">=", x, low), self.ordered("<=", x, high)]
        return self.node("or" if negated else "and", items, x.start, high.end, items)

    def in_list(self, x: _Node, negated: bool) -> _Node:
        if x.kind != "prop":
            hint = "; NOT binds tighter than IN, write a NOT IN (...)" if x.kind == "not" else ""
            self.fail(f"IN needs a property on its left, found {self.show(x)!r}{hint}", x.start)
        self.expect("op", "(", "'(' after IN")
        values = []
        while True:
            t = self.peek()
            if t[0] != "str":
                self.fail(f"IN takes a list of string literals, found {self.describe(t)}", t[2])
            self.i += 1
            values.append(t[1][1:-1].replace("''", "'"))
            if not self.accept("op", ","):
                break
        end = self.expect("op", ")", "')' or ',' in the IN list")[3]
        return self.node("in", (x.args, frozenset(values), negated), x.start, end, (x,))


# ---- closures -------------------------------------------------------------------------
# Comparison result (an int from _compare) -> Boolean, as ComparisonExpression.asBoolean.
_TESTS = {"=": (0).__eq__, ">": (0).__lt__, ">=": (0).__le__, "<": (0).__gt__, "<=": (0).__ge__}
_OPS = {"=": operator.eq, ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_FLIP = {"=": "=", ">": "<", ">=": "<=", "<": ">", "<=": ">="}


def _folded(n: _Node) -> tuple[bool, object]:
    """(True, value) for a literal or a negated literal: evaluated once, at compile time."""
    if n.kind == "const":
        return True, n.args[0]
    if n.kind == "neg":
        ok, v = _folded(n.args)
        return ok, _negate(v) if ok else None
    return False, None


def _build(n: _Node):
    """The closure ``f(props) -> True | False | None | value`` for node ``n``."""
    kind, args = n.kind, n.args
    if kind == "const" or kind == "neg" and _folded(n)[0]:
        value = _folded(n)[1]
        return lambda p: value
    if kind == "prop":
        return operator.methodcaller("get", args)
    if kind == "neg":
        f = _build(args)
        return lambda p: _negate(f(p))
    if kind == "not":
        f = _build(args)
        return lambda p: None if (v := f(p)) is None else not v
    if kind == "cast":  # a present property is a String, and a String is not a Boolean
        return lambda p: None if p.get(args) is None else False
    if kind == "in":
        name, values, negated = args
        return lambda p: None if (v := p.get(name)) is None else (v in values) is not negated
    if kind == "and" or kind == "or":
        return _build_logic(kind == "and", tuple(_build(x) for x in args))
    return _build_cmp(*args)


def _build_logic(is_and: bool, fs: tuple):
    # n-ary and left-deep evaluation agree: same order, same short circuit, and Kleene
    # AND/OR are associative. Flat keeps long chains from recursing.
    stop = not is_and  # AND stops at the first FALSE, OR at the first TRUE

    def logic(p):
        unknown = False
        for f in fs:
            v = f(p)
            if v is None:
                unknown = True
            elif v is stop:
                return stop
        return None if unknown else not stop
    return logic


def _build_cmp(op: str, left: _Node, right: _Node):
    lconst, lv = _folded(left)
    rconst, rv = _folded(right)
    if left.kind == "prop" and rconst or right.kind == "prop" and lconst:
        prop_left = left.kind == "prop"
        name, c = (left.args, rv) if prop_left else (right.args, lv)
        # Java's equality is asymmetric: NULL = x is NULL, x = NULL is FALSE.
        missing = False if op == "=" and not prop_left else None
        if c is None and op == "=" and prop_left:  # IS NULL (or = of a NULL-valued negation)
            return lambda p: p.get(name) is None
        if type(c) is str and op == "=":
            return lambda p: missing if (v := p.get(name)) is None else v == c
        if _is_number(c):
            conv = _FROM_STRING[type(c)]
            if type(c) is not float:  # Python's int order is Java's
                fn = _OPS[op if prop_left else _FLIP[op]]
                return lambda p: missing if (v := p.get(name)) is None else fn(conv(v), c)
            test = _TESTS[op]
            if prop_left:
                return lambda p: missing if (v := p.get(name)) is None else test(_dcmp(conv(v), c))
            return lambda p: missing if (v := p.get(name)) is None else test(_dcmp(c, conv(v)))
    lf, rf = _build(left), _build(right)
    test = _TESTS[op]
    if op == "=":
        def equal(p):
            a, b = lf(p), rf(p)
            if a is None:
                return True if b is None else None
            if b is None:
                return False
            return test(_compare(a, b))
        return equal

    def ordered(p):
        a = lf(p)
        if a is None:
            return None
        b = rf(p)
        if b is None:
            return None
        if type(a) is str and type(b) is str:  # two properties: both as doubles
            return test(_dcmp(_to_double(a), _to_double(b)))
        return test(_compare(a, b))
    return ordered


# ---- public API -----------------------------------------------------------------------
class Filter:
    """A compiled SQL92 expression. Immutable and shareable between threads."""
    __slots__ = ("expression", "_root")

    def __init__(self, expression: str, root):
        self.expression, self._root = expression, root

    def matches(self, properties: dict[str, str]) -> bool:
        """True only when the expression is TRUE (not FALSE, not unknown) for these properties."""
        try:
            return self._root(properties) is True
        except _Abort:
            return False

    def matches_record(self, record) -> bool:
        """``matches`` on the properties of a stored record: a ``record_filter`` for the store."""
        return self.matches(decode_properties(record_properties(record)))

    def __repr__(self) -> str:
        return f"Filter({self.expression!r})"


def compile(expression: str) -> Filter:  # noqa: A001 - the module's verb, as re.compile
    """Parse and check ``expression``; FilterExpressionError says where and why it is malformed."""
    if not isinstance(expression, str):
        raise FilterExpressionError(f"expected a string, got {type(expression).__name__}")
    return Filter(expression, _build(_Parser(expression).parse()))


@functools.lru_cache(maxsize=1024)
def compile_cached(expression: str) -> Filter:
    """``compile`` memoized by text: every pull of a subscription carries the same expression."""
    return compile(expression)
