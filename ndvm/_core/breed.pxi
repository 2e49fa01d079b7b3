# The genetic operators of the search (included by _core.pyx; ndvm.cosearch.grammar is their Python
# face): grow, mutate, crossover, shifted and the rewrite positions of a tree, and a round's
# children bred, checked and deduplicated in one call (Breeder.children), on trees of nested
# Python lists, with the draws of a Draws object (draws.pxi) in the order the Python operators drew
# them, so a seed breeds the same children draw for draw (tests/test_breed.py replays the golden
# file tests/breed_golden.py wrote from the Python operators). A child shares every list off the
# rewritten path with its parent (the canonical form's Simplifier meets them by identity).
cimport cython
from cpython.long cimport PyLong_AsLongAndOverflow, PyLong_FromVoidPtr
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM

import math
from numbers import Real


cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)  # (a dict with room for minused items)


cdef extern from "breed.hpp" namespace "ndvm::breed" nogil:
    double python_round(double x, int ndigits)


# A tree nested deeper than this (or a grow deeper than this) is refused with a RecursionError.
BREED_MAX_DEPTH = 1000
cdef int _BREED_MAX_DEPTH = BREED_MAX_DEPTH
_BREED_SPECIAL = frozenset("quote if cond case and or when unless begin let let* letrec letrec* "
                           "lambda define loop recur else".split())
_KINDS = ("subtree", "constant", "operator", "hoist", "extend", "shift")
BREED_KINDS = _KINDS  # the kinds of mutation, in the order their rates are drawn
_S = frozenset({"s"})
_NO_NAMES = frozenset()
_LOOP = frozenset({"loop"})
# the kinds of mutation as C constants, their indices in _KINDS
cdef enum:
    _SUBTREE, _CONSTANT, _OPERATOR, _HOIST, _EXTEND, _SHIFT


def breed_round(double x, int ndigits):
    """Python's ``round(x, ndigits)`` of a float, as the operators compute it (breed.hpp)."""
    if not 0 <= ndigits <= 17:
        raise ValueError("ndigits: 0 to 17")
    return python_round(x, ndigits)


cdef int _bdeeper(int depth) except -1:
    if depth >= _BREED_MAX_DEPTH:
        raise RecursionError(f"the tree is nested more than {_BREED_MAX_DEPTH} levels deep")
    if native_stack_exhausted():  # (datum.pxi's guard)
        raise RecursionError(_STACK_EXHAUSTED)
    return 0


cdef Draws _bdraws(object rng):
    # the operators draw from a Draws; a numpy Generator is read through one (the same stream)
    if type(rng) is Draws:
        return <Draws>rng
    if isinstance(rng, Draws):
        return <Draws>rng
    if not hasattr(rng, "bit_generator"):
        raise TypeError(f"rng is a numpy Generator or an ndvm Draws, not {type(rng).__name__}")
    return Draws(rng)


cdef inline bint _bis_number(object a):
    # (``bool`` is C++'s here: a Python bool is True or False)
    return isinstance(a, (int, float)) and a is not True and a is not False


cdef bint _brefs(object tree, object names, int depth) except -1:
    # does the tree mention one of ``names`` (a set of symbols)?
    if isinstance(tree, list):
        _bdeeper(depth)
        for t in <list>tree:
            if _brefs(t, names, depth + 1):
                return True
        return False
    return isinstance(tree, str) and tree in names


def breed_refs(tree, names):
    """Whether ``tree`` mentions one of ``names`` (a set of symbols)."""
    return _brefs(tree, names, 0)


cdef Py_ssize_t _bsize(object tree, int depth) except -1:
    cdef Py_ssize_t n = 0
    if isinstance(tree, list):
        _bdeeper(depth)
        for t in <list>tree:
            n += _bsize(t, depth + 1)
        return n
    return 1


cdef bint _blocals_in(object tree, object locals_, object scope, int depth) except -1:
    # ``_free_locals(tree, locals_) <= scope``: every name of ``locals_`` in the tree is in scope
    if isinstance(tree, list):
        _bdeeper(depth)
        for t in <list>tree:
            if not _blocals_in(t, locals_, scope, depth + 1):
                return False
        return True
    if isinstance(tree, str) and tree in locals_:
        return tree in scope
    return True


