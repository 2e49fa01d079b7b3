"""Simplification and canonical form of candidate trees, applied before any calibration.

``canonicalize`` folds constants, collapses every parameter-only subtree into one parameter,
turns numeric literals into fitted parameters, removes identities (x-x, x/x, x*1, x+0, u^1,
u^0 = 1, nested negations and inverses, log(exp u)), flattens and orders + and *, keeps one free scale per
product and one constant per sum (wherever it sits: a ratio, a scaled sum, a difference, a
function it can stand outside of, exp(c + u) = c' exp(u)), and names parameters by order of
occurrence (one parameter per occurrence when the task has names enough), so two proposals that
are the same model up to reparametrization print the same and are calibrated once. No rewrite
makes a tree larger. Special forms (let, loop) keep their structure; loop counters and their
literals are never touched.

The rules run in the core (ndvm/_core/simplify.cpp); this module is their Python face.
tests/simplify_golden.py wrote, from the Python rules they replaced, the golden file the core
reproduces.
"""
from ndvm._core._core import Simplifier as _CoreSimplifier
from ndvm._core._core import simplify_arithmetic_heads
from ndvm.cosearch.sexpr import to_source

__all__ = ["simplify", "canonicalize", "canonical_source", "Simplifier", "is_param_only",
           "TooManyParameters", "PARAM_MARK"]


class TooManyParameters(ValueError):
    """The simplified model has more distinct constants than the task has parameter names."""


_ARITH = simplify_arithmetic_heads()  # the heads the rules fold and rewrite (the core's list)
# The core's numeric primitives (ndvm._core.primitives()) that are not in _ARITH: a subtree under
# one of them is never folded nor collapsed into a parameter (tests/test_primitives.py checks that
# the two sets cover the core's list).
UNFOLDED = frozenset({
    "floor", "ceiling", "round", "truncate", "modulo", "remainder",  # piecewise constant: one
    # fitted parameter in place of (floor a) would be another model (a real, not an integer)
    "min", "max",                 # kept as written
    "=", "<", ">", "<=", ">=",    # booleans, not numbers
})
PARAM_MARK = "?"  # a parameter still to be named by canonicalize (an atom no program can contain)


def _num(a):
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def is_param_only(tree, params):
    """True when the tree has no input or local variable: it is one number once fitted."""
    if isinstance(tree, list):
        return (bool(tree) and isinstance(tree[0], str) and tree[0] in _ARITH
                and all(is_param_only(t, params) for t in tree[1:]))
    return _num(tree) or tree == PARAM_MARK or (isinstance(tree, str) and tree in params)


class Simplifier:
    """``simplify`` and ``canonicalize`` for one set of parameter names, memoized per subtree
    content in the core: a genetic operator's child shares every subtree off one path with its
    parent, and small subexpressions recur across the whole search, so a child costs about the
    nodes whose content is new. Trees handed to a long-lived Simplifier must never be changed in
    place (the search's trees never are: every operator copies). The module's functions use a
    fresh one per call. Methods (the core's, bound here so a call costs no Python frame):

    canonical_form(tree, skeleton=False): (tree, source, size) of the canonical simplified tree
        (see the module function ``canonicalize``), then its skeleton when ``skeleton``; raises
        TooManyParameters as it does.
    simplify(tree): an equivalent (up to fitted constants) and never larger tree.
    source(t), size(t), skeleton(t): ``sexpr.to_source``, ``sexpr.size`` and ``sexpr.skeleton``
        (parameters written P, numbers C), memoized per subtree content.
    facts(t): a number that names list ``t``'s content for the Simplifier's life (a cache key).
    entry(tree): (tree, source, size, skeleton) of the canonical form, None when it needs too
        many parameters, kept per content; a tree outside the forms raises, or gives what
        ``core.fallback(tree)`` gives when the owner set one.
    hold(tree): keep the tree's lists, to be met again by identity in later trees (their
        children's): for trees that are never changed; a bounded number.
    """

    def __init__(self, params):
        self.names = list(params)
        self.P = frozenset(params)
        core = _CoreSimplifier(self.names, TooManyParameters)
        self.canonical_form = core.canonical_form
        self.simplify = core.simplify
        self.source = core.source
        self.size = core.size
        self.skeleton = core.skeleton
        self.facts = core.content
        self.hold = core.hold
        self.entry = core.entry
        self.core = core  # (the core's Simplifier, which native callers take)

    def canonicalize(self, tree):
        """The canonical simplified tree (see the module function ``canonicalize``)."""
        return self.canonical_form(tree)[0]

    def __reduce__(self):  # (a copy starts with an empty memo)
        return Simplifier, (tuple(self.names),)


def simplify(tree, params):
    """An equivalent (up to fitted constants) and never larger tree; see the module docstring."""
    return Simplifier(params).simplify(tree)


def canonicalize(tree, params):
    """The canonical simplified tree of a candidate, its parameters drawn from ``params``.

    Parameters are renamed in order of occurrence, one per occurrence when ``params`` has names
    enough (a model never loses freedom by it); otherwise literals stay literal and parameters
    keep their sharing; raises TooManyParameters when even that needs more names.
    """
    return Simplifier(params).canonicalize(tree)


def canonical_source(tree, params):
    """Source of the canonical form (the key that detects duplicate models)."""
    return to_source(canonicalize(tree, params))
