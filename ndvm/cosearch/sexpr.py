"""Programs as trees for the search: nested lists of symbols (str) and numbers, read by ndvm.read.

A tree prints back to source that reads to the same tree. Size is the number of atoms; the
skeleton replaces parameters by ``P`` and numeric literals by ``C`` (the candidate files' format).
"""
import math
import sys

from ndvm._core import read

__all__ = ["to_tree", "to_source", "size", "skeleton", "skeleton_atom", "canonical", "atoms",
           "substitute",
           "SPECIAL_FORMS"]

SPECIAL_FORMS = frozenset("quote if cond case and or when unless begin let let* letrec letrec* "
                          "lambda define loop recur else".split())


def to_tree(src, name="<program>"):
    """The last expression of ``src`` (a program of one expression) as a tree of lists; a
    ReadError names ``name`` as the text's file."""
    data = read(src, name)
    if len(data) != 1:
        raise ValueError("a candidate must be exactly one expression")
    try:
        return _plain(data[0])
    except RecursionError:  # (the reader takes 10,000 levels; the search's Python trees fewer)
        raise ValueError(f"{name}: the program is nested too deeply for the search (its trees "
                         f"are Python lists: about {sys.getrecursionlimit() // 2} levels at "
                         f"most)") from None


def _plain(d):
    if isinstance(d, list):
        return [_plain(x) for x in d]
    if isinstance(d, str):
        return str(d)
    return d


def _atom(a):
    if type(a) is str:  # the common case first: a symbol
        return a
    if isinstance(a, bool):
        return "#t" if a else "#f"
    if isinstance(a, int):
        return str(a)
    if isinstance(a, float):
        if not math.isfinite(a):
            raise ValueError(f"cannot write the literal {a!r}")
        text = repr(a)
        return text if any(ch in text for ch in ".e") else text + ".0"
    return str(a)


def to_source(tree):
    """Source text of a tree, on one line."""
    if isinstance(tree, list):
        return "(" + " ".join([to_source(t) for t in tree]) + ")"
    return _atom(tree)


def substitute(tree, table):
    """The tree with each atom that ``table`` names replaced by its value (a copy)."""
    if isinstance(tree, list):
        return [substitute(t, table) for t in tree]
    return table.get(tree, tree) if isinstance(tree, str) else tree


def atoms(tree):
    """Every atom of the tree, depth first."""
    if isinstance(tree, list):
        for t in tree:
            yield from atoms(t)
    else:
        yield tree


def size(tree):
    """Program size: the number of atoms (symbols and literals)."""
    if isinstance(tree, list):
        return sum([size(t) for t in tree])
    return 1


def _is_number(a):
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def skeleton(tree, params):
    """The tree's source with parameters written ``P`` and numeric literals ``C``."""
    return _skeleton(tree, frozenset(params))


# (module-level recursions: a recursive closure is a reference cycle, garbage for the collector
# after every call)
def _skeleton(t, params):
    if isinstance(t, list):
        return "(" + " ".join([_skeleton(x, params) for x in t]) + ")"
    return skeleton_atom(t, params)


def skeleton_atom(a, params):
    """An atom as the skeleton writes it: ``C`` for a number, ``P`` for a parameter, else as
    source (simplify.Simplifier.skeleton, memoized per subtree, writes atoms by this too)."""
    if _is_number(a):
        return "C"
    if isinstance(a, str) and a in params:
        return "P"
    return _atom(a)


def canonical(tree, params):
    """The tree with parameters renamed in order of first occurrence (a, b, c, ... order kept).

    Two candidates that differ only by which parameter names they use calibrate identically.
    """
    order = sorted(params)
    seen = []
    for a in atoms(tree):
        if isinstance(a, str) and a in params and a not in seen:
            seen.append(a)
    return _renamed(tree, {old: order[i] for i, old in enumerate(seen)})


def _renamed(t, mapping):
    if isinstance(t, list):
        return [_renamed(x, mapping) for x in t]
    if isinstance(t, str) and t in mapping:
        return mapping[t]
    return t