cdef tuple _bpath(tuple path, Py_ssize_t j):
    # ``path + (j,)``, made as one tuple (not the tuple (j,) and then their sum)
    cdef Py_ssize_t k, n = PyTuple_GET_SIZE(path)
    cdef tuple out = PyTuple_New(n + 1)
    cdef object x
    for k in range(n):
        x = <object>PyTuple_GET_ITEM(path, k)
        Py_INCREF(x)
        PyTuple_SET_ITEM(out, k, x)
    x = j
    Py_INCREF(x)
    PyTuple_SET_ITEM(out, n, x)
    return out


cdef bint _bnames_in(object tree, object names) except -1:
    # ``any(isinstance(t, str) and t in names for t in tree[1:])`` of a list ``tree``
    cdef Py_ssize_t j
    for j in range(1, len(tree)):
        t = tree[j]
        if isinstance(t, str) and t in names:
            return True
    return False


cdef _bpositions(list out, list nodes, object tree, object scope, object counters, tuple path,
                 int depth):
    # the rule of positions(): appends (path, scope, in_loop) in the order the Python generator
    # yielded them, and to ``nodes`` (unless None) the subtree at each of them
    _bdeeper(depth)
    cdef bint counting = True if counters else False
    if not counting or not _brefs(tree, counters, depth):  # (no counter: nothing to look for)
        out.append(_acyclic((path, scope, counting)))
        if nodes is not None:
            nodes.append(tree)
    if not isinstance(tree, list) or not tree:
        return
    head = tree[0]
    cdef Py_ssize_t i, j, n = len(tree)
    if isinstance(head, str) and head not in _BREED_SPECIAL:  # (a call: most positions)
        if counting and _bnames_in(tree, counters):
            return
        for j in range(1, n):
            _bpositions(out, nodes, tree[j], scope, counters, _bpath(path, j), depth + 1)
    elif head in ("let", "let*") and n >= 3 and isinstance(tree[1], list):
        inner = set(scope)
        for i, b in enumerate(tree[1]):
            if isinstance(b, list) and len(b) == 2:
                _bpositions(out, nodes, b[1], frozenset(inner) if head == "let*" else scope,
                            counters, path + (1, i, 1), depth + 1)
                inner.add(b[0])
        for j in range(2, n):
            _bpositions(out, nodes, tree[j], frozenset(inner), counters, _bpath(path, j),
                        depth + 1)
    elif head == "loop" and n >= 3 and isinstance(tree[1], list):
        state, ctr = set(scope), set(counters)
        for i, b in enumerate(tree[1]):
            if isinstance(b, list) and len(b) == 2:
                if isinstance(b[1], int) and b[1] is not True and b[1] is not False:
                    ctr.add(b[0])
                else:
                    _bpositions(out, nodes, b[1], scope, counters, path + (1, i, 1), depth + 1)
                state.add(b[0])
        state -= ctr
        for j in range(2, n):
            _bpositions(out, nodes, tree[j], frozenset(state), frozenset(ctr), _bpath(path, j),
                        depth + 1)
    elif head in ("if", "recur"):
        for j in range(1, n):
            _bpositions(out, nodes, tree[j], scope, counters, _bpath(path, j), depth + 1)


def breed_positions(tree, scope=frozenset(), counters=frozenset(), path=()):
    """[(path, scope, in_loop), ...]: every expression position a genetic operator may rewrite,
    depth first (grammar.positions)."""
    out = []
    _bpositions(out, None, tree, scope, counters, tuple(path), 0)
    return out


cdef inline Py_ssize_t _bindex(object t, object ix) except? -2:
    # ``ix`` as an index in range of list ``t``, read directly; -1 for any other (``t`` no list,
    # ``ix`` no int or out of range: Python indexes them)
    cdef int overflow = 0
    if type(t) is not list or type(ix) is not int:
        return -1
    cdef long i = PyLong_AsLongAndOverflow(ix, &overflow)  # (no exception: no try a level)
    return i if overflow == 0 and 0 <= i < PyList_GET_SIZE(t) else -1


cdef object _bget_at(object tree, object path):
    # (the operators' paths, tuples of indices in range of lists, read directly: indexing a list
    # by a Python int was a call a level)
    cdef Py_ssize_t k, i
    if type(path) is not tuple:
        for ix in path:
            tree = tree[ix]
        return tree
    for k in range(PyTuple_GET_SIZE(path)):
        ix = <object>PyTuple_GET_ITEM(path, k)
        i = _bindex(tree, ix)
        tree = <object>PyList_GET_ITEM(tree, i) if i >= 0 else tree[ix]
    return tree


