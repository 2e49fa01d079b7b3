"""The reader: data, positions, clear ReadErrors, and a fuzzer that must never crash it."""
import re

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


@pytest.mark.parametrize("n", [3, 31, 32, 33, 100])
def test_free_names_in_order_of_first_use_with_few_or_many_symbols(n):
    """A program's symbols are looked up in order while there are few and by a hash table once
    there are many (reader.cpp): the free names are the same either way, in order of first use,
    each once, with the position of its first use."""
    names = [f"v{k}" for k in range(n)]
    text = "(+ " + " ".join(names + names[::-1]) + ")"
    prog = ndvm.parse(text)
    assert prog.free_names == tuple(names)
    assert prog.free_positions["v0"] == (1, 4)
    value = ndvm.Evaluator().evaluate(prog, params={k: 1.0 for k in names}).value
    assert value.tolist() == [[2.0 * n]]


@pytest.mark.parametrize("text, free, value", [
    ("(let ((if 3)) (+ if x))", ("x",), 3.5),             # a special form's name rebound
    ("(let ((cos (lambda (t) t))) (cos x))", ("x",), 0.5),  # a primitive's name rebound
    ("(define pi 3) (* pi x)", ("x",), 1.5),             # the built-in constant defined again
    ("(* pi x)", ("x",), 3.141592653589793 / 2),
    ("((lambda (f) (f x)) (lambda (y) (* y q)))", ("x", "q"), 0.25),
    ("(let ((else #f)) (cond (else 1) (#t x)))", ("x",), 0.5),
    ("(+ (square x) (square q) x)", ("x", "q"), 1.0),    # a prelude function used twice
])
def test_names_resolve_by_what_binds_them(text, free, value):
    """Each use of a name resolves to what binds it there: a local, a top-level definition, a
    special form, pi, a primitive, a prelude function or a free name (the expander finds a
    symbol's global meaning once per program; a local or a definition still comes first)."""
    prog = ndvm.parse(text)
    assert prog.free_names == free
    got = ndvm.Evaluator().evaluate(prog, params={k: 0.5 for k in free}).value
    assert got.tolist() == [[pytest.approx(value)]]


def test_a_special_form_name_used_as_a_variable_is_refused_at_each_use():
    with pytest.raises(ndvm.FormError, match="'if' is a special form"):
        ndvm.parse("(+ x if)")
    with pytest.raises(ndvm.FormError, match="'lambda' is a special form"):
        ndvm.parse("(let ((y 1)) (+ y lambda))")


@pytest.mark.parametrize("text, col, match", [
    ("(+ a\x00b 1)", 5, r"a control character \(U\+0000\) in a name"),
    ("(+ a\x1b 1)", 5, r"control character \(U\+001B\)"),
    ("(+ a\x7f 1)", 5, r"control character \(U\+007F\)"),
    ("(+ a\u200bb 1)", 5, r"an invisible character \(U\+200B"),
    ("(+ ab\u200d 1)", 6, r"invisible character \(U\+200D"),
    ("(+ x\u2060 1)", 5, r"invisible character \(U\+2060"),
    ("(+ a\ufeff 1)", 5, r"invisible character \(U\+FEFF"),
])
def test_a_name_with_an_invisible_or_control_character_is_refused(text, col, match):
    # (a NUL made the name `a<NUL>b`, printed as "unbound variable 'a b'"; a zero-width space
    # made a second `a` that no binding of `a` reached)
    with pytest.raises(ndvm.ReadError, match=match) as e:
        ndvm.parse(text)
    assert (e.value.line, e.value.col) == (1, col)


def test_visible_names_comments_and_a_leading_byte_order_mark_read_as_before():
    assert ndvm.parse("(+ \u00e9t\u00e9 \u03b1 \u2202x)").free_names == ("\u00e9t\u00e9", "\u03b1",
                                                                         "\u2202x")
    assert ndvm.parse("(+ a 1) ; \x00 \u200b in a comment\n").free_names == ("a",)
    assert ndvm.parse("\ufeff(* a x)").free_names == ("a", "x")  # (as a file's is dropped)


@pytest.mark.parametrize("src, message", [
    ("(+ 1/3 x)", "'1/3' is not a number of the language (no rationals"),
    ("(* 1.5.2 x)", "malformed number '1.5.2'"),
    ("(* 1e-5e x)", "malformed number '1e-5e'"),
    ("(+ -2.5e3.1 2)", "malformed number '-2.5e3.1'"),
])
def test_a_malformed_number_is_a_read_error_not_a_free_name(src, message):
    # (they were read as symbols: ndvm.fit("(* 1.5.2 x)", ...) fitted a parameter named 1.5.2)
    with pytest.raises(ndvm.ReadError, match=re.escape(message)) as e:
        ndvm.parse(src)
    assert (e.value.line, e.value.col) == (1, 4)
    for fine in ("(+ .5 x)", "(+ -.5 x)", "(+ +2 x)", "(+ 1e5 x)", "(- x)", "(let ((->x 1)) ->x)"):
        ndvm.parse(fine)


