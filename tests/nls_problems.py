"""Hard nonlinear least-squares problems as ndvm programs, for tests and bench/fit_quality.py.

The Moré-Garbow-Hillstrom test functions (ACM TOMS 7, 1981; starts x0, 10 x0, 100 x0) and NIST
StRD problems (BoxBOD, Rat42, Rat43 with their two starts). Each residual r_i = model(data_i) -
target_i, so the sum of squares is N * the mean squared error that ndvm.fit minimizes. `minima`
lists the known local minima of the sum of squares (the global one first); `solution`, where
known, is the global minimizer. Each problem also gives a numpy residual function (for scipy).
"""
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Problem", "PROBLEMS", "starts", "sum_sq", "judge"]


@dataclass
class Problem:
    name: str
    src: str
    names: tuple
    data: dict
    target: np.ndarray
    x0: tuple
    minima: tuple
    residuals: object  # f(x, **data) -> residual vector (numpy)
    solution: tuple = None
    nist_starts: tuple = field(default_factory=tuple)  # NIST: the certified starts instead

    @property
    def n(self):
        return self.target.size


def starts(p):
    """(label, start) pairs: MGH's x0, 10 x0, 100 x0 (or NIST's start 1 and 2)."""
    if p.nist_starts:
        return [(f"start{i + 1}", s) for i, s in enumerate(p.nist_starts)]
    return [(f"{k}x", tuple(k * v for v in p.x0)) for k in (1, 10, 100)]


def _k(m):
    return {"k": np.arange(m, dtype=np.float64)}


def _pick(k, *rs):
    return np.array([rs[int(i)] for i in k])


I15 = np.arange(1.0, 16.0)
BARD_Y = np.array([0.14, 0.18, 0.22, 0.25, 0.29, 0.32, 0.35, 0.39, 0.37, 0.58, 0.73, 0.96, 1.34,
                   2.10, 4.39])
KO_Y = np.array([0.1957, 0.1947, 0.1735, 0.1600, 0.0844, 0.0627, 0.0456, 0.0342, 0.0323, 0.0235,
                 0.0246])
KO_U = np.array([4.0, 2.0, 1.0, 0.5, 0.25, 0.167, 0.125, 0.1, 0.0833, 0.0714, 0.0625])
MEYER_Y = np.array([34780.0, 28610, 23650, 19630, 16370, 13720, 11540, 9744, 8261, 7030, 6005,
                    5147, 4427, 3820, 3307, 2872])
MEYER_T = 45.0 + 5.0 * np.arange(1.0, 17.0)
OS1_Y = np.array([0.844, 0.908, 0.932, 0.936, 0.925, 0.908, 0.881, 0.850, 0.818, 0.784, 0.751,
                  0.718, 0.685, 0.658, 0.628, 0.603, 0.580, 0.558, 0.538, 0.522, 0.506, 0.490,
                  0.478, 0.467, 0.457, 0.448, 0.438, 0.431, 0.424, 0.420, 0.414, 0.411, 0.406])
OS1_T = 10.0 * np.arange(33.0)
BOX_T = 0.1 * np.arange(1.0, 11.0)
BD_T = np.arange(1.0, 21.0) / 5.0
BOXBOD_X = np.array([1.0, 2, 3, 5, 7, 10])
BOXBOD_Y = np.array([109.0, 149, 149, 191, 213, 224])
RAT42_X = np.array([9.0, 14, 21, 28, 42, 57, 63, 70, 79])
RAT42_Y = np.array([8.93, 10.8, 18.59, 22.33, 39.35, 56.11, 61.73, 64.62, 67.08])
RAT43_X = np.arange(1.0, 16.0)
RAT43_Y = np.array([16.08, 33.83, 65.80, 97.20, 191.55, 326.20, 386.87, 520.53, 590.03, 651.92,
                    724.93, 699.56, 689.96, 637.56, 717.41])


def _helical(x, k):
    th = math.atan(x[1] / x[0]) / (2 * math.pi) + (0.5 if x[0] < 0 else 0.0)
    return _pick(k, 10 * (x[2] - 10 * th), 10 * (math.hypot(x[0], x[1]) - 1), x[2])