cdef object _breplace_at(object tree, object path, object new):
    # a copy of the lists on ``path`` (top down, as the Python recursion made them), the rest shared
    cdef Py_ssize_t k, n = len(path), i = 0, at = 0
    if n == 0:
        return new
    cdef list top = None, above = None, copy
    cdef object t = tree
    if type(path) is tuple:  # (the operators' paths: lists and indices in range, read directly)
        for k in range(n):
            i = _bindex(t, <object>PyTuple_GET_ITEM(path, k))
            if i < 0:
                break
            copy = PyList_GetSlice(t, 0, PyList_GET_SIZE(t))
            if above is None:
                top = copy
            else:
                above[at] = copy
            above, at = copy, i
            t = <object>PyList_GET_ITEM(t, i)
        else:
            above[at] = new
            return top
    cdef list copies = []  # (any other path or tree: as Python indexes them)
    for k in range(n):
        copies.append(list(tree))
        tree = tree[path[k]]
    copies[n - 1][path[n - 1]] = new
    for k in range(n - 2, -1, -1):
        copies[k][path[k]] = copies[k + 1]
    return copies[0]


def breed_get_at(tree, path):
    """The subtree at ``path``."""
    return _bget_at(tree, path)


def breed_replace_at(tree, path, new):
    """A copy of ``tree`` with the subtree at ``path`` replaced by ``new`` (the lists off the path
    shared)."""
    return _breplace_at(tree, path, new)


cdef class Sites:
    """A tree's rewrite positions (``positions``) and its literal and operator positions, listed
    once: a parent in the search is mutated many times. The tree must not change afterwards."""

    cdef readonly object tree
    cdef readonly list spots
    cdef list nodes  # the subtree at each spot: spots[k]'s is nodes[k] (no path walked)
    cdef Py_ssize_t _n_atoms
    cdef list _numbers  # (these four: the indices in ``spots`` of the positions they list)
    cdef list _inner
    cdef dict _operators
    cdef dict _names

    def __init__(self, tree):
        self.tree = tree
        self.spots = []
        self.nodes = []
        _bpositions(self.spots, self.nodes, tree, _NO_NAMES, _NO_NAMES, (), 0)  # (positions)
        self._n_atoms = -1
        self._numbers = None
        self._inner = None
        self._operators = {}
        self._names = {}

    def size(self):
        """``size(tree)``."""
        return self._size()

    cdef Py_ssize_t _size(self) except -1:
        if self._n_atoms < 0:
            self._n_atoms = _bsize(self.tree, 0)
        return self._n_atoms

    cdef list _spots_at(self, list ks):
        return [self.spots[k] for k in ks]

    def numbers(self):
        """The positions that hold a numeric literal."""
        return self._spots_at(self.numbers_at())

    cdef list numbers_at(self):
        if self._numbers is None:
            self._numbers = [k for k in range(len(self.nodes)) if _bis_number(self.nodes[k])]
        return self._numbers

    cdef list inner_at(self):
        # the positions below the root (hoist's)
        if self._inner is None:
            self._inner = [k for k in range(len(self.spots))
                           if len((<tuple>self.spots[k])[0]) > 0]
        return self._inner

    def names(self, names):
        """The positions that hold one of ``names`` (a frozenset of atoms)."""
        return self._spots_at(self.names_at(names))

    cdef list names_at(self, object names):
        out = self._names.get(names)
        if out is None:
            out = self._names[names] = [
                k for k in range(len(self.nodes))
                if isinstance(self.nodes[k], str) and self.nodes[k] in names]
        return out

    def operators(self, ops):
        """The positions that hold a call of one of ``ops`` (a frozenset)."""
        return self._spots_at(self.operators_at(ops))

    @cython.boundscheck(True)
    @cython.wraparound(True)
    cdef list operators_at(self, object ops):
        out = self._operators.get(ops)
        if out is None:
            out = self._operators[ops] = [
                k for k in range(len(self.nodes))
                if isinstance(self.nodes[k], list) and self.nodes[k][0] in ops]
        return out

    cdef object node(self, object tree, Py_ssize_t k):
        # the subtree of ``tree`` at spots[k]: listed, when ``tree`` is this tree
        if tree is self.tree:
            return self.nodes[k]
        return _bget_at(tree, (<tuple>self.spots[k])[0])


cdef Sites _bsites(object tree, object sites):
    if sites is None:
        return Sites(tree)
    if not isinstance(sites, Sites):
        raise TypeError(f"sites are the tree's Sites, not {type(sites).__name__}")
    return <Sites>sites


_CDFS = {}  # tuple(p) -> its normalized cumulative sums (a search has one set of rates)