@pytest.mark.parametrize("space, code", [("\u00a0", "U+00A0"), ("\u2009", "U+2009"),
                                         ("\u3000", "U+3000"), ("\u202f", "U+202F")])
def test_a_unicode_space_in_a_name_is_a_read_error(space, code):
    # (a no-break space pasted from a document became part of a name: "unbound variable")
    with pytest.raises(ndvm.ReadError, match=re.escape(code)):
        ndvm.parse(f"(+ x{space} 1)")
    assert ndvm.parse("(+ café π 1)").free_names == ("café", "π")


def test_a_read_or_an_expansion_that_raised_leaves_nothing_to_the_next():
    # (the reader's list items and the expander's resolved names are one buffer a thread,
    # reused: a program that raised half-way must not leave its entries to the next one)
    with pytest.raises(ndvm.ReadError, match="unbalanced"):
        ndvm.parse("(f (g (h 1 2) (k")
    with pytest.raises(ndvm.FormError, match="if"):
        ndvm.parse("(+ a (if))")  # ('+' and 'a' resolved before the error)
    p = ndvm.parse("(* b (- 2 1) 2)")  # (its symbols number as the last program's did)
    assert p.free_names == ("b",)
    assert ndvm.Evaluator().evaluate(p, params={"b": 3.0}).item() == 6.0
    assert ndvm.read("(a (b c) d)") == [["a", ["b", "c"], "d"]]


def test_programs_parse_alike_on_many_threads():
    from concurrent.futures import ThreadPoolExecutor
    texts = [f"(+ (* a{i % 7} x) (exp (- b x)) {i})" for i in range(400)]
    texts += ["(let ((y 2)) (loop ((k 0)) (if (> k 3) (* y k) (recur (+ k 1)))))", "(+ 1"] * 50

    def one(t):
        try:
            p = ndvm.parse(t)
        except ndvm.ReadError as e:
            return ("error", str(e))
        return (p.free_names, p.result_position)

    serial = [one(t) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, texts)) == serial
        # (programs made on the pool's threads and freed on this one: their storage goes to
        # this thread's spares, which the next programs reuse)
        made = list(pool.map(ndvm.parse, texts[:400]))
    del made
    assert [one(t) for t in texts] == serial
    assert ndvm.Evaluator().evaluate(texts[-2]).item() == 8.0


@pytest.mark.parametrize("text, value", [
    ("-0", float("-inf")), ("0", float("inf")), ("+0", float("inf")), ("-000", float("-inf")),
    ("123456789012345", 1 / 123456789012345), ("1234567890123456", 1 / 1234567890123456),
    ("000000000000000000004", 0.25),
])
def test_integers_read_as_strtod_reads_them(text, value):
    # (an integer of at most 15 digits is read without strtod: the same double, -0 included)
    assert ndvm.Evaluator().evaluate(f"(/ 1 (* {text} 1.0))").item() == value


def test_programs_of_the_same_free_names_share_one_tuple_of_them():
    first = ndvm.parse("(+ a (* b x))")
    assert ndvm.parse("(* a (+ b (sin x)))").free_names is first.free_names
    # another order, another set, more names past a short string's room, non-ASCII names: each
    # its own names (whatever tuple a slot kept before), then shared by the next alike
    texts = ["(+ b (* a x))", "(+ a b)", "(+ a (* b x) c)", "(+ α (* β x))",
             "(+ a_very_long_parameter_name x)", "(* x y)", "(+ x y)", "x", "(+ 1 2)"]
    for _ in range(2):
        for text in texts + [f"(+ p{i} x)" for i in range(200)]:
            names = ndvm.parse(text).free_names
            assert names == tuple(ndvm.parse(text).free_positions)
            assert ndvm.parse(text).free_names is names
    assert ndvm.parse("(+ b (* a x))").free_names == ("b", "a", "x")
    assert ndvm.parse("(+ 1 2)").free_names == ()


def test_a_damped_searchs_orders_of_free_names_are_kept_at_once():
    """The 19 orders of free names a damped island search's 4,096 candidates have (seed 5) each
    keep their tuple while the others are made: a program of any of them, parsed after all the
    others, gets the tuple the first of its order got (none made again)."""
    orders = ["a", "ab", "abc", "abcd", "abcdx", "abcx", "abcxd", "abx", "abxc", "abxcd", "ax",
              "axb", "axbc", "axbcd", "x", "xa", "xab", "xabc", "xabcd"]

    def text(order):
        return "(+ " + " ".join(order) + ")"

    first = {o: ndvm.parse(text(o)).free_names for o in orders}
    for o in orders:
        assert first[o] == tuple(o)
        assert ndvm.parse(text(o)).free_names is first[o]


