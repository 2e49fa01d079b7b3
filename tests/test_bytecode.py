"""The bytecode client: disassembler, compile caching, opcode coverage, and parity with dmci
(errors with kind, message, position and backtrace; step counts; values and gradients of random
well-typed programs)."""
import random
import re

import numpy as np
import pytest

import ndvm

pytestmark = pytest.mark.skipif("bytecode" not in ndvm.clients(), reason="bytecode not built")

if "bytecode" in ndvm.clients():
    from ndvm.clients import bytecode as bc


def outcome(client, src, params=None, data=None, consts=None, grad=True, **limits):
    """(value, grads) or the error's (class, message, line, col, form, backtrace)."""
    ev = ndvm.Evaluator(client=client, **limits)
    try:
        r = ev.evaluate(ndvm.parse(src, name="t.scm"), params=params, data=data, consts=consts,
                        grad=grad)
    except ndvm.SchemeError as e:
        return ("error", type(e).__name__, e.message, e.line, e.col, e.form, e.backtrace)
    return ("ok", r.value, r.grad)


# ---- disassembler and compile caching --------------------------------------------------------

def test_disassemble_lists_opcodes_with_lines():
    src = "(define (sq x)\n  (* x x))\n(+ (sq a)\n   1)"
    text = bc.disassemble(ndvm.parse(src))
    assert "== top level" in text and "== sq" in text
    rows = [r for r in text.splitlines() if re.match(r"\d{4} ", r)]
    ops = [r.split()[2] if r.split()[1] != "|" else r.split()[2] for r in rows]
    assert {"CLOSURE", "SET", "FREE", "CALL", "PRIM", "RETURN", "LOCAL"} <= set(ops)
    prim = next(r for r in rows if "PRIM" in r and "; *" in r)
    assert prim.split()[1] == "2:3"  # (* x x) is on line 2
    call = next(r for r in rows if " CALL " in r)
    assert call.split()[1] == "3:4" and call.rstrip().endswith("; sq")
    # a source string is accepted too
    assert bc.disassemble("(+ 1 2)").count("PRIM") == 1


def test_opcode_table_documents_every_opcode():
    table = bc.opcodes()
    names = [n for n, _ in table]
    assert len(names) == len(set(names)) >= 20
    assert all(doc.strip() for _, doc in table)


def test_compile_once_per_program(monkeypatch):
    prog = ndvm.parse("(* a (sin t))")
    calls = []
    real = bc.CLIENT.compile

    def counting(p):
        calls.append(p)
        return real(p)

    monkeypatch.setattr(bc.CLIENT, "compile", counting)
    ev = ndvm.Evaluator(client="bytecode")
    for k in range(5):
        r = ev.evaluate(prog, params={"a": 2.0}, data={"t": [0.1 * k, 0.2]}, grad=True)
        assert np.allclose(r.value, 2 * np.sin([0.1 * k, 0.2]))
    assert len(calls) == 1
    compiled = prog.compiled(bc.CLIENT)
    assert compiled is prog.compiled(bc.CLIENT)
    assert compiled.program is prog and int(compiled) != 0 and compiled.n_instructions > 0


def test_tail_calls_and_loops_run_in_constant_stack():
    ev = ndvm.Evaluator(client="bytecode", max_depth=50)
    src = """(define (count n acc) (if (= n 0) acc (count (- n 1) (+ acc 1))))
             (+ (count 100000 0) (loop ((i 0)) (if (< i 100000) (recur (+ i 1)) i)))"""
    assert ev.evaluate(src).item() == 200000.0


# ---- every opcode is exercised --------------------------------------------------------------

COVERAGE_PROGRAMS = [
    "(define (f x . r) (if (null? r) x (car r))) (+ (f 1) (f 1 2))",
    "(letrec ((ev? (lambda (n) (if (= n 0) #t (od? (- n 1))))) (od? (lambda (n) (if (= n 0) #f"
    " (ev? (- n 1)))))) (if (and (ev? 4) (or (od? 3) #f)) 1 0))",
    "(+ (length '(a b c)) (loop ((i 0) (s 0)) (if (< i 3) (recur (+ i 1) (+ s i)) s)) a)",
    "(define (g x) (begin (sin 1) x)) (* 2 (let ((y (g a))) (+ y (loop ((k 0)) (if (> k 1) k"
    " (recur (+ k 1)))))))",
    "(let ((h car)) (h (list 1 2)))",
    "(+ " * 300 + "1" + " 1)" * 300,
    "(define (k) (lambda (z) z)) ((k) 3)",
]


