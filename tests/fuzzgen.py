"""Random programs and inputs for the fuzzer (tests/test_fuzz.py, tests/fuzz_long.py).

A `Gen` draws from any `random.Random` (hypothesis' `st.randoms()` or a seeded one): typed
expressions that are well-formed and well-typed ("valid"), the same with ill-typed mutations
("bad"), token-level mutations of valid text ("mutated") and pathological programs ("stress").
`check_case` runs one case under every client and returns the outcome, or raises AssertionError.
"""
import math
from dataclasses import dataclass, field

import numpy as np

import ndvm

KINDS = ("ReadError", "FormError", "UnboundError", "EvalError", "LimitError")

UNARY = ["abs", "sqrt", "exp", "log", "sin", "cos", "tan", "tanh", "atan", "square", "floor",
         "ceiling", "round", "truncate", "-"]
BINARY = ["+", "-", "*", "/", "min", "max", "pow", "expt", "modulo", "remainder", "atan"]
SAFE_UNARY = ["sin", "cos", "tanh", "atan", "abs", "square"]
CMP = ["=", "<", ">", "<=", ">="]
ANY_PRED = ["number?", "boolean?", "symbol?", "procedure?", "null?", "pair?", "vector?", "matrix?"]
NUM_PRED = ["zero?", "positive?", "negative?"]
PRIMS = UNARY + BINARY + CMP + ANY_PRED + NUM_PRED + [
    "cons", "car", "cdr", "cadr", "cddr", "caar", "caddr", "list", "length", "list-ref", "append",
    "reverse", "not", "eq?", "eqv?", "equal?", "vec", "mat", "ref", "dot", "cross", "norm",
    "normalize", "vsum", "vlen", "scale", "matvec", "matmul", "transpose", "trace", "outer", "det",
    "logdet", "inv", "solve", "eye", "zeros", "ones", "map", "filter", "fold-left", "fold-right",
    "reduce", "iota", "list-tail", "any", "every"]
FORMS = ["quote", "if", "cond", "case", "and", "or", "when", "unless", "begin", "let", "let*",
         "letrec", "letrec*", "lambda", "define", "loop", "recur", "else", "set!"]
HUGE = ["1e308", "-1e308", "1e400", "-1e400", "1e-400", "4.9e-324",
        "123456789012345678901234567890",
        "(/ 1 0)", "(/ -1 0)", "(/ 0 0)", "(sqrt -1)", "(log 0)", "(exp 1000)", "-0.0",
        "9007199254740993", "1e15", "0.1"]
WRONG = ["'sym", "#t", "#f", "'()", "(list 1 2)", "(cons 1 2)", "(vec 1 2)", "(vec)",
         "(mat [1 2] [3 4])", "car", "+", "(lambda (q) q)", "(zeros 2 3)", "(eye 3)", "'(1 . 2)",
         "(quote (a b))", "(if (< x 0.5) (list 1) 2)", "(if (< x 0.5) #t 1)"]
MALFORMED = ["(if)", "(if 1 2 3 4)", "(let ((q)) q)", "(let (q 1) q)", "(let q)", "(let 1 2)",
             "(lambda)", "(lambda (q q) q)", "(lambda (1) 1)", "(define)", "(define q)",
             "(+ 1 (define q 2))", "(recur 1)", "(loop)", "(loop ((i)) i)", "(loop (i 0) i)",
             "(loop ((i 0)) (+ 1 (recur i)))", "(set! q 1)", "(quote)", "(quote 1 2)", "(cond)",
             "(cond (else 1) (#t 2))", "(cond (1 => car))", "(case)", "(case 1 (2 3))", "(begin)",
             "(when)", "(unless)", "()", "(1 . 2)", "(let* q)", "(letrec ((f)) 1)",
             "(let ((1 2)) 3)",
             "(lambda x)", "(define (f) )", "(else 1)", "(let loop)", "((lambda (q . r) q))",
             "(let ((q 1) (q 2)) q)", "(case 1 ((1) 2) (else 3) (4 5))"]


def fmt(x):
    """A Scheme literal for a Python float (reals the reader reads back exactly)."""
    if math.isnan(x):
        return "(/ 0 0)"
    if math.isinf(x):
        return "(/ 1 0)" if x > 0 else "(/ -1 0)"
    return repr(float(x))