@pytest.mark.parametrize("text, bounded", [
    ("(+ a (* b (sin x)))", True), ("(if (< x 0) (- x) (exp x))", True),
    ("(let ((y (* a x))) (+ y (square y)))", True), ("7", True),
    ("(loop ((s x) (k 0)) (if (= k 3) s (recur (* a s) (+ k 1))))", False),
    ("((lambda (y) (* y y)) x)", False), ("(define (f y) (* y y)) (f x)", False),
    ("(let f ((k 0)) (if (< k 3) (f (+ k 1)) x))", False), ("(fold-left + 0 (list x a))", False),
    ("(car (list x a))", False), ("(vsum (vec x a))", False),
    ("(let ((car (lambda (v) v))) (car x))", False),
])
def test_a_program_is_bounded_without_lambdas_loops_or_data_primitives(text, bounded):
    assert ndvm.parse(text)._bounded is bounded


@pytest.mark.parametrize("text, free", [
    ("(+ #| c |# x ; c\n y)", {"x": (1, 12), "y": (2, 2)}),
    ("(f\t#t\r\n  #| a #| b |# |#z)", {"f": (1, 2), "z": (2, 18)}),
    (" ;a\n #|b|#\t(g ;\n q) #|c|# ", {"g": (2, 9), "q": (3, 2)}),
    ("(h 'w #||# 'v)", {"h": (1, 2)}),
    ("[x #|n|# y]", {"x": (1, 2), "y": (1, 10)}),
])
def test_spaces_and_comments_between_datums_keep_every_position(text, free):
    """What lies between datums (spaces, line and nested block comments) is skipped by one
    table lookup a character, and a list's items are read where the skipping stopped, not
    skipped again (reader.cpp): each name still has the position of its first use."""
    prog = ndvm.parse(text)
    assert prog.free_names == tuple(free)
    assert prog.free_positions == free


@pytest.mark.parametrize("text, line, col, match", [
    ("(a #| x", 1, 4, "unterminated block comment"),
    ("(a #x)", 1, 4, "bad '#' syntax '#x'"),
    ("(a #)", 1, 4, "bad '#' syntax '#'"),
    ("(a # b)", 1, 4, "bad '#' syntax '#'"),
    ("#| |# #", 1, 7, "bad '#' syntax '#'"),
    # the nesting checked before the spaces after a quote are skipped, and before an atom in a
    # list is read (its own path, not read_at's dispatch)
    ("'" * 10001 + " #|", 1, 10002, "nesting deeper than 10000 levels"),
    ("(" * 10001 + "x", 1, 10002, "nesting deeper than 10000 levels"),
    ("'" * 10001 + "x", 1, 10002, "nesting deeper than 10000 levels"),
    ("(" * 10001 + " #|", 1, 10003, "unterminated block comment"),
])
def test_a_hash_or_a_comment_between_datums_fails_where_it_did(text, line, col, match):
    """A '#' between datums starts a block comment only when '|' follows; otherwise it is an
    atom's ('#t', or bad '#' syntax), with its own position; the nesting limit is checked
    before the spaces after a quote or a list's '(' are skipped."""
    with pytest.raises(ndvm.ReadError, match=re.escape(match)) as err:
        ndvm.parse(text)
    assert (err.value.line, err.value.col) == (line, col)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 17, 100])
def test_nodes_of_many_kids_keep_them_in_order(n):
    """A node's kids are an ArenaList (reader.hpp): reserved to their count where it is known
    (a call's arguments), else grown as they come (a begin's, a body's definitions, the top
    level's): every kid is kept in order at any count."""
    ev = ndvm.Evaluator()
    args = " ".join(str(k) for k in range(1, n + 1))
    assert ev.evaluate(f"(+ 0 {args})").value.item() == n * (n + 1) / 2
    assert ev.evaluate(f"(fold-left (lambda (a b) (+ (* 2 a) b)) 0 (list {args}))"
                       ).value.item() == pytest.approx(sum(k * 2 ** (n - k)
                                                           for k in range(1, n + 1)))
    subs = " ".join(f"(- {k} x)" for k in range(1, n + 1))
    assert ev.evaluate(f"(max {subs})", params={"x": 0.5}).value.item() == n - 0.5
    defines = " ".join(f"(define (f{k} y) (+ y {k}))" for k in range(n))
    calls = " ".join(f"(f{k} 1)" for k in range(n))
    assert ev.evaluate(f"{defines} (+ 0 {calls})").value.item() == n + n * (n - 1) / 2
    body = " ".join(f"(define g{k} {k})" for k in range(n))
    uses = " ".join(f"g{k}" for k in range(n))
    assert ev.evaluate(f"((lambda () {body} (+ 0 {uses})))").value.item() == n * (n - 1) / 2
    assert ev.evaluate(f"(begin {args})").value.item() == n
    clauses = " ".join(f"((= x {k}) {10 * k})" for k in range(n))
    assert ev.evaluate(f"(cond {clauses} (else -1))", params={"x": n - 1.0}
                       ).value.item() == 10 * (n - 1)
