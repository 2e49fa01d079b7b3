"""What the training data say about a law's structure before any candidate is calibrated.

Laws with many inputs are mostly products of powers of the inputs (monomials), often with one
function of a monomial group, y = c M h(z): an ideal gas, a Coulomb force, a Boltzmann factor
n0 exp(-m g x / (k T)), a magnetisation n mu tanh(mu B / (k T)). Genetic programming finds such a
product of four or five inputs only by chance; the data find it directly, in two tests that use
no calibration:

- ``power_law``: least squares of log|y| on log|x_i| gives each input's exponent in a monomial
  law;
- ``single_indices``: the monomials z = prod x_i^k_i (small integer exponents) for which
  y = c M h(z), M a monomial and h one smooth function, explains the most variance: log|y| fitted
  by least squares in log|x| plus a running mean along z (backfitting), for every small z (the
  fit is invariant to monotone maps of z, so z and 1/z are one candidate).

``building_blocks`` turns them into programs: the rounded monomial law c M, and c M s(z) for
every small one-input program s of the grammar (grammar.small_programs over z), for the best
indices z. The search proposes them first (proposers.Mutate) and evolves from them.
"""
import contextlib
import copy
import functools
import hashlib
import itertools
import math

import numpy as np
from threadpoolctl import threadpool_limits

from ndvm.cosearch import grammar as gp
from ndvm.cosearch.sexpr import substitute, to_source

__all__ = [
    "MIN_INPUTS",
    "additive_laws",
    "building_blocks",
    "gauges",
    "monomial",
    "power_law",
    "single_indices",
]

MIN_INPUTS = 2          # building blocks for tasks with at least this many inputs
SCAN_ROWS = 2000        # rows the index scan uses (evenly spaced over the training rows)
POWER_ROWS = 100_000    # rows the power law's log fit uses at most (evenly spaced: on 10^6 rows
                        # of 9 inputs it took ~2 s and 300 MB)
SIGN_SHARE = 0.99       # y keeps one sign when its rows hold this share of sum(y^2)
MAX_TERMS = 4           # inputs one index may combine
MAX_INDICES = 5000      # indices scanned at most (13 inputs and more: fewer combined)
INDICES = 2             # indices z turned into building blocks
GAUGES = 2              # outer monomials per index (structure.gauges)
ADDITIVE_POWERS = (-2, -1, 1, 2)  # powers of an input a sum's terms may hold (additive_laws)
WHOLE_TOLERANCE = 0.15  # a log-fit exponent this close to an integer: an input that may only
MAX_FACTORS = 4         # multiply (additive_laws tries every subset of at most this many)
MAX_SUM_INPUTS = 16     # inputs a sum's terms may come from (its fit costs ~ their number^5)
DROP = 1e-4             # a sum's term is dropped while the fit's R^2 loses less than this
SUPPORT = 0.99          # blocks only from a fit (power law, index) explaining this share of
                        # the (log) variance: no data, no blocks (they would take a search's
                        # budget and parents on a law of another kind)
_ORDERS_AT_ONCE = 8    # indices whose orders are sorted and fitted at once (single_indices:
                       # arrays of 8 x SCAN_ROWS floats, 125 KiB, under glibc's 128 KiB mmap
                       # threshold, so a block's temporaries come from the heap; at 32 (0.5 MB
                       # each) they were mapped and unmapped each time, and their page faults
                       # made a new process's scan slower than one order at a time)
_INDEX_Z = "?z"         # the stand-in input of the one-input programs (no program can name it)


def log_target(y, share=SIGN_SHARE, signed=True):
    """(rows, log|y| on them, weights) for a fit of log|y|: the rows of y's majority sign when
    they hold ``share`` of its sum of squares (noise flips the sign of values near zero, which
    weigh little), weighted by y^2 (so
    that a least-squares fit of log|y| weighs each point as a fit of y would: a small value
    drowned in noise counts little); None when y has no such sign or zeros on those rows.
    ``signed`` False: every nonzero row, whatever its sign."""
    pos = y > 0
    major = (pos if pos.mean() >= 0.5 else y < 0) if signed else y != 0
    if not major.any():
        return None
    energy = (y / np.max(np.abs(y))) ** 2
    if energy[major].sum() < share * energy.sum():
        return None
    rows = np.flatnonzero(major)
    v = y[rows] / np.max(np.abs(y[rows]))  # (scaled: the squares of 1e160 overflow)
    weights = v * v / np.mean(v * v)
    if not np.all(np.isfinite(weights)):
        return None
    return rows, np.log(np.abs(y[rows])), weights