def test_every_opcode_is_exercised():
    seen = set()
    for src in COVERAGE_PROGRAMS:
        prog = ndvm.parse(src)
        for row in bc.disassemble(prog).splitlines():
            parts = row.split()
            if parts and re.fullmatch(r"\d{4}", parts[0]):
                seen.add(parts[2])
        # each program also runs the same on both clients
        params = {"a": 1.5} if "a" in prog.free_names else None
        a, b = outcome("dmci", src, params=params), outcome("bytecode", src, params=params)
        assert a[0] == b[0] == "ok", (src, a, b)
        assert np.array_equal(a[1], b[1])
    assert seen == {name for name, _ in bc.opcodes()}, {n for n, _ in bc.opcodes()} - seen


# ---- error parity -----------------------------------------------------------------------------

X = {"x": [0.2, 0.7, 0.4, 0.9]}

BAD_PROGRAMS = [
    ("(car 1.0)", {}),
    ("(+ 1 (car (list)))", {}),
    ("(cdr '())", {}),
    ("(define (f x) (* x x))\n(f 1 2)", {}),
    ("((lambda (x y . r) x) 1)", {}),
    ("(1 2)", {}),
    ("(let ((f 5))\n  (f 1))", {}),
    ("(dot (vec 1 2) (vec 1 2 3))", {}),
    ("(+ (vec 1 2) (vec 1 2 3))", {}),
    ("(vsum (matmul (mat (vec 1 2)) (mat (vec 1 2))))", {}),
    ("(ref (vec 1 2) 5)", {}),
    ("(list-ref (list 1 2) 3)", {}),
    ("(letrec ((a b) (b 1)) a)", {}),
    ("(define (f n) (+ 1 (f n)))\n(f 1)", {"max_depth": 300}),
    ("(define (f n) (* 2 (g n)))\n(define (g n) (+ 1 (f n)))\n(f 1)", {"max_depth": 200}),
    ("(loop ((i 0)) (recur (+ i 1)))", {"max_steps": 10000}),
    ("(define (spin n) (spin n))\n(+ 1 (spin 1))", {"max_steps": 5000}),
    ("(recur 1)", {}),
    ("(loop ((i 0)) (+ 1 (recur i)))", {}),
    ("(if)", {}),
    ("(let ((x)) x)", {}),
    ("(set! y 1)", {}),
    ("(vec 1 2)", {}),
    ("(define (f x) (car x))\n(define (g y) (+ 1 (f y)))\n(g 2.0)", {}),
    ("(let ((f car)) (f 1 2))", {}),
    ("(let ((f car)) (f 1.0))", {}),
    ("(map (lambda (v) (car v)) (list 1 2))", {}),
    ("(fold-left (lambda (a b) (+ a b)) 0 (list 1 (list 2)))", {}),
    ("(if (< x 0.5) (car x) 1.0)", {"data": X}),
    ("(define (g v) (car v))\n(define (f v) (if (< v 0.5) (g v) 1.0))\n(f x)", {"data": X}),
    ("(loop ((i 0)) (if (< i 3) (recur (+ i 1)) (car i)))", {}),
    ("(loop ((i 0) (s 0))\n  (if (< i 3)\n      (recur (+ i 1) (+ s (if (< x 0.5) (ref (vec 1) i) 0)))"
     "\n      s))", {"data": X}),
    ("(sqrt (list 1))", {}),
    ("(exp 1 2)", {}),
    ("(length 5)", {}),
    ("(det (mat (vec 1 2 3)))", {}),
    ("(+ y 1)", {}),
    ("(define (f) (g))\n(define (g) (h 1))\n(define (h a b) a)\n(f)", {}),
    ("((lambda (f) (f f)) (lambda (g) (+ 1 (g g))))", {"max_depth": 100}),
    ("(let ((v (if (< x 0.5) (list 1) 2)))\n  (+ 1 v))", {"data": X}),
    ("(and (< x 0.5) (vec 1))", {"data": X}),
]


@pytest.mark.parametrize("src,kw", BAD_PROGRAMS, ids=[f"bad{i}" for i in range(len(BAD_PROGRAMS))])
def test_errors_match_dmci(src, kw):
    kw = dict(kw)
    data = kw.pop("data", None)
    a = outcome("dmci", src, data=data, **kw)
    b = outcome("bytecode", src, data=data, **kw)
    assert a[0] == "error", a
    assert a == b  # depth limits included: both clients count nested calls and branch arms


def test_there_are_enough_bad_programs():
    assert len(BAD_PROGRAMS) >= 25


# ---- step counts match dmci: the least step limit that lets a program finish ------------------

