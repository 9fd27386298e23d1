"""java_string_hash against values a JVM prints for String.hashCode()."""
import pytest
from hypothesis import given, strategies as st

from shmq.message.javahash import java_string_hash, java_string_hash_cached


def reference_hash(s: str) -> int:
    """The JLS definition, literally: Horner over UTF-16 code units, int32 wrap-around."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


# Every value below was printed by a JVM (OpenJDK, "x".hashCode()).
KNOWN = [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("TagA", 2598919),
    ("TopicTest", -1902610879),
    ("Hello World", -862545276),
    ("polygenelubricants", -2147483648),    # Integer.MIN_VALUE: Math.abs keeps it negative
    ("Aa", 2112),
    ("BB", 2112),                            # the classic collision with "Aa"
    ("é", 233),                              # U+00E9: one code unit
    ("日本", 835047),                         # 0x65E5*31 + 0x672C
    ("\U0001F600", 1772899),                 # non-BMP: surrogates 0xD83D*31 + 0xDE00
    ("\ud800x", 0xD800 * 31 + ord("x")),    # a lone surrogate counts as one unit
]


class TestKnownValues:
    @pytest.mark.parametrize("s,expected", KNOWN)
    def test_known(self, s, expected):
        assert java_string_hash(s) == expected
        assert java_string_hash_cached(s) == expected

    @pytest.mark.parametrize("s,expected", KNOWN)
    def test_reference_agrees(self, s, expected):
        assert reference_hash(s) == expected

    def test_long_strings_grow_the_power_table(self):
        s = "x" * 5000 + "\U0001F600" * 700
        assert java_string_hash(s) == reference_hash(s)

    def test_result_is_signed_int32(self):
        for s in ("zzzzzzzzzz", "polygenelubricants", "Hello World"):
            assert -(1 << 31) <= java_string_hash(s) < 1 << 31


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_matches_definition_on_any_text(s):
    assert java_string_hash(s) == reference_hash(s)


@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_matches_definition_on_ascii(s):
    assert java_string_hash(s) == reference_hash(s)
