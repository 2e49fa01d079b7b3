"""A catalogue of bad programs with their exact errors, identical under every client.

Each entry: (source, kind, line, col, message). An error never crashes the process, and the
process stays usable after it.
"""
import pytest

import ndvm
from conftest import CLIENTS

CATALOGUE = [
    ('(car 1.0)', 'EvalError', 1, 1, 'car: expected a pair, got a number'),
    ("(cdr '())", 'EvalError', 1, 1, 'cdr: expected a pair, got the empty list'),
    ("(+ 1 'a)", 'EvalError', 1, 1, '+: expected a number, vector or matrix (argument 2), got a symbol'),
    ('(vec 1 (list 2))', 'EvalError', 1, 1, 'vec: expected numbers (or vectors, for the rows of a matrix) (argument 2), got a pair'),
    ('(dot (vec 1 2) (vec 1 2 3))', 'EvalError', 1, 1, 'dot: shape mismatch between a vector of length 2 and a vector of length 3'),
    ('(matmul (mat [1 2]) (mat [1 2]))', 'EvalError', 1, 1, 'matmul: shape mismatch between a 1x2 matrix and a 1x2 matrix'),
    ('(ref (vec 1 2) 5)', 'EvalError', 1, 1, 'ref: index 5 out of range for length 2'),
    ('(ref (vec 1 2) 0.5)', 'EvalError', 1, 1, 'ref: index must be an integer, got 0.5'),
    ('(ref (mat [1 2] [3 4]) 0 2)', 'EvalError', 1, 1, 'ref: index 2 out of range for length 2'),
    ('(inv (mat [1 2 3] [4 5 6]))', 'EvalError', 1, 1, 'inv: expected a square matrix, got a 2x3 matrix'),
    ('(f 1)', 'UnboundError', 1, 2, "unbound variable 'f': not defined by the program and not given as a parameter, data input or constant"),
    ('(define (f x) x) (f 1 2)', 'EvalError', 1, 18, 'f: expects 1 argument, got 2'),
    ('((lambda (x y) x) 1)', 'EvalError', 1, 1, 'lambda: expects 2 arguments, got 1'),
    ('(let ((f 3)) (f 1))', 'EvalError', 1, 14, "not a procedure: the operator 'f' is a number"),
    ('(if)', 'FormError', 1, 1, 'if: expected (if test then) or (if test then else)'),
    ('(if 1 2 3 4)', 'FormError', 1, 1, 'if: expected (if test then) or (if test then else)'),
    ('(let ((x)) x)', 'FormError', 1, 7, 'let: each binding must be (name value), got (x)'),
    ('(let (x 1) x)', 'FormError', 1, 7, 'let: each binding must be (name value), got x'),
    ('(lambda)', 'FormError', 1, 1, 'lambda: expected (lambda (params...) body...)'),
    ('(lambda (x x) x)', 'FormError', 1, 12, "lambda: duplicate parameter 'x'"),
    ('(define)', 'FormError', 1, 1, 'define: expected (define name expr) or (define (name args...) body...)'),
    ('(+ 1 (define x 2))', 'FormError', 1, 6, 'define: only allowed at the top level or at the start of a body'),
    ('(loop ((i 0)) (+ 1 (recur i)))', 'FormError', 1, 20, 'recur: must be in tail position of its loop'),
    ('(recur 1)', 'FormError', 1, 1, 'recur: not inside a loop (or inside a lambda within the loop)'),
    ('(loop ((i 0) (j 1)) (recur 1))', 'FormError', 1, 21, 'recur: the loop has 2 variables, got 1 value'),
    ('(set! x 1)', 'FormError', 1, 1, 'set!: not supported: ndvm programs are immutable (use let or loop)'),
    ('(quote)', 'FormError', 1, 1, 'quote: expected exactly one datum'),
    ('(cond)', 'FormError', 1, 1, 'cond: expected at least one clause'),
    ('(cond (else 1) (#t 2))', 'FormError', 1, 7, 'cond: else must be the last clause'),
    ('(case)', 'FormError', 1, 1, 'case: expected (case key ((datum ...) body...) ...)'),
    ('(let loop)', 'FormError', 1, 1, 'let: expected (let ((name value) ...) body...)'),
    ('()', 'FormError', 1, 1, "() is not an expression; write '() for the empty list"),
    ('(1 . 2)', 'FormError', 1, 1, 'a dotted list is not an expression'),
    ('(define (f n) (+ 1 (f n))) (f 1)', 'LimitError', 1, 20, 'recursion depth limit exceeded: more than 10000 nested calls (raise it with Evaluator(max_depth=...))'),
    ('(loop ((i 0)) (recur (+ i 1)))', 'LimitError', 1, 15, 'step limit exceeded: more than 100000 evaluation steps (raise it with Evaluator(max_steps=...))'),
    ('(list 1 2)', 'EvalError', 1, 1, "the program's result must be a number, got a pair"),
    ('(vec 1 2)', 'EvalError', 1, 1, "the program's result must be a number, got a vector"),
    ('(length 5)', 'EvalError', 1, 1, 'length: expected a proper list, got a number'),
    ('(length (cons 1 2))', 'EvalError', 1, 1, 'length: expected a proper list, got a pair'),
    ('(list-ref (list 1 2) 2)', 'EvalError', 1, 1, 'list-ref: index 2 out of range for length 2'),
    ('(cross (vec 1 2) (vec 1 2))', 'EvalError', 1, 1, 'cross: expects two vectors of length 3, got lengths 2 and 2'),
    ('(eye -1)', 'EvalError', 1, 1, 'eye: size -1 out of range (0 to 65535)'),
    ('(zeros 1.5)', 'EvalError', 1, 1, 'zeros: size must be an integer, got 1.5'),
    ("(sqrt (vec 1 'a))", 'EvalError', 1, 7, 'vec: expected numbers (or vectors, for the rows of a matrix) (argument 2), got a symbol'),
    ('(vlen 3)', 'EvalError', 1, 1, 'vlen: expected a vector or a matrix, got a number'),
    ('(det (vec 1 2))', 'EvalError', 1, 1, 'det: expected a matrix, got a vector of length 2'),
    ('(solve (eye 2) (vec 1 2 3))', 'EvalError', 1, 1, 'solve: shape mismatch between a 2x2 matrix and a vector of length 3'),
    ('(atan 1 2 3)', 'EvalError', 1, 1, 'atan: expects 1 to 2 arguments, got 3'),
    ('(cons 1)', 'EvalError', 1, 1, 'cons: expects 2 arguments, got 1'),
    ('(letrec ((a b) (b 1)) a)', 'EvalError', 1, 13, "'b' is used before its definition is evaluated"),
    ('(define x y) x', 'UnboundError', 1, 11, "unbound variable 'y': not defined by the program and not given as a parameter, data input or constant"),
    ('(apply + (list 1 2))', 'UnboundError', 1, 2, "unbound variable 'apply': not defined by the program and not given as a parameter, data input or constant"),
    ('(+ 1', 'ReadError', 1, 1, "unbalanced '(': missing ')'"),
    ('#z', 'ReadError', 1, 1, "bad '#' syntax '#z' (only #t and #f are supported)"),
    (')', 'ReadError', 1, 1, "unexpected ')' with no matching opening bracket"),
    ('(define (g x)\n  (* x (car x)))\n(g 2)', 'EvalError', 2, 8, 'car: expected a pair, got a number'),
    ('(let* ((a 1)\n       (b (vec a 2)))\n  (+ b (vec 1 2 3)))', 'EvalError', 3, 3, '+: shape mismatch between a vector of length 2 and a vector of length 3'),
    ('(define (f n)\n  (if (= n 0)\n      (car n)\n      (f (- n 1))))\n(f 3)', 'EvalError', 3, 7, 'car: expected a pair, got a number'),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("src, kind, line, col, message", CATALOGUE, ids=[c[0][:40] for c in CATALOGUE])
def test_error_catalogue(src, kind, line, col, message, client):
    ev = ndvm.Evaluator(client=client, max_steps=100_000)
    with pytest.raises(ndvm.SchemeError) as info:
        ev.evaluate(ndvm.parse(src, "bad.scm"))
    e = info.value
    assert (e.kind, e.line, e.col, e.message) == (kind, line, col, message)
    assert type(e).__name__ == kind
    assert e.file == "bad.scm"
    assert e.form or kind == "ReadError"
    assert f"bad.scm:{line}:{col}" in str(e)
    assert ev.evaluate("(+ 1 2)").item() == 3.0  # still usable


def test_catalogue_is_large_enough():
    assert len(CATALOGUE) >= 40


@pytest.mark.parametrize("client", CLIENTS)
def test_runtime_error_in_nested_calls_has_a_backtrace(client):
    src = "(define (inner x) (car x))\n(define (outer y) (+ 1 (inner y)))\n(outer 2)"
    with pytest.raises(ndvm.EvalError) as info:
        ndvm.Evaluator(client=client).evaluate(ndvm.parse(src, "bt.scm"))
    bt = info.value.backtrace
    assert "in inner, called at bt.scm:2:24" in bt
    assert "in outer, called at bt.scm:3:1" in bt


@pytest.mark.parametrize("client", CLIENTS)
def test_deep_recursion_backtrace_is_short(client):
    src = "(define (f n) (if (= n 0) (car n) (+ 1 (f (- n 1)))))\n(f 500)"
    with pytest.raises(ndvm.EvalError) as info:
        ndvm.Evaluator(client=client).evaluate(src)
    assert len(info.value.backtrace.splitlines()) <= 8
    assert "(repeated)" in info.value.backtrace


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
def test_arithmetic_names_the_argument_that_is_not_a_number(client):
    # ((+ 1 1 1 'a) said "argument 2", (+ 'a 1) no argument at all)
    ev = ndvm.Evaluator(client=client)
    for src, k in [("(+ 1 1 1 'a)", 4), ("(+ 'a 1)", 1), ("(* 1 2 'a)", 3), ("(/ 'a)", 1),
                   ("(- 1 'a)", 2)]:
        with pytest.raises(ndvm.EvalError, match=rf"expected a number, vector or matrix "
                                                 rf"\(argument {k}\), got a symbol"):
            ev.evaluate(src)


def test_a_program_is_made_by_parse_not_by_its_class():
    # (ndvm.Program('(+ 1 2)') built an empty program; evaluating it said "object of type
    # 'NoneType' has no len()")
    with pytest.raises(TypeError, match=r"made by ndvm.parse\(source"):
        ndvm.Program("(+ 1 2)")
    import pickle
    p = ndvm.parse("(+ a 2)", name="p.scm")
    assert pickle.loads(pickle.dumps(p)).free_names == ("a",)