cdef list _bcdf(object p):
    key = tuple(p)
    cdf = _CDFS.get(key)
    if cdf is None:
        if len(_CDFS) > 64:
            _CDFS.clear()
        # weights as numpy's choice takes them: at least one, each finite and >= 0, not all 0
        # (an empty list read past its end here: a crash, not an error)
        if not key or not all(isinstance(c, Real) and math.isfinite(c) and c >= 0
                              for c in key) or not any(key):
            raise ValueError(f"choice: the weights must be finite numbers >= 0, at least one of "
                             f"them above 0, got {list(key)!r}")
        sums = []
        total = 0
        for i, c in enumerate(key):
            total = c if i == 0 else total + c
            sums.append(total)
        total = sums[len(sums) - 1]
        cdf = _CDFS[key] = [c / total for c in sums]
    return cdf


cdef Py_ssize_t _bbisect(const double* cdf, Py_ssize_t n_cdf, double u,
                         Py_ssize_t n_items) except -1:
    # bisect_right(cdf[:n_cdf], u), step for step (the same index as on the list), checked
    # against the number of items it indexes (Python's IndexError past the end)
    cdef Py_ssize_t lo = 0, hi = n_cdf, mid
    while lo < hi:
        mid = (lo + hi) // 2
        if u < cdf[mid]:
            hi = mid
        else:
            lo = mid + 1
    if lo >= n_items:
        raise IndexError("tuple index out of range")
    return lo


cdef list _kinds_cdf(object rates):
    return _bcdf([rates[k] for k in _KINDS])


def breed_kind_weights(rates):
    """The normalized cumulative weights a mutation's kind is drawn with from ``rates`` (kind ->
    weight, for every kind of BREED_KINDS: KeyError for one without), or ValueError unless each
    weight is finite and >= 0 and not all are 0 (numpy's rule for ``choice``'s p)."""
    return list(_kinds_cdf(rates))


def breed_choice(rng, items, p):
    """``rng.choice(items, p=p)`` for one draw: numpy draws one uniform and takes the first entry
    of the normalized cumulative ``p`` above it, and so does this."""
    cdef Draws d = _bdraws(rng)
    cdef vector[double] cdf = _bcdf(p)
    return items[_bbisect(cdf.data(), cdf.size(), d._random(), len(items))]


