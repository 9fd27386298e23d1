"""shmq.message.sql_filter: RocketMQ 4.9.8's SQL92 property filter (MessageSelector.bySql)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from shmq.errors import FilterExpressionError, ShmqError
from shmq.message import sql_filter
from shmq.message.properties import decode_properties, encode_properties
from shmq.message.record import decode_record, encode_record, record_properties
from shmq.message.sql_filter import Filter, compile_cached


def m(expr: str, **props: str) -> bool:
    return sql_filter.compile(expr).matches(props)


class TestNumbers:
    @pytest.mark.parametrize("expr, a, want", [
        ("a > 5", "6", True), ("a > 5", "5", False), ("a >= 5", "5", True),
        ("a < 5", "-7", True), ("a <= -5", "-5", True), ("a = 5", "5", True),
        ("a = 5", "+5", True), ("a <> 5", "6", True), ("a != 5", "5", False),
        ("5 < a", "6", True), ("5 >= a", "6", False), ("-5 = a", "-5", True),
        ("a > 1.5", "2", True), ("a = 2.0", "2", True), ("a > 0.0", "1e-3", True),
        ("a > 1e3", "1001", True), ("a < .5", "0.25", True), ("a = 5L", "5", True),
        ("a > - -5", "6", True), ("a > +5", "6", True),
    ])
    def test_compare(self, expr, a, want):
        assert m(expr, a=a) is want

    def test_integer_literal_parses_the_property_as_a_java_int(self):
        # RocketMQ converts the property with Integer.valueOf: '5.5' and '3000000000' fail,
        # the evaluation throws and the broker drops the message. A decimal literal works.
        assert m("a > 5", a="5.5") is False
        assert m("a < 5", a="5.5") is False
        assert m("a > 5.0", a="5.5") is True
        assert m("a > 5", a="3000000000") is False
        assert m("a > 3000000000", a="3000000001") is True  # a long literal: Long.valueOf
        assert m("a > -2147483649", a="-2147483648") is True

    def test_long_digit_strings(self):
        assert m("a = 5", a="0" * 5000 + "5") is True  # Integer.valueOf takes zero padding
        assert m("a > 5", a="9" * 5000) is False  # overflow, and int() would refuse the text
        assert m("a > 5.0", a="9" * 5000) is True
        assert m("a < 9223372036854775807", a="-9223372036854775808") is True

    @pytest.mark.parametrize("a", ["abc", "", " 5", "5 ", "5_0", "0x5", "1.0.0", "+", "-", "+-5"])
    def test_unparsable_property_is_no_match_never_an_error(self, a):
        for expr in ("a > 5", "a = 5", "a <> 5", "NOT (a > 5)", "a BETWEEN 1 AND 9"):
            assert m(expr, a=a) is False

    @pytest.mark.parametrize("a, want", [
        (" 5.5 ", True), ("5.5d", True), ("5.5F", True), ("1e1", True), ("0x1.8p2", True),
        ("Infinity", True), ("-Infinity", False), ("NaN", True), ("nan", False), ("5,5", False),
    ])
    def test_decimal_literal_parses_like_double_valueof(self, a, want):
        assert m("a > 5.0", a=a) is want  # Double.compareTo puts NaN above everything

    def test_negative_zero_is_below_zero_as_in_double_compareto(self):
        assert m("a = 0.0", a="-0.0") is False
        assert m("a < 0.0", a="-0.0") is True
        assert m("a = 0", a="-0") is True  # an int has no negative zero

    def test_two_properties_compare_as_doubles(self):
        assert m("a > b", a="10", b="9.5") is True
        assert m("a > b", a="x", b="1") is False
        assert m("a = b", a="5", b="5.0") is False  # = on two strings is string equality
        assert m("a = b", a="x", b="x") is True


class TestStringsAndBooleans:
    def test_string_equality(self):
        assert m("region = 'eu'", region="eu") is True
        assert m("region = 'eu'", region="EU") is False
        assert m("region <> 'eu'", region="us") is True
        assert m("'eu' = region", region="eu") is True
        assert m("s = 'it''s'", s="it's") is True
        assert m("s = ''", s="x") is False

    def test_string_literal_against_number_literal(self):
        assert m("'5' = 5") is True
        assert m("'x' = 5") is False  # Integer.valueOf('x') throws

    def test_boolean_literals(self):
        assert m("TRUE") is True and m("FALSE") is False and m("NULL") is False
        assert m("flag = TRUE", flag="True") is True   # Boolean.valueOf
        assert m("flag = TRUE", flag="yes") is False
        assert m("flag = FALSE", flag="yes") is True
        assert m("TRUE = flag", flag="true") is False  # Java casts the Boolean to String: throws
        assert m("TRUE = FALSE") is False and m("1 = TRUE") is False

    def test_bare_property_is_false_when_present_and_null_when_absent(self):
        assert m("a", a="true") is False
        assert m("NOT a", a="x") is True
        assert m("NOT a") is False

    def test_property_names_case_sensitive_keywords_not(self):
        assert m("Region = 'eu' and REGION is null", Region="eu") is True
        assert m("region = 'eu'", Region="eu") is False
        assert m("order.region = 'eu' AND $x_1 = 1", **{"order.region": "eu", "$x_1": "1"})

    def test_comments(self):
        assert m("a = 1 -- trailing\n AND /* inline */ b = 2 -- end", a="1", b="2") is True


class TestNulls:
    # three-valued truth tables: T, F, and U (unknown: the property is missing)
    VALUES = {"T": {"x": "1"}, "F": {"x": "0"}, "U": {}}
    P = "x = 1"

    @pytest.mark.parametrize("left, right, want_and, want_or", [
        ("T", "T", True, True), ("T", "F", False, True), ("T", "U", False, True),
        ("F", "F", False, False), ("F", "U", False, False), ("U", "U", False, False),
    ])
    def test_and_or(self, left, right, want_and, want_or):
        props = {"l": self.VALUES[left].get("x"), "r": self.VALUES[right].get("x")}
        props = {k: v for k, v in props.items() if v is not None}
        assert sql_filter.compile("l = 1 AND r = 1").matches(props) is want_and
        assert sql_filter.compile("r = 1 AND l = 1").matches(props) is want_and
        assert sql_filter.compile("l = 1 OR r = 1").matches(props) is want_or
        assert sql_filter.compile("r = 1 OR l = 1").matches(props) is want_or

    def test_unknown_under_not_stays_unknown(self):
        assert m("NOT (x = 1)") is False
        assert m("NOT (x = 1)", x="0") is True
        assert m("NOT (NOT (x = 1))") is False
        assert m("NOT (x = 1) OR TRUE") is True
        assert m("(x = 1 AND FALSE) IS NULL") is False  # F AND U is F
        assert m("(x = 1 OR FALSE) IS NULL") is True

    def test_is_null(self):
        assert m("x IS NULL") is True and m("x IS NULL", x="1") is False
        assert m("x IS NOT NULL", x="1") is True and m("x IS NOT NULL") is False
        assert m("x is not null and x = 'a'", x="a") is True

    def test_missing_property_never_matches_a_comparison(self):
        for expr in ("x = 1", "x <> 1", "x > 1", "x < 1", "x = 'a'", "x <> 'a'", "x IN ('a')",
                     "x NOT IN ('a')", "x BETWEEN 1 AND 2", "x NOT BETWEEN 1 AND 2"):
            assert m(expr) is False, expr

    def test_java_equality_is_asymmetric(self):
        # ComparisonExpression: NULL = v is NULL, but v = NULL is FALSE, so <> becomes TRUE
        assert m("a = b", a="1") is False
        assert m("a <> b", a="1") is True
        assert m("a <> b", b="1") is False
        assert m("a = b") is True  # NULL = NULL: Java's `lv == rv` holds
        assert m("5 <> a") is True
        assert m("a <> 5") is False

    def test_unparsable_value_aborts_the_whole_expression_left_to_right(self):
        assert m("a = 5 OR b = 'x'", a="abc", b="x") is False
        assert m("b = 'x' OR a = 5", a="abc", b="x") is True
        assert m("b = 'y' AND a = 5", a="abc", b="x") is False


class TestPrecedence:
    def test_and_binds_tighter_than_or(self):
        assert m("a = 1 OR b = 1 AND c = 1", a="1") is True
        assert m("(a = 1 OR b = 1) AND c = 1", a="1") is False
        assert m("a = 1 AND b = 1 OR c = 1", c="1") is True

    def test_not_binds_tighter_than_comparison_as_in_rocketmq(self):
        assert m("NOT (a = 1)", a="2") is True
        assert m("NOT a = 1", a="2") is False  # (NOT a) = 1: a Boolean is never 1
        assert m("NOT a = TRUE", a="2") is True
        assert m("NOT a = 1 OR b = 2", b="2") is True
        assert m("NOT TRUE OR TRUE") is True and m("NOT (TRUE OR TRUE)") is False

    def test_comparison_result_compared(self):
        assert m("a > 1 = TRUE", a="2") is True
        assert m("(a > 1) = FALSE", a="2") is False


class TestBetweenIn:
    @pytest.mark.parametrize("a, between", [
        ("0", False), ("1", True), ("5", True), ("9", True), ("10", False), ("-1", False)])
    def test_between_is_inclusive(self, a, between):
        assert m("a BETWEEN 1 AND 9", a=a) is between
        assert m("a NOT BETWEEN 1 AND 9", a=a) is (not between)

    def test_between_mixed_and_negative_bounds(self):
        assert m("a BETWEEN 1 AND 2.5", a="2") is True
        assert m("a BETWEEN -5 AND -1", a="-3") is True
        assert m("a BETWEEN 5 AND -1", a="3") is False  # bounds are not constants for the check
        assert m("a BETWEEN 5 AND 5", a="5") is True
        assert m("a NOT BETWEEN 5 AND 1", a="3") is True  # 4.9.8 checks BETWEEN only

    def test_between_binds_to_its_own_and(self):
        assert m("a BETWEEN 1 AND 3 AND b = 'x'", a="2", b="x") is True
        assert m("a BETWEEN 1 AND 3 AND b = 'x'", a="2", b="y") is False

    def test_in(self):
        assert m("r IN ('eu', 'us')", r="us") is True
        assert m("r IN ('eu', 'us')", r="asia") is False
        assert m("r NOT IN ('eu', 'us')", r="asia") is True
        assert m("r NOT IN ('eu')", r="eu") is False
        assert m("r IN ('it''s')", r="it's") is True
        assert m("n IN ('1')", n="1.0") is False  # IN compares strings, no conversion
        many = ", ".join(f"'v{i}'" for i in range(50))
        assert m(f"r IN ({many})", r="v49") is True


class TestErrors:
    @pytest.mark.parametrize("expr, fragment, column", [
        ("", "empty expression", None),
        ("  -- only a comment", "empty expression", None),
        ("(a > 1", "expected ')'", 7),
        ("((a > 1) AND b = 2", "expected ')'", 19),
        ("a > 1)", "unbalanced ')'", 6),
        ("a >", "ends where an operand is expected", 4),
        ("a = 1 AND", "ends where an operand is expected", 10),
        ("a = 1 OR OR b = 2", "found 'OR'", 10),
        ("a > > 1", "found '>'", 5),
        ("a # 1", "unexpected character '#'", 3),
        ("a == 1", "found '='", 4),
        ("a = 'abc", "unterminated string", 5),
        ("a = 1 /* x", "unterminated /* comment", 7),
        ("a = 1 b = 2", "unexpected 'b' after a complete expression", 7),
        ("a > 'x'", "cannot be compared with '>'", 5),
        ("NOT a > 1", "write NOT (...)", 1),
        ("(a = 1) > 2", "is a boolean", 2),
        ("a = NULL", "use IS NULL", 5),
        ("TRUE = 1", "TRUE cannot be compared with 1", 1),
        ("a IS 1", "NULL or NOT NULL after IS", 6),
        ("a IN ()", "list of string literals", 7),
        ("a IN (1)", "list of string literals", 7),
        ("a IN 'x'", "'(' after IN", 6),
        ("a IN ('x'", "')' or ','", 10),
        ("'x' IN ('x')", "IN needs a property", 1),
        ("NOT a IN ('x')", "write a NOT IN", 1),
        ("a = " + "9" * 5000, "does not fit a Java long", 5),
        ("a BETWEEN 5 AND 3", "lower bound 5 is greater", 11),
        ("a BETWEEN 1 OR 3", "AND between the BETWEEN bounds", 13),
        ("a BETWEEN NULL AND 3", "cannot be NULL", 11),
        ("5", "not a boolean expression", 1),
        ("-a", "not a boolean expression", 1),
        ("a = 1 AND 'x'", "not a boolean expression", 11),
        ("a = 007", "may not start with 0", 5),
        ("a = 9223372036854775808", "does not fit a Java long", 5),
        ("a > 1e999", "larger than the largest double", 5),
        ("(" * 70 + "a" + ")" * 70, "nested", 65),
        ("NOT " * 70 + "a", "nested", 257),
    ])
    def test_malformed(self, expr, fragment, column):
        with pytest.raises(FilterExpressionError) as info:
            sql_filter.compile(expr)
        err = info.value
        assert fragment in str(err)
        assert err.code == 23 and isinstance(err, ShmqError)
        assert err.expression == expr
        assert (err.position + 1 if err.position is not None else None) == column

    def test_long_chains_compile_and_evaluate(self):
        expr = " OR ".join(f"a = {i}" for i in range(2000))
        assert m(expr, a="1999") is True
        with pytest.raises(FilterExpressionError, match="deeper than"):
            sql_filter.compile("a = 1" + " = TRUE" * 300)

    def test_not_a_string(self):
        with pytest.raises(FilterExpressionError):
            sql_filter.compile(None)  # type: ignore[arg-type]


class TestRecordAndCache:
    def record(self, props: dict[str, str], body: bytes = b"\x01\x02payload") -> bytes:
        return encode_record(topic="T", body=body, properties=encode_properties(props))

    def test_matches_record(self):
        flt = sql_filter.compile("a > 5 AND region IN ('eu','us') AND TAGS = 'tagA'")
        good = self.record({"a": "6", "region": "eu", "TAGS": "tagA"})
        bad = self.record({"a": "6", "region": "asia", "TAGS": "tagA"})
        assert flt.matches_record(good) is True
        assert flt.matches_record(memoryview(good)) is True
        assert flt.matches_record(bytearray(good)) is True
        assert flt.matches_record(bad) is False
        assert decode_properties(record_properties(good)) == decode_record(good).properties

    def test_record_inside_a_larger_buffer_and_without_properties(self):
        rec = self.record({"k": "v"}, body=b"")
        buf = memoryview(b"\0" * 16 + rec + b"\xff" * 8)
        assert sql_filter.compile("k = 'v'").matches_record(buf[16:16 + len(rec)]) is True
        bare = encode_record(topic="T", body=b"x")
        assert bytes(record_properties(bare)) == b""
        assert sql_filter.compile("k IS NULL").matches_record(bare) is True

    def test_compile_cached(self):
        assert compile_cached("a = 1") is compile_cached("a = 1")
        assert isinstance(compile_cached("a = 1"), Filter)
        with pytest.raises(FilterExpressionError):
            compile_cached("a =")

    def test_repr(self):
        assert repr(sql_filter.compile("a = 1")) == "Filter('a = 1')"


# ---- property-based ---------------------------------------------------------------------
NAMES = ["a", "b", "c", "x.y"]
VALUES = ["0", "1", "-3", "5.5", "1e2", "NaN", "abc", "", "eu", "TRUE", " 7", "99999999999"]
props_st = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=4)
number_st = st.one_of(st.integers(-10, 10).map(str), st.sampled_from(["2.5", "0.0", "3000000000", "1e3"]))
string_st = st.sampled_from(["'eu'", "'us'", "'it''s'", "''", "'5'"])
name_st = st.sampled_from(NAMES)


@st.composite
def predicate(draw):
    name = draw(name_st)
    kind = draw(st.integers(0, 7))
    if kind == 0:
        return f"{name} {draw(st.sampled_from(['=', '<>', '!=', '>', '>=', '<', '<=']))} {draw(number_st)}"
    if kind == 1:
        return f"{name} {draw(st.sampled_from(['=', '<>']))} {draw(string_st)}"
    if kind == 2:
        lo, hi = sorted([draw(st.integers(-10, 10)), draw(st.integers(-10, 10))])
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}BETWEEN {lo} AND {hi}"
    if kind == 3:
        items = ", ".join(draw(st.lists(string_st, min_size=1, max_size=3)))
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}IN ({items})"
    if kind == 4:
        return f"{name} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == 5:
        return draw(st.sampled_from(["TRUE", "FALSE", "NULL", name]))
    if kind == 6:
        return f"{name} {draw(st.sampled_from(['=', '<>', '>', '<']))} {draw(name_st)}"
    return f"{name} = {draw(st.sampled_from(['TRUE', 'FALSE']))}"


expr_st = st.recursive(
    predicate(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from([" AND ", " OR ", " and ", " or "]), inner).map("".join),
        inner.map(lambda e: f"NOT ({e})"),
        inner.map(lambda e: f"({e})"),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(expr_st, st.lists(props_st, min_size=1, max_size=5))
def test_random_well_formed_expressions_never_raise(expr, prop_maps):
    flt = sql_filter.compile(expr)
    for props in prop_maps:
        assert flt.matches(props) in (True, False)
        rec = encode_record(topic="T", body=b"b", properties=encode_properties(props))
        on_wire = {k: v for k, v in props.items() if v}  # empty values are dropped, as in Java
        assert flt.matches_record(rec) is flt.matches(on_wire)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab1.5'()=<>!- \tNOTANDORISNULLINBETWEEN,")), max_size=30),
       props_st)
def test_arbitrary_text_compiles_or_raises_filter_error(text, props):
    try:
        flt = sql_filter.compile(text)
    except FilterExpressionError as err:
        assert err.code == 23
        return
    assert flt.matches(props) in (True, False)


def kleene(expr_tree, props):
    """Reference three-valued evaluation over integer-valued properties (no conversions fail)."""
    op = expr_tree[0]
    if op == "cmp":
        _, name, n = expr_tree
        return None if name not in props else int(props[name]) > n
    if op == "not":
        v = kleene(expr_tree[1], props)
        return None if v is None else not v
    values = [kleene(t, props) for t in expr_tree[1:]]
    if op == "and":
        return False if False in values else (None if None in values else True)
    return True if True in values else (None if None in values else False)


tree_st = st.recursive(
    st.tuples(st.just("cmp"), name_st, st.integers(-3, 3)),
    lambda inner: st.one_of(st.tuples(st.just("not"), inner),
                            st.tuples(st.sampled_from(["and", "or"]), inner, inner)),
    max_leaves=10,
)


def render(tree) -> str:
    if tree[0] == "cmp":
        return f"{tree[1]} > {tree[2]}"
    if tree[0] == "not":
        return f"NOT ({render(tree[1])})"
    return f"({render(tree[1])} {tree[0].upper()} {render(tree[2])})"


@settings(max_examples=300, deadline=None)
@given(tree_st, st.dictionaries(name_st, st.integers(-5, 5).map(str), max_size=4))
def test_matches_the_three_valued_reference(tree, props):
    assert sql_filter.compile(render(tree)).matches(props) is (kleene(tree, props) is True)