PROBLEMS = [
    Problem("rosenbrock", "(if (= k 0) (* 10 (- x2 (* x1 x1))) (- 1 x1))", ("x1", "x2"),
            _k(2), np.zeros(2), (-1.2, 1.0), (0.0,),
            lambda x, k: _pick(k, 10 * (x[1] - x[0] ** 2), 1 - x[0]), (1.0, 1.0)),
    Problem("freudenstein_roth",
            "(if (= k 0) (+ -13 x1 (* (- (* (- 5 x2) x2) 2) x2))"
            " (+ -29 x1 (* (- (* (+ x2 1) x2) 14) x2)))", ("x1", "x2"),
            _k(2), np.zeros(2), (0.5, -2.0), (0.0, 48.98425367924),
            lambda x, k: _pick(k, -13 + x[0] + ((5 - x[1]) * x[1] - 2) * x[1],
                               -29 + x[0] + ((x[1] + 1) * x[1] - 14) * x[1]), (5.0, 4.0)),
    Problem("powell_badly_scaled",
            "(if (= k 0) (- (* 10000 x1 x2) 1) (- (+ (exp (- x1)) (exp (- x2))) 1.0001))",
            ("x1", "x2"), _k(2), np.zeros(2), (0.0, 1.0), (0.0,),
            lambda x, k: _pick(k, 1e4 * x[0] * x[1] - 1,
                               math.exp(-x[0]) + math.exp(-x[1]) - 1.0001)),
    Problem("brown_badly_scaled",
            "(cond ((= k 0) (- x1 1e6)) ((= k 1) (- x2 2e-6)) (else (- (* x1 x2) 2)))",
            ("x1", "x2"), _k(3), np.zeros(3), (1.0, 1.0), (0.0,),
            lambda x, k: _pick(k, x[0] - 1e6, x[1] - 2e-6, x[0] * x[1] - 2), (1e6, 2e-6)),
    Problem("beale", "(* x1 (- 1 (expt x2 i)))", ("x1", "x2"), {"i": np.array([1.0, 2, 3])},
            np.array([1.5, 2.25, 2.625]), (1.0, 1.0), (0.0,),
            lambda x, i: x[0] * (1 - x[1] ** i) - np.array([1.5, 2.25, 2.625]), (3.0, 0.5)),
    Problem("jennrich_sampson", "(+ (exp (* i x1)) (exp (* i x2)))", ("x1", "x2"),
            {"i": np.arange(1.0, 11.0)}, 2 + 2 * np.arange(1.0, 11.0), (0.3, 0.4),
            (124.3621823556,),
            lambda x, i: np.exp(i * x[0]) + np.exp(i * x[1]) - (2 + 2 * i)),
    Problem("helical_valley",
            "(let ((th (+ (/ (atan (/ x2 x1)) (* 2 pi)) (if (< x1 0) 0.5 0))))"
            " (cond ((= k 0) (* 10 (- x3 (* 10 th))))"
            " ((= k 1) (* 10 (- (sqrt (+ (* x1 x1) (* x2 x2))) 1))) (else x3)))",
            ("x1", "x2", "x3"), _k(3), np.zeros(3), (-1.0, 0.0, 0.0), (0.0,), _helical,
            (1.0, 0.0, 0.0)),
    Problem("bard", "(+ x1 (/ i (+ (* (- 16 i) x2) (* (min i (- 16 i)) x3))))",
            ("x1", "x2", "x3"), {"i": I15}, BARD_Y, (1.0, 1.0, 1.0),
            (8.214877306578e-3, 17.42869333333),
            lambda x, i: x[0] + i / ((16 - i) * x[1] + np.minimum(i, 16 - i) * x[2]) - BARD_Y),
    Problem("meyer", "(* x1 (exp (/ x2 (+ t x3))))", ("x1", "x2", "x3"), {"t": MEYER_T},
            MEYER_Y, (0.02, 4000.0, 250.0), (87.94585517,),
            lambda x, t: x[0] * np.exp(x[1] / (t + x[2])) - MEYER_Y),
    Problem("box3d", "(- (exp (* (- t) x1)) (exp (* (- t) x2)) (* x3 (- (exp (- t)) "
            "(exp (* -10 t)))))", ("x1", "x2", "x3"), {"t": BOX_T}, np.zeros(10),
            (0.0, 10.0, 20.0), (0.0,),
            lambda x, t: np.exp(-t * x[0]) - np.exp(-t * x[1])
            - x[2] * (np.exp(-t) - np.exp(-10 * t))),
    Problem("powell_singular",
            "(cond ((= k 0) (+ x1 (* 10 x2))) ((= k 1) (* (sqrt 5) (- x3 x4)))"
            " ((= k 2) (square (- x2 (* 2 x3)))) (else (* (sqrt 10) (square (- x1 x4)))))",
            ("x1", "x2", "x3", "x4"), _k(4), np.zeros(4), (3.0, -1.0, 0.0, 1.0), (0.0,),
            lambda x, k: _pick(k, x[0] + 10 * x[1], math.sqrt(5) * (x[2] - x[3]),
                               (x[1] - 2 * x[2]) ** 2, math.sqrt(10) * (x[0] - x[3]) ** 2),
            (0.0, 0.0, 0.0, 0.0)),
    Problem("wood",
            "(cond ((= k 0) (* 10 (- x2 (* x1 x1)))) ((= k 1) (- 1 x1))"
            " ((= k 2) (* (sqrt 90) (- x4 (* x3 x3)))) ((= k 3) (- 1 x3))"
            " ((= k 4) (* (sqrt 10) (- (+ x2 x4) 2))) (else (/ (- x2 x4) (sqrt 10))))",
            ("x1", "x2", "x3", "x4"), _k(6), np.zeros(6), (-3.0, -1.0, -3.0, -1.0), (0.0,),
            lambda x, k: _pick(k, 10 * (x[1] - x[0] ** 2), 1 - x[0],
                               math.sqrt(90) * (x[3] - x[2] ** 2), 1 - x[2],
                               math.sqrt(10) * (x[1] + x[3] - 2), (x[1] - x[3]) / math.sqrt(10)),
            (1.0, 1.0, 1.0, 1.0)),
    Problem("kowalik_osborne", "(/ (* x1 (+ (* u u) (* u x2))) (+ (* u u) (* u x3) x4))",
            ("x1", "x2", "x3", "x4"), {"u": KO_U}, KO_Y, (0.25, 0.39, 0.415, 0.39),
            (3.075056038492e-4, 1.027343469577e-3),
            lambda x, u: x[0] * (u * u + u * x[1]) / (u * u + u * x[2] + x[3]) - KO_Y),
    Problem("brown_dennis",
            "(+ (square (- (+ x1 (* t x2)) (exp t))) (square (- (+ x3 (* x4 (sin t))) (cos t))))",
            ("x1", "x2", "x3", "x4"), {"t": BD_T}, np.zeros(20), (25.0, 5.0, -5.0, -1.0),
            (85822.20162635,),
            lambda x, t: (x[0] + t * x[1] - np.exp(t)) ** 2
            + (x[2] + x[3] * np.sin(t) - np.cos(t)) ** 2),
    Problem("osborne1", "(+ x1 (* x2 (exp (- (* t x4)))) (* x3 (exp (- (* t x5)))))",
            ("x1", "x2", "x3", "x4", "x5"), {"t": OS1_T}, OS1_Y, (0.5, 1.5, -1.0, 0.01, 0.02),
            (5.464894697482e-5,),
            lambda x, t: x[0] + x[1] * np.exp(-t * x[3]) + x[2] * np.exp(-t * x[4]) - OS1_Y),
    Problem("boxbod", "(* b1 (- 1 (exp (- (* b2 x)))))", ("b1", "b2"), {"x": BOXBOD_X},
            BOXBOD_Y, (1.0, 1.0), (1168.0088766,),
            lambda b, x: b[0] * (1 - np.exp(-b[1] * x)) - BOXBOD_Y,
            (213.80940889, 0.54723748542), ((1.0, 1.0), (100.0, 0.75))),
    Problem("rat42", "(/ b1 (+ 1 (exp (- b2 (* b3 x)))))", ("b1", "b2", "b3"), {"x": RAT42_X},
            RAT42_Y, (100.0, 1.0, 0.1), (8.0565229338,),
            lambda b, x: b[0] / (1 + np.exp(b[1] - b[2] * x)) - RAT42_Y,
            (72.462237576, 2.6180768402, 0.067359200066), ((100.0, 1.0, 0.1), (75.0, 2.5, 0.07))),
    Problem("rat43", "(/ b1 (expt (+ 1 (exp (- b2 (* b3 x)))) (/ 1 b4)))",
            ("b1", "b2", "b3", "b4"), {"x": RAT43_X}, RAT43_Y, (100.0, 10.0, 1.0, 1.0),
            (8786.4049080,),
            lambda b, x: b[0] / (1 + np.exp(b[1] - b[2] * x)) ** (1 / b[3]) - RAT43_Y,
            (699.64151270, 5.2771253025, 0.75962938329, 1.2792483859),
            ((100.0, 10.0, 1.0, 1.0), (700.0, 5.0, 0.75, 1.3))),
]