@dataclass
class Case:
    """One fuzz case: a program, its inputs and the evaluator settings (same for all clients)."""

    category: str
    src: str
    params: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    consts: dict = field(default_factory=dict)
    grad: bool = True
    dtype: str = "float64"
    compat: object = None
    limits: dict = field(default_factory=dict)

    def __repr__(self):
        def short(d):
            return {k: (np.asarray(v).tolist() if np.size(v) <= 8 else f"<{np.shape(v)}>")
                    for k, v in d.items()}
        src = self.src if len(self.src) <= 2000 else self.src[:1000] + " ... " + self.src[-500:]
        return (f"Case({self.category!r}, src={src!r}, params={short(self.params)}, "
                f"data={short(self.data)}, consts={short(self.consts)}, grad={self.grad}, "
                f"dtype={self.dtype!r}, compat={self.compat!r}, limits={self.limits})")


class Gen:
    """Draws programs and inputs from `r` (any random.Random). `big` allows the slow extremes."""

    def __init__(self, r, big=False):
        self.r = r
        self.big = big
        self.n = 0
        self.bad = 0.0  # chance that a node is replaced by an ill-typed or malformed one

    # ---- small helpers ----------------------------------------------------------------------
    def fresh(self, stem="v"):
        self.n += 1
        return f"{stem}{self.n}"

    def chance(self, p):
        return self.r.random() < p

    def lit(self):
        r = self.r
        k = r.randrange(10)
        if k == 0:
            return str(r.randrange(-3, 4))
        if k == 1:
            return r.choice(["0", "1", "2", ".5", "-2.5", "1e-3", "3."])
        return fmt(round(r.uniform(-2, 2), 3))

    def maybe_bad(self, env, d, good):
        """`good()`, or (with probability self.bad) an ill-typed or malformed replacement."""
        if self.bad and self.chance(self.bad):
            r = self.r
            k = r.randrange(8)
            if k == 0:
                return r.choice(WRONG)
            if k == 1:
                return r.choice(HUGE)
            if k == 2:
                return r.choice(MALFORMED)
            if k == 3:
                return r.choice(["undefined_name", "zz", "apply", "vector-ref", "set-car!"])
            if k == 4:  # a primitive with a random number of random arguments
                f = r.choice(PRIMS)
                args = " ".join(self.any_expr(env, d - 1) for _ in range(r.randrange(0, 5)))
                return f"({f} {args})".replace(" )", ")")
            if k == 5:
                return self.shape_mismatch()
            if k == 6:
                return self.empty_ops()
            return self.any_expr(env, d - 1)  # a value of a random (probably wrong) type
        return good()

    def shape_mismatch(self):
        r = self.r
        n, m = r.randrange(0, 5), r.randrange(0, 5)
        v = f"(vec {' '.join(self.lit() for _ in range(n))})".replace(" )", ")")
        w = f"(vec {' '.join(self.lit() for _ in range(m))})".replace(" )", ")")
        a, b, c = r.randrange(0, 4), r.randrange(0, 4), r.randrange(0, 4)
        return r.choice([
            f"(vsum (+ {v} {w}))", f"(dot {v} {w})",
            f"(vsum (matmul (zeros {a} {b}) (ones {c} {a})))",
            f"(vsum (matvec (ones {a} {b}) {v}))", f"(ref {v} {m})", f"(ref (eye {a}) {b} {c})",
            f"(vsum (solve (ones {a} {b}) {v}))", f"(det (zeros {a} {b}))",
            f"(vsum (inv (ones {a} {a})))",
            f"(vsum (cross {v} {w}))", f"(trace (outer {v} {w}))", f"(vsum (mat {v} {w}))",
            f"(vsum (* (zeros {a} {b}) (ones {b} {a})))", f"(ref {v} -1)", f"(ref {v} 0.5)",
            f"(ref {v} 1e300)", f"(logdet (eye {a}))", f"(vsum (transpose (zeros {a} {b})))",
            f"(vlen (normalize {v}))", f"(norm {v})", f"(vsum (scale {v} {w}))",
            f"(ref (ref (mat {v}) 0) {n})"])

    def empty_ops(self):
        return self.r.choice([
            "(car '())", "(cdr '())", "(length '())", "(fold-left + 0 '())", "(list-ref '() 0)",
            "(vsum (vec))", "(reduce + 0 '())", "(fold-right + 0 '())", "(length (map car '()))",
            "(vsum (zeros 0))", "(det (eye 0))", "(trace (zeros 0 0))", "(car (reverse '()))",
            "(length (append))", "(length (append '() '()))", "(min)", "(+)", "(*)", "(-)",
            "(length (iota 0))", "(length (filter car '()))", "(cadr '())", "(list-tail '() 1)"])

    # ---- typed expressions ------------------------------------------------------------------
    def vars_of(self, env, ty):
        return [n for n, t in env if t == ty]

    def num(self, env, d):
        return self.maybe_bad(env, d, lambda: self._num(env, d))

    def _num(self, env, d):
        r = self.r
        if d <= 0 or self.chance(0.25):
            pool = [self.lit(), "a", "b", "x", "x"] + self.vars_of(env, "num") * 2
            return r.choice(pool)
        k = r.randrange(30)
        e = lambda: self.num(env, d - 1)  # noqa: E731
        if k >= 24:
            return self.rare(env, d)
        if k < 3:
            return f"({r.choice(['+', '-', '*'])} {e()} {e()})"
        if k == 3:
            return f"({r.choice(['+', '*', '-', 'min', 'max'])} {e()} {e()} {e()})"
        if k == 4:
            return f"(/ {e()} (+ 1.5 (square {e()})))"
        if k == 5:
            return f"({r.choice(SAFE_UNARY)} {e()})"
        if k == 6:
            return r.choice([f"(exp (tanh {e()}))", f"(log (+ 1.1 (square {e()})))",
                             f"(sqrt (+ 0.5 (square {e()})))", f"(atan {e()} (+ 2 (abs {e()})))",
                             f"(pow (+ 1 (abs {e()})) {r.choice(['2', '0.5', '-1', '3'])})",
                             f"(floor {e()})", f"(modulo {e()} 0.7)", f"(remainder {e()} -1.3)",
                             # divisors that depend on parameters, of either sign
                             f"(modulo {e()} (+ 0.5 (abs {e()})))",
                             f"(modulo {e()} (- -0.5 (abs {e()})))",
                             f"(remainder {e()} (+ 0.5 (abs {e()})))",
                             f"(remainder {e()} (- -0.5 (abs {e()})))",
                             f"(expt (+ 1.2 (tanh {e()})) {e()})", f"(tan (* 0.5 (tanh {e()})))",
                             f"({r.choice(['ceiling', 'round', 'truncate'])} {e()})"])
        if k == 7:
            return f"(if {self.boolean(env, d - 1)} {e()} {e()})"
        if k == 8:
            v = self.fresh()
            return f"(let (({v} {e()})) {self.num(env + [(v, 'num')], d - 1)})"
        if k == 9:
            v, w = self.fresh(), self.fresh()
            return (f"(let* (({v} {e()}) ({w} (* {v} {e()}))) "
                    f"{self.num(env + [(v, 'num'), (w, 'num')], d - 1)})")
        if k == 10:
            i, acc = self.fresh("i"), self.fresh()
            n = r.randrange(0, 6)
            body = self.num(env + [(i, "num"), (acc, "num")], d - 1)
            return (f"(loop (({i} 0) ({acc} {e()})) (if (>= {i} {n}) {acc} "
                    f"(recur (+ {i} 1) (+ (* 0.5 {acc}) (* 0.3 {body})))))")
        if k == 11:
            y = self.fresh()
            return f"((lambda ({y}) {self.num(env + [(y, 'num')], d - 1)}) {e()})"
        if k == 12:
            return f"(vsum {self.vec(env, d - 1, r.randrange(1, 4))})"
        if k == 13:
            n = r.randrange(1, 4)
            return r.choice([f"(dot {self.vec(env, d - 1, n)} {self.vec(env, d - 1, n)})",
                             f"(ref {self.vec(env, d - 1, n)} {r.randrange(n)})",
                             f"(norm {self.vec(env, d - 1, n)})"])
        if k == 14:
            n = r.randrange(1, 3)
            return r.choice([f"(trace {self.mat(env, d - 1, n, n)})",
                             f"(det {self.mat(env, d - 1, n, n)})",
                             f"(det (+ (eye {n}) (scale 0.1 {self.mat(env, d - 1, n, n)})))",
                             f"(ref {self.mat(env, d - 1, n, n)} {r.randrange(n)} "
                             f"{r.randrange(n)})",
                             f"(vsum (solve (+ (eye {n}) (scale 0.1 {self.mat(env, d - 1, n, n)})) "
                             f"{self.vec(env, d - 1, n)}))"])
        if k == 15:
            return r.choice([f"(car {self.lst(env, d - 1)})", f"(length {self.lst(env, d - 1)})",
                             f"(fold-left + 0 {self.lst(env, d - 1)})",
                             f"(fold-right (lambda (p q) (+ (* 0.5 p) q)) {e()} "
                             f"{self.lst(env, d - 1)})"])
        if k == 16:
            y = self.fresh()
            return (f"(fold-left + 0 (map (lambda ({y}) {self.num(env + [(y, 'num')], d - 1)}) "
                    f"{self.lst(env, d - 1)}))")
        if k == 17:  # structurally different arms on a data-dependent test: lanes partition
            v = self.fresh()
            return (f"(let (({v} (if {self.cmp(env, d - 1)} (list {e()}) {e()}))) "
                    f"(if (pair? {v}) (car {v}) (* 2 {v})))")
        if k == 18:  # lanes leave the loop on different iterations
            i, acc = self.fresh("i"), self.fresh()
            body = self.num(env + [(i, "num"), (acc, "num")], d - 1)
            return (f"(loop (({i} 0) ({acc} {e()})) (if (or (> {acc} 2) (>= {i} 5)) {acc} "
                    f"(recur (+ {i} 1) (+ {acc} 0.5 (abs {body})))))")
        if k == 19:
            return (f"(cond ({self.boolean(env, d - 1)} {e()}) ({self.boolean(env, d - 1)} {e()}) "
                    f"(else {e()}))")
        if k == 20:
            return (f"(case {r.randrange(3)} ((0) {e()}) ((1 2) {e()}) (else {e()}))")
        if k == 21:
            h, y, n = self.fresh("h"), self.fresh(), self.fresh("n")
            env2 = env + [(y, "num"), (n, "num")]
            return (f"(letrec (({h} (lambda ({y} {n}) (if (< {n} 1) {y} "
                    f"({h} (+ (* 0.5 {y}) {self.num(env2, d - 2)}) (- {n} 1)))))) ({h} {e()} 3))")
        if k == 22:
            lp, kk, acc = self.fresh("lp"), self.fresh("k"), self.fresh()
            body = self.num(env + [(acc, "num")], d - 1)
            return (f"(let {lp} (({kk} 0) ({acc} {e()})) (if (>= {kk} 2) {acc} "
                    f"({lp} (+ {kk} 1) (* 0.5 {body}))))")
        return f"(if (and {self.cmp(env, d - 1)} (not {self.cmp(env, d - 1)})) {e()} {e()})"

    def rare(self, env, d):
        """The primitives and forms the templates above do not reach (so every one is run
        against the oracles), each in a well-typed numeric context."""
        r = self.r
        e = lambda: self.num(env, d - 1)  # noqa: E731
        v3 = lambda: self.vec(env, d - 1, 3)  # noqa: E731
        n = r.randrange(1, 4)
        spd = (f"(+ (scale 2 (eye {n})) (scale 0.1 (matmul {self.mat(env, d - 1, n, n)} "
               f"(transpose {self.mat(env, d - 1, n, n)}))))")
        return r.choice([
            f"(vsum (cross {v3()} {v3()}))", f"(ref (normalize (vec {e()} 1 {e()})) 1)",
            f"(+ (vlen {v3()}) {e()})", f"(trace (outer {self.vec(env, d - 1, n)} "
                                        f"{self.vec(env, d - 1, n)}))",
            f"(logdet {spd})", f"(vsum (inv {spd}))", f"(vsum (+ (zeros {n}) {e()}))",
            f"(vsum (scale {e()} (ones 2 {n})))",
            f"(cadr (list {e()} {e()}))", f"(caddr (list {e()} {e()} {e()}))",
            f"(caar (list (list {e()})))", f"(car (cdr (list {e()} {e()})))",
            f"(car (cddr (list {e()} {e()} {e()})))", f"(list-ref {self.lst(env, d - 1)} 0)",
            f"(car (list-tail (list {e()} {e()}) 1))", f"(reduce + 0 {self.lst(env, d - 1)})",
            f"(if (any (lambda (q) (> q 0)) {self.lst(env, d - 1)}) {e()} {e()})",
            f"(if (every (lambda (q) (> q 0)) {self.lst(env, d - 1)}) {e()} {e()})",
            f"(if (eq? 'p 'p) {e()} 0)", f"(if (eqv? {e()} {e()}) {e()} {e()})",
            f"(if (equal? (list 1 {e()}) (list 1 {e()})) {e()} {e()})",
            f"(if (and (number? {e()}) (symbol? 'p) (procedure? car)) {e()} 0)",
            f"(if (or (vector? {v3()}) (matrix? 1)) {e()} 0)",
            f"(+ (length '(1 2 3)) (car (quote ({r.randrange(5)}))) {e()})",
            f"(+ (if (when (> {e()} 0) #t) 1 2) {e()})",
            f"(+ (if (unless (> {e()} 0) #t) 1 2) {e()})",
            f"(begin {e()} {e()})", f"(round {e()})", f"(ceiling {e()})", f"(truncate {e()})",
            f"(tan (* 0.5 (tanh {e()})))", f"(if (boolean? {self.boolean(env, d - 1)}) {e()} 0)",
            f"(if (null? (cdr (list {e()}))) {e()} 0)",
            f"(letrec* ((p {e()}) (q (* 2 p))) (+ p q))",
            f"((lambda () (define p {e()}) (define (q z) (* z p)) (q {e()})))",
        ])

    def cmp(self, env, d):
        return f"({self.r.choice(CMP)} {self.num(env, d)} {self.num(env, d)})"

    def boolean(self, env, d):
        return self.maybe_bad(env, d, lambda: self._boolean(env, d))

    def _boolean(self, env, d):
        r = self.r
        k = r.randrange(8)
        if d <= 0 or k == 0:
            return r.choice(["#t", "#f"] + self.vars_of(env, "bool"))
        if k < 4:
            return self.cmp(env, d)
        if k == 4:
            op = r.choice(["and", "or"])
            return f"({op} {self.boolean(env, d - 1)} {self.boolean(env, d - 1)})"
        if k == 5:
            return f"(not {self.boolean(env, d - 1)})"
        if k == 6:
            return f"({r.choice(NUM_PRED)} {self.num(env, d - 1)})"
        return f"({r.choice(ANY_PRED)} {self.any_expr(env, d - 1)})"

    def lst(self, env, d):
        return self.maybe_bad(env, d, lambda: self._lst(env, d))

    def _lst(self, env, d):
        r = self.r
        k = r.randrange(7)
        e = lambda: self.num(env, d - 1)  # noqa: E731
        if d <= 0 or k == 0:
            return f"(list {' '.join(e() for _ in range(r.randrange(1, 4)))})"
        if k == 1:
            return f"(cons {e()} {self.lst(env, d - 1)})"
        if k == 2:
            return f"(reverse {self.lst(env, d - 1)})"
        if k == 3:
            return f"(append {self.lst(env, d - 1)} {self.lst(env, d - 1)})"
        if k == 4:
            y = self.fresh()
            body = self.num(env + [(y, "num")], d - 1)
            return f"(map (lambda ({y}) {body}) {self.lst(env, d - 1)})"
        if k == 5:
            return f"(cons {e()} (filter (lambda (q) (> q 0)) {self.lst(env, d - 1)}))"
        return f"(iota {r.randrange(1, 5)})"

    def vec(self, env, d, n):
        return self.maybe_bad(env, d, lambda: self._vec(env, d, n))

    def _vec(self, env, d, n):
        r = self.r
        k = r.randrange(6)
        e = lambda: self.num(env, d - 1)  # noqa: E731
        if d <= 0 or k == 0 or n == 0:
            return f"(vec {' '.join(e() for _ in range(n))})".replace(" )", ")")
        if k == 1:
            return f"(+ {self.vec(env, d - 1, n)} {r.choice([e(), self.vec(env, d - 1, n)])})"
        if k == 2:
            return f"(scale {e()} {self.vec(env, d - 1, n)})"
        if k == 3:
            return f"(matvec {self.mat(env, d - 1, n, n)} {self.vec(env, d - 1, n)})"
        if k == 4:
            return f"({r.choice(['sin', 'cos', 'tanh'])} {self.vec(env, d - 1, n)})"
        return f"(ref {self.mat(env, d - 1, 2, n)} {r.randrange(2)})"

    def mat(self, env, d, rows, cols):
        return self.maybe_bad(env, d, lambda: self._mat(env, d, rows, cols))

    def _mat(self, env, d, rows, cols):
        r = self.r
        k = r.randrange(5)
        if d <= 0 or k == 0:
            return "(mat " + " ".join(self._vec(env, 0, cols) for _ in range(rows)) + ")"
        if k == 1 and rows == cols:
            k = self.num(env, d - 1)
            return f"(+ (eye {rows}) (scale {k} {self.mat(env, d - 1, rows, cols)}))"
        if k == 2:
            return f"(transpose {self.mat(env, d - 1, cols, rows)})"
        if k == 3:
            inner = r.randrange(1, 3)
            left = self.mat(env, d - 1, rows, inner)
            return f"(matmul {left} {self.mat(env, d - 1, inner, cols)})"
        return f"(* {self.mat(env, d - 1, rows, cols)} {self.num(env, d - 1)})"

    def any_expr(self, env, d):
        r = self.r
        k = r.randrange(6)
        if k == 0:
            return self.boolean(env, d)
        if k == 1:
            return self.lst(env, d)
        if k == 2:
            return self.vec(env, d, r.randrange(0, 4))
        if k == 3:
            return self.mat(env, d, r.randrange(1, 3), r.randrange(1, 3))
        if k == 4:
            return r.choice(WRONG)
        return self.num(env, d)

    def program(self, depth):
        """Zero to two procedure definitions, then a numeric expression."""
        r = self.r
        defs, env = [], []
        for _ in range(r.choice([0, 0, 1, 2])):
            f, y = self.fresh("f"), self.fresh()
            defs.append(f"(define ({f} {y})\n  {self.num(env + [(y, 'num')], 2)})")
            env.append((f, "fn"))
        body = self.num(env, depth)
        for f, _ in env:
            if self.chance(0.7):
                body = f"(+ ({f} {self.num([], 1)}) {body})"
        return "\n".join(defs + [body])

    # ---- whole cases ------------------------------------------------------------------------
    def valid(self):
        self.bad = 0.0
        return self.program(self.r.randrange(1, 5))

    def ill_typed(self):
        self.bad = self.r.choice([0.05, 0.15, 0.3])
        src = self.program(self.r.randrange(1, 4))
        self.bad = 0.0
        return src

    def mutated(self):
        """A valid program with random token edits (what a mutating search proposes)."""
        r = self.r
        toks = tokenize(self.valid())
        vocab = ["(", ")", "[", "]", "'", ".", "#t", "#f", "x", "a", "q", "1", "-1e999", "'()",
                 "lambda", "let", "if", "define", "loop", "recur", "car", "vec", "#", "\"", ";",
                 "#|", "|#", "\n", "\u00e9", "\x00", "1e", "-", "..."] + PRIMS[:10] + FORMS
        for _ in range(r.randrange(1, 5)):
            if not toks:
                toks = [r.choice(vocab)]
            i = r.randrange(len(toks))
            k = r.randrange(5)
            if k == 0:
                del toks[i]
            elif k == 1:
                toks.insert(i, toks[r.randrange(len(toks))])
            elif k == 2:
                j = r.randrange(len(toks))
                toks[i], toks[j] = toks[j], toks[i]
            elif k == 3:
                toks[i] = r.choice(vocab)
            else:
                toks.insert(i, r.choice(vocab))
        return " ".join(toks)

    def stress(self):
        """Pathological programs: deep nesting, long loops, runaway recursion, huge data."""
        r = self.r
        deep = r.choice([10, 1000, 5000, 20000] + ([100000] if self.big else []))
        steps = r.choice([1000, 100000] + ([1000000] if self.big else [300000]))
        k = r.randrange(22)
        if k == 0:
            return "(+ 1 " * deep + "x" + ")" * deep
        if k == 1:
            return "(" * deep + ")" * deep
        if k == 2:
            return "(car '" + "(" * deep + ")" * deep + ")"
        if k == 3:
            return "(let ((q 1)) " * deep + "q" + ")" * deep
        if k == 4:
            return "(if (< x 0.5) " * deep + "a" + " b)" * deep
        if k == 5:
            return "(vsum (vec " * deep + "1" + "))" * deep
        if k == 6:
            return "((lambda (q) " * deep + "q" + ") 1)" * deep
        if k == 7:
            return f"(loop ((i 0) (s 0)) (if (< i {steps}) (recur (+ i 1) (+ s (* a 1e-6))) s))"
        if k == 8:
            n = r.choice([100, 9000, 10**6])
            return f"(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f {n})"
        if k == 9:
            return r.choice(["(define (f n) (+ 1 (f n))) (f 1)", "(define (f) (f)) (f)",
                             "((lambda (f) (f f)) (lambda (g) (+ 1 (g g))))",
                             "((lambda (f) (f f)) (lambda (g) (g g)))",
                             "(define (f n) (* 2 (g n))) (define (g n) (+ 1 (f n))) (f a)",
                             "(loop ((i 0)) (recur (+ i 1)))",
                             "(define (f n) (vec (f n))) (vsum (f 1))",
                             "(define (f l) (f (cons 1 l))) (f '())",
                             "(let lp ((i 0)) (+ 1 (lp (+ i 1))))"])
        if k == 10:
            return r.choice(["(vsum (zeros 65535))", "(vsum (ones 65535 65535))",
                             "(vsum (outer (ones 60000) (ones 60000)))", "(det (eye 65535))",
                             "(length (iota 200000))", "(vsum (ones 1 16777215))",
                             "(vlen (transpose (zeros 1 70000)))", "(trace (eye 300))",
                             "(det (ones 200 200))", "(vsum (inv (eye 150)))",
                             "(vsum (scale x (ones 3000)))", "(vsum (+ (ones 200 200) x))",
                             "(length (append (iota 50000) (iota 50000)))",
                             "(loop ((i 0) (acc '())) (recur (+ i 1) (cons x acc)))"])
        if k == 11:
            return f"(+ {' '.join(['x'] * r.choice([100, 10000, 60000]))})"
        if k == 12:
            return f"(vsum (vec {' '.join(['a'] * r.choice([100, 10000, 70000]))}))"
        if k == 13:
            n = r.choice([10, 500, 3000])
            return "(let* (" + " ".join(f"(v{i} (+ v{i - 1} x))" if i else "(v0 x)"
                                        for i in range(n)) + f") v{n - 1})"
        if k == 14:
            return r.choice(HUGE)
        if k == 15:
            return f"(+ {' '.join(r.choice(HUGE) for _ in range(6))})"
        if k == 16:  # divergence at every lane boundary, inside a loop
            return ("(loop ((i 0) (acc 0)) (if (> i 6) (if (pair? acc) (car acc) acc) "
                    "(recur (+ i 1) (if (< x (* i 0.15)) (list (+ i a)) (* x i)))))")
        if k == 17:
            return "(begin " * min(deep, 5000) + "x" + ")" * min(deep, 5000)
        if k == 18:
            return ("(define (f q) (if (< q x) (list q) q)) "
                    "(let ((v (f a))) (if (pair? v) (car v) v))")
        if k == 19:
            clauses = " ".join(f"((< x {i / deep}) {i})" for i in range(min(deep, 5000)))
            return f"(cond {clauses} (else -1))"
        if k == 20:
            return ";" * deep + "\n" + "#|" * 3 + "x" + "|#" * 3 + " " * deep + "x"
        return "'" * deep + "x"

    def inputs(self):
        """(params, data, consts): a, b are parameters, x and t data, M and v constants."""
        r = self.r
        S, N = r.choice([(1, 1), (1, 4), (3, 1), (2, 5), (4, 7), (1, 16)] +
                        [(3, 1000)] * (2 if self.big else 1))

        def val():
            k = r.randrange(12)
            if k == 0:
                return r.choice([0.0, -0.0, math.nan, math.inf, -math.inf, 1e308, -1e308,
                                 5e-324, 1e-310, 2.0 ** 53, -1.0])
            return round(r.uniform(-2, 2), 4)

        def arr(n):
            if n == 1 and self.chance(0.5):
                return val()
            return np.array([val() for _ in range(n)])
        params = {"a": arr(S), "b": arr(S)}
        data = {"x": arr(N), "t": arr(N)}
        consts = {}
        if self.chance(0.3):
            consts = {"M": np.array([[val() for _ in range(2)] for _ in range(2)]),
                      "v": np.array([val() for _ in range(r.randrange(1, 4))])}
        return params, data, consts

    def case(self):
        r = self.r
        k = r.randrange(10)
        if k < 3:
            cat, src = "valid", self.valid()
        elif k < 6:
            cat, src = "bad", self.ill_typed()
        elif k < 8:
            cat, src = "mutated", self.mutated()
        else:
            cat, src = "stress", self.stress()
        params, data, consts = self.inputs()
        if cat != "valid" and self.chance(0.1):  # leave an input unbound
            (params if self.chance(0.5) else data).pop(r.choice(["a", "x"]), None)
        limits = {"max_steps": r.choice([200_000, 2_000_000] + [10_000_000] * self.big)}
        if self.chance(0.2):
            limits["max_depth"] = r.choice([50, 1000, 100000])
        if self.chance(0.2):
            limits["max_memory"] = r.choice([1 << 20, 64 << 20, 256 << 20])
        return Case(cat, src, params, data, consts, grad=self.chance(0.8),
                    dtype="float32" if self.chance(0.15) else "float64",
                    compat="reference" if self.chance(0.1) else None, limits=limits)