STEP_PROGRAMS = [
    ("(* A (* (exp (- 0 (* b t))) (cos (* omega t))))", {"A": 1.0, "b": 0.3, "omega": 2.0},
     {"t": [0.5, 1.5]}),
    ("(loop ((x x0) (k 0)) (if (= k 16) x (recur (* r (* x (- 1.0 x))) (+ k 1))))",
     {"r": 3.2, "x0": 0.4}, None),
    ("(define (f n) (if (< n 1) 0 (+ (f (- n 1)) (f (- n 2)))))\n(+ a (f 6))", {"a": 1.0}, None),
    ("(fold-left + 0 (map (lambda (v) (* v a)) (iota 5)))", {"a": 2.0}, None),
    ("(let ((v (if (< t 1) (list a) a))) (if (pair? v) (car v) (begin v (* 2 v))))", {"a": 2.0},
     {"t": [0.5, 1.5]}),
    ("(if (and (< t 1) (> a 0)) (if (or (> t 0.7) (< a 0)) (* a t) t) (let* ((u (sin t)) (w (* u a))) w))",
     {"a": 2.0}, {"t": [0.5, 0.9, 1.5]}),
]


def least_steps(client, src, params, data):
    lo, hi = 1, 1
    while outcome(client, src, params, data, max_steps=hi)[0] != "ok":
        assert hi < 1 << 20, outcome(client, src, params, data)
        lo, hi = hi, hi * 2
    while lo < hi:  # invariant: hi succeeds, lo - 1 fails
        mid = (lo + hi) // 2
        if outcome(client, src, params, data, max_steps=mid)[0] == "ok":
            hi = mid
        else:
            lo = mid + 1
    return hi


@pytest.mark.parametrize("src,params,data", STEP_PROGRAMS)
def test_step_counts_match_dmci(src, params, data):
    assert least_steps("bytecode", src, params, data) == least_steps("dmci", src, params, data)


# ---- differential test: random well-typed programs ---------------------------------------------