cdef class Breeder:
    """The genetic operators over one grammar (its fields read once: a Grammar is a value, and
    ``breeder(g)`` keeps one Breeder per ``repr(g)``). Every operator takes the rng, a Draws or a
    numpy Generator, and draws from it exactly as grammar.py's Python operators did."""

    cdef readonly object grammar
    cdef tuple inputs, params, unary, binary, constants
    cdef frozenset input_set, op_set
    cdef dict arity  # operator -> (least, most arguments; most None: any)
    cdef bint let, loop, has_div, has_square
    cdef object lo, hi
    cdef long max_depth, max_size
    cdef double kinds_cdf[6]  # (_KINDS's, made at the first mutation: the rates are read as
    cdef bint kinds_ready     # Python read them)
    cdef dict choices  # (operator, length of the call) -> _choices's answer
    cdef readonly Py_ssize_t n_tries  # children bred by ``children``, kept or not (a measure)

    def __init__(self, g):
        self.grammar = g
        self.inputs = tuple(g.inputs)
        self.params = tuple(g.params)
        self.unary = tuple(g.unary)
        self.binary = tuple(g.binary)
        self.constants = tuple(g.constants)
        self.input_set = frozenset(self.inputs)
        self.op_set = frozenset(self.unary) | frozenset(self.binary)
        self.arity = {p["name"]: p["arity"] for p in primitives() if p["name"] in self.op_set}
        self.let = g.let
        self.loop = g.loop
        self.has_div = "/" in self.binary
        self.has_square = "square" in self.unary
        self.lo, self.hi = g.loop_steps if self.loop else (0, 0)
        for kind in ("max_depth", "max_size"):
            v = getattr(g, kind)
            if v is True or v is False or not isinstance(v, int):
                raise TypeError(f"{kind} must be a whole number, got {v!r}")
        self.max_depth = g.max_depth
        self.max_size = g.max_size
        self.kinds_ready = False
        self.choices = {}

    # -- terminals --

    cdef object _constant(self, Draws d):
        if d._random() < 0.5:
            return float(self.constants[d._below(len(self.constants))])
        return python_round(uniform(d.bg, -3.0, 3.0), 2)

    cdef object _leaf(self, Draws d, object scope):
        cdef double r = d._random()
        if r < 0.5:
            return self.params[d._below(len(self.params))]
        if r < 0.88:
            if not scope:
                return self.inputs[d._below(len(self.inputs))]
            names = list(self.inputs) + sorted(scope)
            return names[d._below(len(names))]
        return self._constant(d)

    # -- grow --

    cdef object _grow(self, Draws d, long depth, object scope, bint in_loop, int level):
        cdef double r
        _bdeeper(level)
        if depth <= 0 or d._random() < 0.25:
            return self._leaf(d, scope)
        r = d._random()
        if self.loop and not in_loop and depth >= 3 and r < 0.1:
            n = int(d.integers(self.lo, self.hi + 1))
            init = self._grow(d, depth - 2, scope, True, level + 1)
            update = self._grow(d, depth - 1, scope | _S, True, level + 1)
            if not _brefs(update, _S, 0):
                update = ["+", "s", update] if d._random() < 0.5 else ["*", "s", update]
            return ["loop", [["s", init], ["k", 0]], ["if", ["=", "k", n], "s",
                                                      ["recur", update, ["+", "k", 1]]]]
        if self.let and depth >= 2 and r < 0.17:
            var = f"u{len(scope)}"
            value = self._grow(d, depth - 1, scope, in_loop, level + 1)
            body = self._grow(d, depth - 1, scope | {var}, in_loop, level + 1)
            return ["let", [[var, value]], body]
        if r < 0.45:
            op = self.unary[d._below(len(self.unary))]
            return [op, self._grow(d, depth - 1, scope, in_loop, level + 1)]
        op = self.binary[d._below(len(self.binary))]
        left = self._grow(d, depth - 1, scope, in_loop, level + 1)
        right = self._grow(d, depth - 1, scope, in_loop, level + 1)
        return [op, left, right]

    def grow(self, rng, depth=None, scope=frozenset(), in_loop=False):
        """A random expression of at most ``depth`` levels over the grammar."""
        cdef long dp = self.max_depth if depth is None else depth
        return self._grow(_bdraws(rng), dp, scope, in_loop, 0)

    # -- shifts --

    cdef object _shift_inputs(self, object t, int depth):
        if isinstance(t, list):
            _bdeeper(depth)
            return [self._shift_inputs(x, depth + 1) for x in <list>t]
        if isinstance(t, str) and t in self.input_set:
            if not self.params:
                raise IndexError("tuple index out of range")
            return ["+", self.params[0], t]
        return t

    def shift_inputs(self, t):
        """``t`` with every input x in it written (+ p x), p the first parameter."""
        return self._shift_inputs(t, 0)

    cdef object _shifted(self, Draws d, object x):
        p = self.params[d._below(len(self.params))]
        cdef double r = d._random()
        others = [y for y in self.inputs if y != x]
        if others and r < 0.2:
            y = others[d._below(len(others))]
            return ["/" if self.has_div and d._random() < 0.5 else "*", x, y]
        if r < 0.5:
            return ["+", p, x]
        if r < 0.75 or not self.has_square:
            return ["*", p, x]
        return ["square", ["+", p, x]]

    def shifted(self, rng, x):
        """A parameterized change of the input ``x`` (grammar.shifted)."""
        return self._shifted(_bdraws(rng), x)

    # -- mutate --

    cdef object _mutate(self, Draws d, object tree, Sites sites):
        # (a position drawn as its index k in ``spots``: its subtree is listed by ``sites``)
        cdef list spots = sites.spots, ks
        cdef double r
        cdef Py_ssize_t k
        cdef int kind = self._kind(d)
        if kind == _EXTEND:  # add, multiply or divide in a small new term
            if d._random() < 0.5:
                term = self._grow(d, 1 + d._below(2), _NO_NAMES, False, 0)
            else:
                k = 0 if d._random() < 0.5 else d._below(len(spots))
                part = sites.node(tree, k)
                if (<tuple>spots[k])[1]:
                    part = self._grow(d, 1, _NO_NAMES, False, 0)
                elif d._random() < 0.5:
                    part = self._shift_inputs(part, 0)
                term = [self.unary[d._below(len(self.unary))], part]
            if d._random() < 0.5:
                term = ["*", self.params[d._below(len(self.params))], term]
            r = d._random()
            op = "+" if r < 0.5 else "*" if r < 0.85 or not self.has_div else "/"
            return [op, tree, term]
        if kind == _SHIFT:  # an input becomes a fitted shift or scale of it, or its square
            ks = sites.names_at(self.input_set)
            if ks and d._random() < 0.3:  # every input in one part of the model, shifted
                k = d._below(len(spots))
                return _breplace_at(tree, (<tuple>spots[k])[0],
                                    self._shift_inputs(sites.node(tree, k), 0))
            if ks:
                k = ks[d._below(len(ks))]
                return _breplace_at(tree, (<tuple>spots[k])[0],
                                    self._shifted(d, sites.node(tree, k)))
            kind = _SUBTREE
        if kind == _CONSTANT:
            ks = sites.numbers_at()
            if ks:
                k = ks[d._below(len(ks))]
                c = sites.node(tree, k)
                r = d._random()
                if r < 0.3:
                    new = self.params[d._below(len(self.params))]
                elif r < 0.7:  # (Python's arithmetic and math.exp: the rare path, as it was)
                    new = python_round(c * float(math.exp(0.4 * d.rng.standard_normal())), 4)
                else:
                    new = python_round(c + float(d.rng.normal(0, 0.5)), 4)
                return _breplace_at(tree, (<tuple>spots[k])[0], new)
            kind = _SUBTREE
        if kind == _OPERATOR:
            ks = sites.operators_at(self.op_set)
            if ks:
                k = ks[d._below(len(ks))]
                node = sites.node(tree, k)
                choices = self._choices(node)
                if choices is not None:
                    return _breplace_at(tree, (<tuple>spots[k])[0],
                                        [choices[d._below(len(choices))]] + node[1:])
            kind = _SUBTREE
        if kind == _HOIST:  # replace a node by one of its own subexpressions (simplifies)
            ks = sites.inner_at()
            if ks:
                k = ks[d._below(len(ks))]
                return sites.node(tree, k) if not (<tuple>spots[k])[1] else tree
        spot = spots[d._below(len(spots))]
        path = spot[0]
        cdef long most = max(1, self.max_depth - len(path) // 2)
        return _breplace_at(tree, path, self._grow(d, 1 + d._below(most), spot[1], spot[2],
                                                  0))

    cdef int _kind(self, Draws d) except -1:
        # the kind of a mutation (an index in _KINDS), drawn from the grammar's rates
        cdef list cdf
        if not self.kinds_ready:  # (read at the first mutation, as Python read them)
            cdf = _kinds_cdf(self.grammar.mutation_rates)
            for k in range(len(_KINDS)):
                self.kinds_cdf[k] = cdf[k]
            self.kinds_ready = True
        return _bbisect(self.kinds_cdf, len(_KINDS), d._random(), len(_KINDS))

    cdef object _choices(self, object node):
        # the operators an operator mutation of the call ``node`` draws from (those that take its
        # arguments: (+ a b c) or (- x) becomes no pow), or None when it may not change: by
        # (operator, length), listed once
        key = (node[0], len(node))
        choices = self.choices.get(key, self)
        if choices is not self:
            return choices
        family = self.unary if node[0] in self.unary and len(node) == 2 else self.binary
        choices = [o for o in family if o != node[0] and self._takes(o, len(node) - 1)]
        if not (choices and (len(node) == 2 or node[0] in self.binary)):
            choices = None
        self.choices[key] = choices
        return choices

    cdef bint _takes(self, str op, Py_ssize_t n):
        """Whether the operator ``op`` takes ``n`` arguments."""
        least, most = self.arity.get(op, (0, None))  # (a grammar never checked: as before)
        return least <= n and (most is None or n <= most)

    def mutate(self, rng, tree, sites=None):
        """One random mutation of ``tree`` (grammar.mutate); ``sites``: its Sites, when kept."""
        return self._mutate(_bdraws(rng), tree, _bsites(tree, sites))

    # -- crossover --

    cdef object _crossover(self, Draws d, object a, object b, Sites sites_a, Sites sites_b):
        cdef list spots = sites_a.spots
        cdef list donors = sites_b.spots
        cdef int attempt
        cdef Py_ssize_t i, j
        for attempt in range(8):
            i = d._below(len(spots))
            j = d._below(len(donors))
            spot = spots[i]
            path, scope, in_loop = spot[0], spot[1], spot[2]
            dscope = (<tuple>donors[j])[1]
            piece = sites_b.node(b, j)
            if ((not dscope or _blocals_in(piece, dscope, scope, 0))
                    and not (in_loop and _brefs(piece, _LOOP, 0))):
                # (the child's size: the parent's with one subtree traded for the piece)
                if (sites_a._size() - _bsize(sites_a.node(a, i), 0) + _bsize(piece, 0)
                        <= self.max_size):
                    return _breplace_at(a, path, piece)
        return self._mutate(d, a, sites_a)

    def crossover(self, rng, a, b, sites_a=None, sites_b=None):
        """Insert a random subexpression of ``b`` at a random position of ``a`` where it is in
        scope (grammar.crossover); ``sites_a``, ``sites_b``: the trees' Sites, when kept."""
        cdef Sites sa = _bsites(a, sites_a)
        cdef Sites sb = _bsites(b, sites_b)
        return self._crossover(_bdraws(rng), a, b, sa, sb)

    # -- a round's children --

    cdef Py_ssize_t _pick(self, Draws d, Py_ssize_t n, const double* errors, Py_ssize_t n_front,
                          double front_rate, long tournament) except -1:
        # a share of the parents is drawn uniformly from the front (the first n_front entries):
        # its small members, which lose every tournament on error, keep being extended; the
        # others by tournament (one draw at a time: the same integers as integers(n, size=k);
        # the first of the lowest errors wins, as min() would pick it)
        if n_front and d._random() < front_rate:
            return d._below(n_front)
        cdef Py_ssize_t best = d._below(n), i, k
        for k in range(min(tournament, n) - 1):
            i = d._below(n)
            if errors[i] < errors[best]:
                best = i
        return best

    def pick(self, rng, errors, Py_ssize_t n_front=0, double front_rate=0.25, long tournament=3):
        """The index of one parent drawn as ``children`` draws them, from parents with these
        tournament ``errors`` (the first ``n_front`` of them on the front)."""
        cdef vector[double] errs
        _berrors(errors, n_front, tournament, errs)
        return self._pick(_bdraws(rng), errs.size(), errs.data(), n_front, front_rate,
                          tournament)

    def children(self, rng, Py_ssize_t n, list out not None, dict made not None, seen,
                 Simplifier canonical not None, list parents not None, errors,
                 Py_ssize_t n_front, list seeds not None, admits=None,
                 double fresh=0.1, double crossover=0.3, long tournament=3,
                 double front_rate=0.25, bint hold_parents=False):
        """Breed children until ``out`` holds ``n`` sources (at most 20 n tries): each child is
        grown afresh (``fresh``; three in ten of those mutate a seed, the Sites of ``seeds``,
        when there are seeds), crossed over from two parents (``crossover``) or mutated from
        one; a parent is drawn from ``parents`` (their Sites, and ``errors``, each one's
        tournament error), uniformly among the first ``n_front`` with probability
        ``front_rate``, else by a tournament of ``tournament``. A child is kept when its
        canonical entry (``canonical.entry``: tree, source, size, skeleton) exists, is at most
        the grammar's max_size, is admitted (``admits(tree)``, when given) and its source is
        neither in ``made`` nor in ``seen``: its source is appended to ``out`` and ``made`` maps
        it to the entry. Draws from ``rng`` as the search's Python loop did, draw for draw.
        ``hold_parents``: each parent's tree is held by ``canonical`` (``Simplifier.hold``; again
        after the core's resets) when it is drawn, so that its children's lists off the
        rewritten path are met by identity, not converted: faster, for trees that never change
        afterwards (the search's parents; a held list changed in place would keep its old
        canonical form)."""
        cdef Draws d = _bdraws(rng)
        cdef vector[double] errv
        _berrors(errors, n_front, tournament, errv)
        cdef const double* errs = errv.data()
        cdef Py_ssize_t tries, n_parents = len(parents)
        cdef double r
        cdef Sites a, b
        if <Py_ssize_t>errv.size() != n_parents:
            raise ValueError(f"one error per parent: {n_parents} parents, {errv.size()} errors")
        for tries in range(n * 20):
            if len(out) >= n:
                break
            r = d._random()
            # (a parent is held by the canonical form's Simplifier, again after its resets: its
            # child's lists off the rewritten path are then met by identity, not converted)
            if not n_parents or r < fresh:
                if seeds and d._random() < 0.3:
                    a = <Sites?>seeds[d._below(len(seeds))]
                    if hold_parents:
                        canonical._hold_parent(a.tree)
                    child = self._mutate(d, a.tree, a)
                else:
                    child = self._grow(d, self.max_depth, _NO_NAMES, False, 0)
            elif r < fresh + crossover and n_parents > 1:
                a = <Sites?>parents[self._pick(d, n_parents, errs, n_front, front_rate,
                                                tournament)]
                b = <Sites?>parents[self._pick(d, n_parents, errs, n_front, front_rate,
                                                tournament)]
                if hold_parents:
                    canonical._hold_parent(a.tree)
                    canonical._hold_parent(b.tree)
                child = self._crossover(d, a.tree, b.tree, a, b)
            else:
                a = <Sites?>parents[self._pick(d, n_parents, errs, n_front, front_rate,
                                                tournament)]
                if hold_parents:
                    canonical._hold_parent(a.tree)
                child = self._mutate(d, a.tree, a)
            self.n_tries += 1
            entry = canonical._entry(child, True)
            if type(entry) is _Made:  # (computed now: its tree is made only if it is kept)
                m = <_Made>entry
                if m.size > self.max_size:
                    continue
                if admits is None and (m.src in made or m.src in seen):
                    continue
                entry = canonical._complete(m, child)
                if admits is None and entry is not None and (<tuple>entry)[1] is m.src:
                    src = m.src  # (tested above)
                    out.append(src)
                    made[src] = entry
                    continue
            if entry is None or (<tuple>entry)[2] > self.max_size or (
                    admits is not None and not admits((<tuple>entry)[0])):
                continue
            src = (<tuple>entry)[1]
            if src in made or src in seen:  # (the cheaper test first)
                continue
            out.append(src)
            made[src] = entry
        return out


def breed_parents(list front not None, list population not None, island, dict known not None,
                  make):
    """(their Sites, their tournament errors, how many of them are the front's, the entries
    kept) of a round's parents, for ``Breeder.children``: the records of ``front`` and then of
    ``population`` whose ``proposed`` source is not in ``island``, each through its entry
    (record, Sites, error): ``known``'s for the record's ``id`` (or, without one, its
    address) when it is that record's, else ``make(record)``'s. The entries kept are the next
    round's ``known`` (Mutate._parents: most parents are again; one call a round, not a Python
    loop over its ~70 records)."""
    cdef list sites = [], errors = []
    # (sized for every record at once: not grown four times a round; keyed by the records' own
    # id ints, none made)
    cdef dict kept = _PyDict_NewPresized(len(front) + len(population))
    cdef Py_ssize_t n_front = 0, part
    cdef list records
    cdef tuple entry
    for part in range(2):  # (by part: the front and the population may be one list)
        records = population if part else front
        for r in records:
            if r["proposed"] in island:
                continue
            key = (<dict?>r).get("id")
            if key is None:  # (a record without an id, a caller's own: by its address)
                key = PyLong_FromVoidPtr(<void*>r)
            found = known.get(key)
            if found is None or (<tuple?>found)[0] is not r:
                found = make(r)
            entry = <tuple?>found
            kept[key] = entry
            sites.append(entry[1])
            errors.append(entry[2])
        if part == 0:
            n_front = len(sites)
    return sites, errors, n_front, kept


cdef int _berrors(object errors, Py_ssize_t n_front, long tournament,
                  vector[double]& out) except -1:
    # the parents' tournament errors as C doubles into ``out``, with the selection's settings
    # checked: a list of floats (the search's) read as it is, anything else as numpy reads it
    # (the same doubles; a numpy array and its memoryview cost microseconds a call)
    cdef Py_ssize_t i, n
    cdef double[::1] errs
    cdef bint floats = False
    if type(errors) is list:
        n = PyList_GET_SIZE(errors)
        out.resize(n)
        floats = True
        for i in range(n):
            x = <object>PyList_GET_ITEM(errors, i)
            if type(x) is not float:
                floats = False
                break
            out[i] = PyFloat_AS_DOUBLE(x)
    if not floats:
        errs = np.ascontiguousarray(errors, dtype=np.float64).reshape(-1)
        out.resize(errs.shape[0])
        for i in range(errs.shape[0]):
            out[i] = errs[i]
    if not 0 <= n_front <= <Py_ssize_t>out.size():
        raise ValueError(f"n_front is 0 to the number of parents ({out.size()}), got {n_front}")
    if tournament < 1:
        raise ValueError(f"tournament must be at least 1 (got {tournament})")
    return 0


_BREEDERS = {}  # repr(grammar) -> its Breeder, for the whole process (a few grammars a search)


def breeder(g):
    """The process's Breeder of grammar ``g``: one per ``repr(g)`` (a grammar changed in place
    is another value), the same operators whichever thread or process asks. The search asks
    once a round."""
    key = repr(g)
    out = _BREEDERS.get(key)
    if out is None:
        if len(_BREEDERS) >= 16:
            _BREEDERS.clear()
        out = _BREEDERS[key] = Breeder(g)
    return out