def sum_sq(p, x):
    """The sum of squared residuals of problem p at x (inf where not finite)."""
    with np.errstate(all="ignore"):
        r = p.residuals(np.asarray(x, dtype=np.float64), **p.data)
        s = float(np.dot(r, r))
    return s if math.isfinite(s) else math.inf


def judge(p, x, x0):
    """(success, at a known minimum, correct digits) of the point x reached from x0.

    Success: the sum of squares reaches the global minimum (relative 1e-6; a zero minimum: below
    1e-10 times its value at the problem's standard start, whatever the start x0 — relative to
    x0's own, a fit from 100 x0, where the sum of squares is ~1e16, would "succeed" at 1e5, and a
    local minimum such as Freudenstein-Roth's 48.98 would count as the global one). Known: success, or a listed local minimum (relative 1e-4).
    Correct digits: the log relative error of the parameters where the minimizer is known, else
    of the sum of squares (capped at 15).
    """
    ss = sum_sq(p, x)
    best = p.minima[0]
    scale = max(1.0, sum_sq(p, p.nist_starts[0] if p.nist_starts else p.x0))
    if best == 0.0:
        ok = ss <= 1e-10 * scale
    else:
        ok = abs(ss - best) <= 1e-6 * best
    known = ok or any(m > 0 and abs(ss - m) <= 1e-4 * m for m in p.minima[1:])
    if p.solution is not None and ok:
        errs = [abs(a - b) / (abs(b) if b else 1.0) for a, b in zip(x, p.solution)]
        e = max(errs)
    else:
        e = abs(ss - best) / (best if best else scale)
    digits = 15.0 if e == 0 else min(15.0, max(0.0, -math.log10(e)))
    return ok, known, digits
