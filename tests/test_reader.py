"""The reader: data, positions, clear ReadErrors, and a fuzzer that must never crash it."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ndvm
from ndvm._core import Dotted, Symbol


def test_read_data():
    data = ndvm.read("(a 1 -2.5 .5 1e-3 #t #f 'x [1 2] (p . q)) ; comment\n#| block |# 7")
    first = data[0]
    assert first[0] == "a" and isinstance(first[0], Symbol)
    assert first[1:7] == [1, -2.5, 0.5, 1e-3, True, False]
    assert first[7] == ["quote", "x"]
    assert first[8] == ["vec", 1, 2]
    assert first[9] == Dotted(["p"], "q")
    assert data[1] == 7


def test_symbols_that_look_like_numbers():
    assert ndvm.read("(+ - ... 1+ -x e3 .e)")[0] == ["+", "-", "...", "1+", "-x", "e3", ".e"]


def test_huge_literals_are_ieee():
    assert ndvm.Evaluator().evaluate("1e400").item() == float("inf")


@pytest.mark.parametrize("text, line, col, match", [
    ("", 1, 1, "empty program"),
    ("   ; only a comment\n", 2, 1, "empty program"),
    ("(+ 1 2", 1, 1, "unbalanced"),
    ("(+ 1 2))", 1, 8, "unexpected"),
    ("\n  )", 2, 3, "unexpected"),
    ("(a ]", 1, 4, "mismatched"),
    ("#q", 1, 1, "bad '#' syntax"),
    ('(f "s")', 1, 4, "strings"),
    ("(. a)", 1, 2, "'.'"),
    ("#| open", 1, 1, "block comment"),
    ("(" * 20000 + ")" * 20000, 1, 10002, "nesting"),
])
def test_read_errors(text, line, col, match):
    with pytest.raises(ndvm.ReadError, match=match) as info:
        ndvm.parse(text, name="f.scm")
    assert (info.value.line, info.value.col) == (line, col)
    assert info.value.file == "f.scm"


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash_the_reader(data):
    text = data.decode("utf-8", "replace")
    try:
        ndvm.parse(text)
    except ndvm.SchemeError as e:
        assert e.kind in ("ReadError", "FormError", "EvalError")
        assert e.line is not None


TOKENS = st.sampled_from(["(", ")", "[", "]", "'", "1", "-2.5", "x", "a", "+", "if", "let",
                          "lambda", "define", "loop", "recur", "#t", "#f", ".", " ", "\n",
                          "car", "vec", "(x 1)", "((x 1))", ";c\n"])


@settings(max_examples=600, deadline=None, derandomize=True)
@given(st.lists(TOKENS, max_size=40))
def test_random_token_streams_parse_or_raise_cleanly(tokens):
    text = " ".join(tokens)
    try:
        prog = ndvm.parse(text)
    except ndvm.SchemeError as e:
        assert e.line is not None
        return
    params = {name: 0.5 for name in prog.free_names}
    try:
        ndvm.Evaluator(max_steps=100_000).evaluate(prog, params=params, grad=True)
    except ndvm.SchemeError as e:
        assert e.kind in ("EvalError", "LimitError", "UnboundError"), str(e)