def tokenize(src):
    """Brackets, quotes and atoms of program text (for token mutations)."""
    out, cur = [], ""
    for ch in src:
        if ch in "()[]'" or ch.isspace():
            if cur:
                out.append(cur)
                cur = ""
            if not ch.isspace():
                out.append(ch)
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


# ---- running and checking ---------------------------------------------------------------------

def outcome(client, case):
    """("ok", value, grads) or ("error", kind, message, line, col); anything else propagates."""
    ev = ndvm.Evaluator(client=client, dtype=case.dtype, compat=case.compat, **case.limits)
    try:
        prog = ndvm.parse(case.src, name="fuzz.scm")
        res = ev.evaluate(prog, params=case.params, data=case.data, consts=case.consts or None,
                          grad=case.grad)
    except ndvm.SchemeError as e:
        return ("error", e.kind, e.message, e.line, e.col)
    with np.errstate(all="ignore"):  # sums of inf and nan gradients are expected here
        grads = res.grad if case.grad else None
        if case.grad:  # the per-lane forms must not fail either
            res.jacobian()
            res.vjp(np.ones_like(res.value))
    return ("ok", res.value, grads)


def _limit_tolerated(a, b):
    """Clients may stop at different depths (dmci counts nested evaluations, the VM calls) and
    use different amounts of memory: a depth, native-stack or memory limit on one side only is
    accepted."""
    for x in (a, b):
        if x[0] == "error" and x[1] == "LimitError" and any(
                w in x[2] for w in ("depth", "native stack", "memory")):
            return True
    return False