def power_law(X, y):
    """(exponents [d], weighted R^2 of the log fit) of y ~ c prod x_i^k_i by weighted least
    squares on the logs (log_target; on at most POWER_ROWS evenly spaced rows), or None when the
    data cannot be a monomial (an input that changes sign or is zero, y without one sign, too
    few rows)."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.all(np.isfinite(X), axis=1) & np.isfinite(y) & np.all(X != 0, axis=1)
    X, y = X[ok], y[ok]
    if y.size < max(8, 2 * X.shape[1] + 2) or np.any((X.min(axis=0) < 0) & (X.max(axis=0) > 0)):
        return None
    target = log_target(y)
    if target is None:
        return None
    rows, ly, wt = target
    if ly.size > POWER_ROWS:  # (the log fit on evenly spaced rows of large data)
        pick = np.linspace(0, ly.size - 1, POWER_ROWS).astype(int)
        rows, ly, wt = rows[pick], ly[pick], wt[pick]
    lx = np.log(np.abs(X[rows]))
    A = np.concatenate([np.ones((ly.size, 1)), lx], axis=1)
    sw = np.sqrt(wt)
    coef = _lstsq(A * sw[:, None], ly * sw)
    if coef is None:
        return None
    resid = ly - A @ coef
    mean = np.average(ly, weights=wt)
    ss = float(np.sum(wt * (ly - mean) ** 2))
    r2 = 1.0 - float(np.sum(wt * resid ** 2)) / ss if ss > 0 else 1.0
    return coef[1:], r2


@functools.lru_cache(maxsize=16)
def _index_exponents(d):
    """Exponent vectors of candidate indices over d inputs: entries in -2..2 (in -1..1 beyond
    four inputs), at most MAX_TERMS nonzero (one more up to seven inputs; fewer where more
    would make more than MAX_INDICES of them: many inputs), first nonzero positive, no common
    factor (z^2 and 1/z order the points as z does); a tuple, in the lexicographic order of the
    entries."""
    values = (-2, -1, 0, 1, 2) if d <= 4 else (-1, 0, 1)
    powers = [k for k in values if k]
    most = min(d, MAX_TERMS + (1 if d <= 7 else 0))
    while most > 1 and sum(math.comb(d, m) * len(powers) ** m for m in range(1, most + 1)) \
            > 2 * MAX_INDICES:  # (half of them have a negative first entry)
        most -= 1
    out = []
    for m in range(1, most + 1):
        for where in itertools.combinations(range(d), m):
            for nz in itertools.product(powers, repeat=m):
                if nz[0] < 0 or math.gcd(*[abs(k) for k in nz]) != 1:
                    continue
                ks = [0] * d
                for i, k in zip(where, nz):
                    ks[i] = k
                out.append(tuple(ks))
    rank = {k: values.index(k) for k in values}
    out.sort(key=lambda ks: [rank[k] for k in ks])
    return tuple(out)


class _RunningMean:
    """Weighted running means of ``w`` of ``n`` points in an order (clamped at the ends), for
    many orders at once (one a row): ``along(ws)`` takes the points' weights in each order
    [orders, n] (their sums are made once for every mean along it), then ``mean(ts)`` is the
    running means of values ``ts`` [orders, n] in those orders. Each row's sums run along the
    row as for one order alone, so the means do not depend on how many are made at once.
    (Elementwise steps run on whole contiguous arrays: numpy buffers and copies an operation on
    strided views or a broadcast row, ~10 instructions an element more than the arithmetic.)"""

    def __init__(self, n, w):
        self.n, self.w = n, min(w, n)
        self.ws = self.mass = None

    def _windows(self, values):
        """Each point's window sum: the w points from the window's first (the point w // 2
        before, clamped to 0..n - w), as the difference of two running sums."""
        n, w = self.n, self.w
        sums = np.add.accumulate(values, axis=1)  # sums[:, j]: the first j + 1 values
        first = w // 2  # (the first point whose window is not clamped)
        out = np.empty_like(values)
        # the window from j >= 1 (at point first + j): sums[j + w - 1] - sums[j - 1], in one
        # subtraction over the flat arrays (its differences across two rows are overwritten)
        flat = sums.ravel()
        np.subtract(flat[w:], flat[:-w], out=out.ravel()[first + 1:first + 1 + flat.size - w])
        out[:, :first + 1] = sums[:, w - 1:w]  # (the windows from 0)
        out[:, first + n - w + 1:] = out[:, first + n - w:first + n - w + 1]  # (from n - w)
        return out

    def along(self, ws):
        self.ws = ws
        mass = self._windows(ws)
        mass[~(mass > 0)] = 1.0
        self.mass = mass

    def mean(self, ts):
        return self._windows(ts * self.ws) / self.mass


def _flat(orders):
    """The flat indices [orders, n] of each row's order in an array of their shape."""
    return orders + orders.shape[1] * np.arange(len(orders))[:, None]