class Gen:
    """Random numeric programs over parameters p0, p1 and data input x (fixed seed)."""

    def __init__(self, seed):
        self.r = random.Random(seed)
        self.n = 0

    def fresh(self):
        self.n += 1
        return f"v{self.n}"

    def num(self):
        return repr(round(self.r.uniform(-2, 2), 3))

    def atom(self, env):
        pool = ["p0", "p1", "x", "x", self.num()] + env
        return self.r.choice(pool)

    def cmp(self, env, d):
        op = self.r.choice(["<", ">", "<=", ">="])
        return f"({op} {self.expr(env, d - 1)} {self.atom(env)})"

    def expr(self, env, d):
        r = self.r
        if d <= 0:
            return self.atom(env)
        k = r.randrange(20)
        e = lambda: self.expr(env, d - 1)  # noqa: E731
        if k == 0:
            return f"({r.choice(['+', '-', '*'])} {e()} {e()})"
        if k == 1:
            return f"(/ {e()} (+ 1.5 (square {e()})))"
        if k == 2:
            f = r.choice(["sin", "cos", "tanh", "atan"])
            return f"({f} {e()})"
        if k == 3:
            return r.choice([f"(exp (tanh {e()}))", f"(log (+ 1.1 (square {e()})))",
                             f"(sqrt (+ 0.5 (square {e()})))",
                             f"(modulo {e()} (+ 0.4 (abs {e()})))",
                             f"(modulo {e()} (- -0.4 (abs {e()})))",
                             f"(remainder {e()} (- -0.4 (abs {e()})))",
                             f"(min {e()} {e()})", f"(max {e()} (abs {e()}))"])
        if k == 4:
            return f"(if {self.cmp(env, d)} {e()} {e()})"
        if k == 5:
            v = self.fresh()
            return f"(let (({v} {e()})) {self.expr(env + [v], d - 1)})"
        if k == 6:
            v, w = self.fresh(), self.fresh()
            return (f"(let* (({v} {e()}) ({w} (* {v} {e()}))) "
                    f"{self.expr(env + [v, w], d - 1)})")
        if k == 7:
            i, acc = self.fresh(), self.fresh()
            n = r.randrange(1, 5)
            body = self.expr(env + [i, acc], d - 1)
            return (f"(loop (({i} 0) ({acc} {e()})) (if (>= {i} {n}) {acc} "
                    f"(recur (+ {i} 1) (+ (* 0.5 {acc}) (* 0.3 {body})))))")
        if k == 8:
            y = self.fresh()
            return f"((lambda ({y}) {self.expr(env + [y], d - 1)}) {e()})"
        if k == 9:
            f, y = self.fresh(), self.fresh()
            return (f"(let (({f} (lambda ({y}) {self.expr(env + [y], d - 1)}))) "
                    f"(+ ({f} {e()}) ({f} {e()})))")
        if k == 10:
            y = self.fresh()
            return (f"(fold-left + 0 (map (lambda ({y}) {self.expr(env + [y], d - 1)}) "
                    f"(list {e()} {e()} {e()})))")
        if k == 11:
            a, b = self.fresh(), self.fresh()
            return (f"(fold-left (lambda ({a} {b}) (+ (* 0.7 {a}) {b})) {e()} "
                    f"(list {e()} {e()}))")
        if k == 12:
            return r.choice([f"(dot (vec {e()} {e()}) (vec {e()} {e()}))",
                             f"(vsum (scale {e()} (vec {e()} {e()} {e()})))",
                             f"(ref (+ (vec {e()} {e()}) {e()}) 1)",
                             f"(norm (vec {e()} {e()} 1))",
                             f"(trace (matmul (mat (vec {e()} 1) (vec 0.5 {e()})) "
                             f"(mat (vec 1 {e()}) (vec {e()} 2))))"])
        if k == 13:
            return f"(if (and {self.cmp(env, d)} {self.cmp(env, d)}) {e()} {e()})"
        if k == 14:
            lp, kk, a = self.fresh(), self.fresh(), self.fresh()
            body = self.expr(env + [a], d - 1)
            return (f"(let {lp} (({kk} 0) ({a} {e()})) (if (>= {kk} 2) {a} "
                    f"({lp} (+ {kk} 1) (* 0.5 {body}))))")
        if k == 15:
            # structurally different arms: lanes are partitioned and re-run
            v = self.fresh()
            return (f"(let (({v} (if {self.cmp(env, d)} (list {e()}) {e()}))) "
                    f"(if (pair? {v}) (car {v}) (* 2 {v})))")
        if k == 16:
            return f"(car (if {self.cmp(env, d)} (list {e()} 1) (list {e()} 2)))"
        i, acc = self.fresh(), self.fresh()
        env2 = env + [i, acc]
        if k == 17:
            # a mixed branch in the loop's tail whose arms both recur
            return (f"(loop (({i} 0) ({acc} {e()})) (if (>= {i} 3) {acc} "
                    f"(if {self.cmp(env2, d)} (recur (+ {i} 1) (+ {acc} {self.expr(env2, d - 1)}))"
                    f" (recur (+ {i} 1) (* 0.5 {acc})))))")
        if k == 18:
            # lanes leave the loop on different iterations
            return (f"(loop (({i} 0) ({acc} {e()})) (if (or (> {acc} 2) (>= {i} 5)) {acc} "
                    f"(recur (+ {i} 1) (+ {acc} 0.5 (abs {self.expr(env2, d - 1)})))))")
        # mixed tail calls in a recursive procedure
        h, y, n = self.fresh(), self.fresh(), self.fresh()
        return (f"(letrec (({h} (lambda ({y} {n}) (cond ((< {n} 1) {y}) ((> {y} {self.atom(env)}) "
                f"({h} (- {y} 0.3) (- {n} 1))) (else ({h} (+ {y} 0.2) (- {n} 1))))))) "
                f"({h} {e()} 3))")

    def program(self):
        if self.r.random() < 0.3:
            y = self.fresh()
            g = f"(define (g {y}) {self.expr([y], 2)})\n"
            return g + f"(+ (g {self.expr([], 2)}) {self.expr([], 3)})"
        return self.expr([], self.r.randrange(2, 5))


def close(a, b, rtol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.allclose(a, b, rtol=rtol, atol=rtol * 1e-3, equal_nan=True)


@pytest.mark.parametrize("seed", range(6))
def test_random_programs_agree_with_dmci(seed):
    gen = Gen(1000 + seed)
    rng = np.random.default_rng(seed)
    n_ok = 0
    for _ in range(50):
        src = gen.program()
        params = {"p0": rng.uniform(-1, 1, 3), "p1": rng.uniform(-1, 1, 3)}
        data = {"x": rng.uniform(-1.5, 1.5, 4)}
        a = outcome("dmci", src, params, data)
        b = outcome("bytecode", src, params, data)
        assert a[0] == b[0], (src, a, b)
        if a[0] == "error":
            assert a == b, src
            continue
        n_ok += 1
        assert close(a[1], b[1], 1e-12), src
        for name in params:
            assert close(a[2][name], b[2][name], 1e-10), (src, name)
    assert n_ok >= 45