def close(u, v, rtol):
    u, v = np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)
    return u.shape == v.shape and np.allclose(u, v, rtol=rtol, atol=1e-300, equal_nan=True)


def check_case(case, clients=None):
    """Runs `case` under every client; raises AssertionError on a violation. Returns the
    outcome kind ("ok" or an error kind) of the first client."""
    clients = clients or ndvm.clients()
    results = {}
    for c in clients:
        try:
            results[c] = outcome(c, case)
        except Exception as e:  # noqa: BLE001 - anything but a SchemeError is a bug
            raise AssertionError(
                f"{c}: non-ndvm exception {type(e).__name__}: {e}\n{case!r}") from e
    for c, o in results.items():
        if o[0] == "error":
            assert o[1] in KINDS, f"{c}: {o[1]}: {o[2]}\n{case!r}"
            assert o[3] is not None and o[3] >= 1, f"{c}: error without a line: {o}\n{case!r}"
    first, *rest = clients
    a = results[first]
    for c in rest:
        b = results[c]
        if _limit_tolerated(a, b):
            continue
        ka = a[0] if a[0] == "ok" else a[1]
        kb = b[0] if b[0] == "ok" else b[1]
        assert ka == kb, f"{first} -> {a[:5]}\n{c} -> {b[:5]}\n{case!r}"
        if a[0] == "error":
            assert a == b, f"{first} -> {a}\n{c} -> {b}\n{case!r}"
            continue
        rtol = 1e-5 if case.dtype == "float32" else 1e-9
        assert close(a[1], b[1], rtol), f"values differ: {a[1]} vs {b[1]}\n{case!r}"
        if case.grad:
            for name in a[2]:
                assert close(a[2][name], b[2][name], max(rtol, 1e-7)), (
                    f"gradients of {name} differ: {a[2][name]} vs {b[2][name]}\n{case!r}")
    if case.category == "valid":
        kind = a[0] if a[0] == "ok" else a[1]
        assert kind in ("ok", "LimitError"), f"a valid program failed: {a[:5]}\n{case!r}"
    return a[0] if a[0] == "ok" else a[1]


def still_usable(clients=None):
    """The process and fresh evaluators still work after everything thrown at them."""
    for c in clients or ndvm.clients():
        ev = ndvm.Evaluator(client=c)
        r = ev.evaluate("(* a (sin x))", params={"a": [1.0, 2.0]}, data={"x": [0.5, 1.0, 1.5]},
                        grad=True)
        assert np.allclose(r.value, np.outer([1.0, 2.0], np.sin([0.5, 1.0, 1.5])))
        assert np.allclose(r.grad["a"], np.sin([0.5, 1.0, 1.5]).sum())