def _orders(lx, neg, ks):
    """The points in the order of z = prod x^k (its log, signed by the odd powers of negative
    inputs), for each exponent vector of ``ks``: a stable argsort of each's keys, [len(ks), n].
    (Keys without ties have one sorted order: numpy's faster unstable sort gives it; keys with
    ties are sorted again stably. Each key is lx @ k, one matrix-vector product per vector as
    for one alone: the same bits, however many vectors.)"""
    K = np.asarray(ks, dtype=np.float64)
    keys = np.matmul(lx, K[:, :, None])[:, :, 0]
    if neg is not None:
        signs = (neg @ (np.asarray(ks) % 2).T % 2).T
        flip = np.flatnonzero(signs.any(axis=1))
        mag = np.exp(np.clip(keys[flip], -700.0, 700.0))
        keys[flip] = np.where(signs[flip] == 1, -mag, mag)
    orders = np.argsort(keys, axis=1)
    ranked = keys.ravel()[_flat(orders)]
    for i in np.flatnonzero((ranked[:, 1:] == ranked[:, :-1]).any(axis=1)):
        orders[i] = np.argsort(keys[i], kind="stable")
    return orders


def _tiles(t, wt, A, P, fit_a, rows):
    """(t, its weights, and when ``fit_a`` the log fit's residual t - A P t, else None), each
    repeated in ``rows`` rows (contiguous: see _RunningMean): what _backfits reads for every
    block of orders, made once for all of them."""
    tile = (rows, 1)
    return np.tile(t, tile), np.tile(wt, tile), np.tile(t - A @ (P @ t), tile) if fit_a else None


def _backfits(orders, t, wt, A, P, smooth, fit_a, tiles=None):
    """(weighted residual sums of squares [len(orders)], the log fit's coefficients
    [len(orders), 1 + d] or None) of t = A coef + h(z), h a weighted running mean (``smooth``)
    along each order of z (a row): when ``fit_a``, backfitting from the log fit (P @ t: the
    weighted least squares of t on A): h along z, then coef, twice, then h again; otherwise
    t = h(z) alone. ``tiles``: ``_tiles``'s, of at least len(orders) rows, made once by a
    caller fitting many blocks (None: made here), only read. Each product is one matrix-vector
    product per order and each sum runs along a row, so every number is what the fit of that
    order alone makes."""
    m = len(orders)
    at = _flat(orders)
    T, WT, R0 = _tiles(t, wt, A, P, fit_a, m) if tiles is None else tiles
    T, WT = T[:m], WT[:m]

    def along_z(r):  # h [orders, n] in the points' order, of residuals r [orders, n]
        h = np.empty(orders.shape)
        h.ravel()[at] = smooth.mean(r.ravel()[at])
        return h

    smooth.along(wt[orders])
    coef, r = None, T
    if fit_a:
        r = R0[:m]
        for _ in range(2):
            coef = np.matmul(P, (T - along_z(r))[:, :, None])[:, :, 0]
            r = T - np.matmul(A, coef[:, :, None])[:, :, 0]
    r = r - along_z(r)  # (a new array: T and R0 serve the next block)
    r *= r
    r *= WT
    return r.sum(axis=1), coef


def gauges(a, ks, count=GAUGES):
    """Outer exponents for y = c M(a) h(z), rounded to halves: a is fixed only up to multiples
    of z's exponents k (h absorbs any power of z), so a + lam k for the lam that put one of k's
    inputs on a half (or on 0), the ``count`` that need the least rounding (then the smallest)
    first, distinct."""
    a = np.asarray(a, dtype=np.float64)
    k = np.asarray(ks, dtype=np.float64)
    options = {}
    for j in np.flatnonzero(k):
        for target in (math.floor(2 * a[j]) / 2, math.ceil(2 * a[j]) / 2, 0.0):
            b = a + (target - a[j]) / k[j] * k
            half = np.round(2 * b) / 2
            key = (round(float(np.sum(np.abs(b - half))), 2), float(np.sum(np.abs(half))))
            options.setdefault(tuple(half.tolist()), key)
    if not options:
        return [list(np.round(2 * a) / 2)]
    ranked = sorted(options, key=lambda h: (options[h], h))
    return [list(h) for h in ranked[:count]]


def single_indices(X, y, count=INDICES, rows=SCAN_ROWS, absolute=False):
    """The ``count`` monomials z = prod x_i^k_i that best explain y as y = c M h(z), M another
    monomial (exponents ``a``, as fitted: see ``gauges``) and h one smooth function:
    [(exponents k, outer exponents a or None, R^2)], best first (fewest inputs first among near
    equals).

    When y keeps one sign (log_target), log|y| = log c + a . log|x| + log|h(z)| is fitted for
    each k by backfitting (weighted least squares for a, a weighted running mean along z for h);
    otherwise y = h(z) alone (a None). ``absolute``: log|y| is fitted so on every nonzero row
    whatever y's sign (weights y^2: the points near a zero of h, where log|h| is steep, weigh
    little): y = c M h(z) with h changing sign, r F sin(theta) or -p B cos(theta)."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.all(np.isfinite(X), axis=1) & np.isfinite(y) & np.all(X != 0, axis=1)
    X, y = X[ok], y[ok]
    if y.size < 10 or X.shape[1] == 0:
        return []
    if y.size > rows:
        pick = np.linspace(0, y.size - 1, rows).astype(int)
        X, y = X[pick], y[pick]
    target = log_target(y) if not absolute else log_target(y, share=0.0, signed=False)
    if target is None:  # y = h(z) alone, every point weighing the same
        t, wt, a_fit = y, np.ones_like(y), False
    else:
        rows, t, wt = target
        X, a_fit = X[rows], True
    lx = np.log(np.abs(X))
    neg = (X < 0).astype(np.int64) if (X < 0).any() else None
    ss = float(np.sum(wt * (t - np.average(t, weights=wt)) ** 2))
    if not 0 < ss < math.inf:
        return []
    sw = np.sqrt(wt)
    A = np.concatenate([np.ones((t.size, 1)), lx], axis=1)
    P = np.linalg.pinv(A * sw[:, None]) * sw  # weighted least squares: coef = P @ t
    smooth = _RunningMean(t.size, max(5, t.size // 40))
    scored = []
    every = _index_exponents(X.shape[1])
    tiles = _tiles(t, wt, A, P, a_fit, _ORDERS_AT_ONCE)  # (once for every block)
    for first in range(0, len(every), _ORDERS_AT_ONCE):
        block = every[first:first + _ORDERS_AT_ONCE]
        rss, coefs = _backfits(_orders(lx, neg, block), t, wt, A, P, smooth, a_fit, tiles)
        for i, ks in enumerate(block):
            r2 = 1.0 - float(rss[i]) / ss
            if math.isfinite(r2):
                scored.append((-round(r2, 4), sum(1 for v in ks if v), -r2, ks,
                               None if coefs is None else coefs[i]))
    scored.sort(key=lambda s: s[:3])
    return [(s[3], None if s[4] is None else s[4][1:], -s[2]) for s in scored[:count]]


def _abs_log_exponents(X, y):
    """Each input's exponent in a weighted least-squares fit of log|y| on log|x_i| (weights
    y^2, rows where y is not 0: y may change sign), or None."""
    nz = y != 0
    if nz.sum() < 2 * X.shape[1] + 2:
        return None
    v = y[nz]
    A = np.concatenate([np.ones((v.size, 1)), np.log(np.abs(X[nz]))], axis=1)
    u = np.abs(v) / np.max(np.abs(v))
    sw = u / np.sqrt(np.mean(u * u))
    coef = _lstsq(A * sw[:, None], np.log(np.abs(v)) * sw)
    return None if coef is None else coef[1:]


def _lstsq(A, b):
    """The least-squares solution of A x = b, or None when it has no finite one."""
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(b))):
        return None
    try:
        return np.linalg.lstsq(A, b, rcond=None)[0]
    except np.linalg.LinAlgError:
        return None


def _sum_of_powers(X, t, free):
    """(terms [(input, power)], with a constant, R^2) of the least-squares fit of t by a
    constant and every power in ADDITIVE_POWERS of the ``free`` inputs, its terms then dropped,
    the least first, while the fit loses less than DROP of its R^2; None when even the full
    sum explains less than SUPPORT of t. (Each subset's fit solves the normal equations of the
    unit-norm columns: one Gram matrix for the whole elimination.)"""
    ss = float(np.sum((t - t.mean()) ** 2))
    if not (ss > 0 and np.all(np.isfinite(t))):
        return None
    terms = [None] + [(i, k) for i in free for k in ADDITIVE_POWERS]
    with np.errstate(all="ignore"):
        F = np.stack([np.ones_like(t) if tm is None else X[:, tm[0]] ** tm[1] for tm in terms],
                     axis=1)
    norms = np.linalg.norm(F, axis=0)
    if not (np.all(np.isfinite(F)) and np.all(norms > 0)):
        return None
    F = F / norms
    G, b, tt = F.T @ F, F.T @ t, float(t @ t)

    def r2(keep):
        try:
            coef = np.linalg.solve(G[np.ix_(keep, keep)], b[keep])
        except np.linalg.LinAlgError:
            return -math.inf
        return 1.0 - (tt - float(coef @ b[keep])) / ss

    keep = list(range(len(terms)))
    full = r2(keep)
    if full < SUPPORT:
        return None
    while len(keep) > 1:
        best, drop = max((r2([j for j in keep if j != k]), k) for k in keep)
        if full - best >= DROP:
            break
        keep.remove(drop)
    kept = [terms[j] for j in keep]
    return [tm for tm in kept if tm is not None], None in kept, r2(keep)


def additive_laws(X, y, rows=SCAN_ROWS):
    """Laws y = M (c0 + sum_i c_i x_i^k_i) and y = M sqrt(c0 + sum_i c_i x_i^k_i): a monomial M
    times a sum of powers of the other inputs, or its root (a kinetic energy m (u^2 + v^2 +
    w^2)/2, a potential difference G m1 m2 (1/r2 - 1/r1), a heat flow k A (T2 - T1)/d, a
    field's magnitude mu sqrt(Bx^2 + By^2 + Bz^2)). M is a product of integer powers of inputs
    whose exponent in the fit of log|y| is within WHOLE_TOLERANCE of an integer (an input that
    only multiplies keeps its exact exponent there), each subset of them tried; the sum is
    fitted by least squares (_sum_of_powers). [(M's exponents, [(input, power), ...], with a
    constant, root, R^2)]. The sum's terms come from at most MAX_SUM_INPUTS inputs: with more, from
    those of the largest exponents in the fit of log|y|."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.all(np.isfinite(X), axis=1) & np.isfinite(y) & np.all(X != 0, axis=1)
    X, y = X[ok], y[ok]
    d = X.shape[1]
    if y.size < 4 * d * len(ADDITIVE_POWERS) or d < 2:
        return []
    if y.size > rows:
        pick = np.linspace(0, y.size - 1, rows).astype(int)
        X, y = X[pick], y[pick]
    ks = _abs_log_exponents(X, y)
    if ks is None:
        return []
    whole = [float(round(k)) for k in ks]
    near = [j for j in range(d) if whole[j] and abs(ks[j] - whole[j]) <= WHOLE_TOLERANCE]
    out = []
    for n in range(len(near), -1, -1):
        for subset in itertools.combinations(near[:MAX_FACTORS], n):
            outer = [whole[j] if j in subset else 0.0 for j in range(d)]
            free = [j for j in range(d) if j not in subset]
            if len(free) > MAX_SUM_INPUTS:  # (those of the largest exponents in the log fit:
                # an input y does not depend on has ~0 there)
                free = sorted(sorted(free, key=lambda j: -abs(ks[j]))[:MAX_SUM_INPUTS])
            if len(free) < 2:
                continue
            with np.errstate(all="ignore"):
                t = y / np.prod(X ** np.asarray(outer), axis=1)
            if not np.all(np.isfinite(t)):
                continue
            for root in (False, True):
                if root and not np.all(t > 0):
                    continue
                with np.errstate(all="ignore"):
                    found = _sum_of_powers(X, t * t if root else t, free)
                if found is not None:
                    out.append((outer, found[0], found[1], root, found[2]))
    return out


def _power(x, k, g):
    """x^|k| as a tree of the grammar's operators (any operator when ``g`` is None): x,
    (square x), (sqrt x) and their products for multiples of 1/2, else (pow x |k|); None when the
    grammar lacks what it takes."""
    ops = lambda kind, op: g is None or op in getattr(g, kind)  # noqa: E731
    if (2 * abs(k)) % 1:
        return ["pow", x, float(abs(k))] if ops("binary", "pow") else None
    whole, half = divmod(abs(k), 1)
    factors = []
    n = int(whole)
    while n >= 2 and ops("unary", "square"):
        factors.append(["square", x])
        n -= 2
    factors += [x] * n
    if half:
        if not ops("unary", "sqrt"):
            return None
        factors.append(["sqrt", x])
    if len(factors) > 1 and not ops("binary", "*"):
        return None
    return factors[0] if len(factors) == 1 else ["*"] + factors


def monomial(names, exponents, g=None):
    """prod names_i^exponents_i as a tree (a ratio when some are negative), None exponents and
    zeros left out; None when the grammar ``g`` cannot write it (None: any operator); 1.0 for
    the empty product. Exponents may be floats or Fractions; halves use sqrt, others pow."""
    num, den = [], []
    for x, k in zip(names, exponents):
        if not k:
            continue
        p = _power(x, k, g)
        if p is None:
            return None
        (num if k > 0 else den).append(p)
    if not num and not den:
        return 1.0
    if den and g is not None and "/" not in g.binary:
        return None
    prod = lambda fs: fs[0] if len(fs) == 1 else ["*"] + fs  # noqa: E731
    top = prod(num) if num else 1.0
    return ["/", top, prod(den)] if den else top


def _one_input_programs(g):
    """Models of one stand-in input z (``_INDEX_Z``) that a law's factor h(z) commonly is, over
    the grammar's operators: a u(b z) and a + b u(c z) for each unary u, a + b z, a z^b,
    saturations a/(b + z) and z/(a + b z), powers (a + b z)^c and (a + b z^2)^c (relativistic
    factors), and the grammar's response shapes of z (grammar.separable_shapes)."""
    import dataclasses
    if len(g.params) < 3:
        return []
    a, b, c = g.params[:3]
    z = _INDEX_Z
    out = [["*", a, [u, ["*", b, z]]] for u in g.unary]
    out += [["+", a, ["*", b, [u, ["*", c, z]]]] for u in g.unary]
    out += [["+", a, ["*", b, z]], ["*", a, ["pow", z, b]],
            ["/", a, ["+", b, z]], ["/", z, ["+", a, ["*", b, z]]],
            ["pow", ["+", a, ["*", b, z]], c], ["pow", ["+", a, ["*", b, ["square", z]]], c]]
    out = [t for t in out if _only(t, set(g.unary) | set(g.binary))]
    return out + gp.separable_shapes(dataclasses.replace(g, inputs=(z,)))


def _only(tree, ops):
    """True when every operator of the tree is in ``ops``."""
    if not isinstance(tree, list):
        return True
    return tree[0] in ops and all(_only(t, ops) for t in tree[1:])


_MEMO = {}  # (grammar, data digest) -> blocks: the islands of a search share one analysis
_MEMO_SIZE = 8


def building_blocks(g, X, y):
    """See _building_blocks; numbers that overflow in the analysis (inputs near 1e160, say)
    make its fits fail their finiteness checks quietly instead of warning. The analysis of the
    same grammar and data is done once per process (a search's islands each ask for it), its
    linear algebra on one BLAS thread (``_one_blas_thread``)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    digest = hashlib.blake2b(X)  # (the arrays' bytes read in place: no joined copy of the data)
    digest.update(y)
    key = (repr(g), X.shape, digest.hexdigest())
    out = _MEMO.get(key)
    if out is None:
        with np.errstate(all="ignore"), _one_blas_thread(X.shape[1]):
            out = _building_blocks(g, X, y)
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = out
    return copy.deepcopy(out)


def _one_blas_thread(inputs):
    """The analysis's BLAS (numpy's matrix products and solves) limited to one thread while it
    runs, for data of ``inputs`` >= MIN_INPUTS inputs (fewer: no analysis, nothing limited).
    Its matrices are small (SCAN_ROWS rows by a few dozen columns), and while a search runs its
    own threads and worker processes hold the cores: BLAS's threads only wait on them. Measured
    on a loaded 2-core VM (bench/results/blas_threads_2026-12-07.txt): a 2-island search of a
    9-input law on 2 worker processes 10.9-12.9 s with numpy's default threads, 7.9-8.3 s so.
    The analysis gives the same bits either way (bench/check_blocks.py on every Feynman and
    srbench problem)."""
    if inputs < MIN_INPUTS:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _building_blocks(g, X, y):
    """Programs the data suggest, best guess first: the monomial law c M (the log fit's
    exponents rounded to halves), then c M s(z) for the best indices z (single_indices, M their
    outer monomial rounded to halves) and every one-input model s of _one_input_programs, then
    M (c0 + sum c_i x_i^k_i) for the additive laws (additive_laws); each only when its fit's
    R^2 reaches SUPPORT. [] when the grammar has fewer than MIN_INPUTS
    inputs or no product."""
    names = list(g.inputs)
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(names) < MIN_INPUTS or "*" not in g.binary or X.shape[1] != len(names):
        return []
    out = []
    fit = power_law(X, y)
    if fit is not None and fit[1] >= SUPPORT:
        law = monomial(names, [round(2.0 * float(k)) / 2.0 for k in fit[0]], g)
        if law is not None:
            out.append(["*", g.params[0], law])
    shapes = _one_input_programs(g)
    indices = single_indices(X, y)
    if log_target(y) is None:  # y changes sign: also c M h(z) with h changing sign
        indices += single_indices(X, y, absolute=True)
    for ks, a, r2 in indices:
        z = monomial(names, ks, g)
        if z is None or r2 < SUPPORT:
            continue
        for outer_ks in ([None] if a is None else gauges(a, ks)):
            outer = 1.0 if outer_ks is None else monomial(names, outer_ks, g)
            if outer is None:
                continue
            for s in shapes:
                body = substitute(s, {_INDEX_Z: z})
                out.append(body if outer == 1.0 else ["*", outer, body])
    if "+" in g.binary:
        p = list(g.params)
        for outer_ks, terms, constant, root, r2 in additive_laws(X, y):
            parts = [monomial([names[i]], [k], g) for i, k in terms]
            outer = monomial(names, outer_ks, g)
            if (outer is None or any(t is None for t in parts) or len(parts) < 2 - constant
                    or len(parts) + constant > len(p) or (root and "sqrt" not in g.unary)):
                continue
            coefs = iter(p)
            total = ["+"] + ([next(coefs)] if constant else []) + [["*", next(coefs), t]
                                                                  for t in parts]
            total = ["sqrt", total] if root else total
            out.append(total if outer == 1.0 else ["*", outer, total])
    unique = {to_source(t): t for t in reversed(out)}  # (the first of equal blocks kept)
    return [t for t in out if unique.get(to_source(t)) is t]
