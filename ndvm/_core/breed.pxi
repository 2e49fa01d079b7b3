# The genetic operators of the search (included by _core.pyx; ndvm.cosearch.grammar is their Python
# face): grow, mutate, crossover, shifted and the rewrite positions of a tree, and a round's
# children bred, checked and deduplicated in one call (Breeder.children). A parent is a tree of
# nested Python lists (its Sites: what the operators test is read of it); a child is built as the
# core Simplifier's Nodes (simplify.pxi), of its parent's Nodes off the rewritten path, with the
# draws of a Draws object (draws.pxi) in the order the Python operators drew them, so a seed breeds
# the same children draw for draw (tests/test_breed.py replays the golden file
# tests/breed_golden.py wrote from the Python operators). The public operators convert at their
# boundary: their child shares every list off the rewritten path with its parent.
cimport cython
from cpython.long cimport PyLong_AsLongAndOverflow
from cpython.ref cimport Py_INCREF
from cpython.set cimport PySet_GET_SIZE
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_GET_LENGTH

import math
from numbers import Real


cdef extern from "breed.hpp" namespace "ndvm::breed" nogil:
    double python_round(double x, int ndigits)


# A tree nested deeper than this (or a grow deeper than this) is refused with a RecursionError.
BREED_MAX_DEPTH = 1000
cdef int _BREED_MAX_DEPTH = BREED_MAX_DEPTH
_BREED_SPECIAL = frozenset("quote if cond case and or when unless begin let let* letrec letrec* "
                           "lambda define loop recur else".split())
cdef frozenset _BSPECIAL = _BREED_SPECIAL  # (read as a C variable: no module look up)
# (a name shorter than every special form's is none of them: _bspecial's shortcut, from the set)
cdef Py_ssize_t _BSPECIAL_SHORTEST = min(len(name) for name in _BREED_SPECIAL)
_KINDS = ("subtree", "constant", "operator", "hoist", "extend", "shift")
BREED_KINDS = _KINDS  # the kinds of mutation, in the order their rates are drawn
_S = frozenset({"s"})
_NO_NAMES = frozenset()
_LOOP = frozenset({"loop"})
# the kinds of mutation as C constants, their indices in _KINDS
cdef enum:
    _SUBTREE, _CONSTANT, _OPERATOR, _HOIST, _EXTEND, _SHIFT
# the grammar's groups of names (Breeder._name)
cdef enum:
    _PARAMS, _INPUTS, _UNARY, _BINARY


def breed_round(double x, int ndigits):
    """Python's ``round(x, ndigits)`` of a float, as the operators compute it (breed.hpp)."""
    if not 0 <= ndigits <= 17:
        raise ValueError("ndigits: 0 to 17")
    return python_round(x, ndigits)


cdef inline int _bdeeper(int depth) except -1:
    # the operators' guard a list level down: RecursionError past BREED_MAX_DEPTH levels or
    # near the native stack's end (datum.pxi's guard); inlined, the raising out of line
    if depth >= _BREED_MAX_DEPTH or native_stack_exhausted():
        _btoo_deep(depth)
    return 0


cdef int _btoo_deep(int depth) except -1:
    if depth >= _BREED_MAX_DEPTH:
        raise RecursionError(f"the tree is nested more than {_BREED_MAX_DEPTH} levels deep")
    raise RecursionError(_STACK_EXHAUSTED)


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


cdef bint _bnames_in(object tree, object names) except -1:
    # ``any(isinstance(t, str) and t in names for t in tree[1:])`` of a list ``tree``
    cdef Py_ssize_t j
    for j in range(1, len(tree)):
        t = tree[j]
        if isinstance(t, str) and t in names:
            return True
    return False


cdef inline bint _bspecial(object head) except -1:
    # whether the str ``head`` is a special form's name: a name shorter than every special
    # form's (the arithmetic operators, most calls' heads) is none of them, not looked up
    if type(head) is str and PyUnicode_GET_LENGTH(head) < _BSPECIAL_SHORTEST:
        return False
    return head in _BSPECIAL


cdef int _bpositions(Sites out, object tree, object scope, object counters, bint counting,
                     vector[Py_ssize_t]& path, int depth) except -1:
    # the rule of positions(): adds to ``out`` each position (its path, the indices from the
    # root, is ``path`` as it is here; scope, in_loop) in the order the Python generator
    # yielded them, with the subtree at it; ``counting``: whether ``counters`` is not empty
    # (no counter: nothing to look for)
    if not counting or not _brefs(tree, counters, depth):
        out._add(tree, scope, counting, path.data(), path.size())
    cdef Py_ssize_t i, j, n
    # (an atom, most positions, has none below it: no guard; a list's items read in place, a
    # subclass's as it indexes them)
    if type(tree) is list:
        n = PyList_GET_SIZE(tree)
        if n == 0:
            return 0
        _bdeeper(depth)
        head = <object>PyList_GET_ITEM(tree, 0)
    elif isinstance(tree, list) and tree:
        _bdeeper(depth)
        head = tree[0]
        n = len(tree)
    else:
        return 0
    if isinstance(head, str) and not _bspecial(head):  # (a call: most positions)
        if counting and _bnames_in(tree, counters):
            return 0
        path.push_back(0)
        for j in range(1, n):
            x = <object>PyList_GET_ITEM(tree, j) if type(tree) is list else tree[j]
            path[path.size() - 1] = j
            if isinstance(x, list):
                _bpositions(out, x, scope, counters, counting, path, depth + 1)
            elif not counting or not (isinstance(x, str) and x in counters):
                # (an atom, most items: its one position)
                out._add(x, scope, counting, path.data(), path.size())
        path.pop_back()
    elif head in ("let", "let*") and n >= 3 and isinstance(tree[1], list):
        inner = set(scope)
        for i, b in enumerate(tree[1]):
            if isinstance(b, list) and len(b) == 2:
                _bpositions_in(out, b[1], frozenset(inner) if head == "let*" else scope,
                               counters, counting, path, i, depth + 1)
                inner.add(b[0])
        for j in range(2, n):
            path.push_back(j)
            _bpositions(out, tree[j], frozenset(inner), counters, counting, path, depth + 1)
            path.pop_back()
    elif head == "loop" and n >= 3 and isinstance(tree[1], list):
        state, ctr = set(scope), set(counters)
        for i, b in enumerate(tree[1]):
            if isinstance(b, list) and len(b) == 2:
                if isinstance(b[1], int) and b[1] is not True and b[1] is not False:
                    ctr.add(b[0])
                else:
                    _bpositions_in(out, b[1], scope, counters, counting, path, i, depth + 1)
                state.add(b[0])
        state -= ctr
        for j in range(2, n):
            path.push_back(j)
            _bpositions(out, tree[j], frozenset(state), frozenset(ctr), len(ctr) > 0, path,
                        depth + 1)
            path.pop_back()
    elif head in ("if", "recur"):
        for j in range(1, n):
            path.push_back(j)
            _bpositions(out, tree[j], scope, counters, counting, path, depth + 1)
            path.pop_back()
    return 0


cdef int _bpositions_in(Sites out, object tree, object scope, object counters, bint counting,
                        vector[Py_ssize_t]& path, Py_ssize_t i, int depth) except -1:
    # the positions of a binding's value: its path is path + (1, i, 1)
    path.push_back(1)
    path.push_back(i)
    path.push_back(1)
    _bpositions(out, tree, scope, counters, counting, path, depth)
    path.resize(path.size() - 3)
    return 0


def breed_positions(tree, scope=frozenset(), counters=frozenset(), path=()):
    """[(path, scope, in_loop), ...]: every expression position a genetic operator may rewrite,
    depth first (grammar.positions)."""
    cdef Sites out = Sites.__new__(Sites)
    out._list(tree, scope, counters, path)
    return out._spot_list()


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


@cython.final
cdef class _Form:
    """A tree's Node form in one Simplifier (its ``uid``, valid while its n_resets is
    ``resets``): the root's Node and, found when first asked, the Node at each of the tree's
    rewrite positions (``spots``, the Sites' list). The operators build a child of these Nodes:
    what it shares with its parent is its parent's Nodes, not copied or converted."""

    cdef SNode* root
    cdef vector[SNode*] at  # spot k's Node, NULL until asked
    cdef Py_ssize_t uid, resets

    cdef SNode* spot(self, Sites sites, Py_ssize_t k) except NULL:
        # (``sites``: the tree's, whose positions these are)
        cdef SNode* n = self.at[k]
        if n != NULL:
            return n
        n = _nat(self.root, sites.path_of(k), sites.path_len(k), NULL)
        self.at[k] = n
        return n


cdef _Form _bform(Simplifier s, SNode* root, Sites sites):
    cdef _Form f = _Form.__new__(_Form)
    f.root = root
    f.at.assign(sites.n_spots(), NULL)
    f.uid = s.uid
    f.resets = s.n_resets
    return f


cdef SNode* _nat(SNode* t, const Py_ssize_t* path, Py_ssize_t n, SNode** above) except NULL:
    # the Node at ``path`` (``n`` indices) below ``t``; ``above``, unless NULL, gets the lists
    # on the way (t first: room for n of them)
    cdef Py_ssize_t k, i
    for k in range(n):
        i = path[k]
        if node_kind(t) != 4 or not 0 <= i < <Py_ssize_t>t.items.size():
            raise IndexError(f"no position {[path[j] for j in range(n)]!r} in the tree")
        if above != NULL:
            above[k] = t
        t = t.items[i]
    return t


cdef SNode* _nreplace(Simplifier s, SNode* tree, Sites sites, Py_ssize_t spot,
                      SNode* new) except NULL:
    # ``_breplace_at`` of Nodes at the position ``spot`` of ``sites`` (the tree's): a new list
    # for each list on its path (bottom up), the rest the tree's own Nodes
    cdef const Py_ssize_t* path = sites.path_of(spot)
    cdef Py_ssize_t n = sites.path_len(spot), k, j, m
    cdef SNode* few_above[32]  # (a child's path and lists are short: no vector allocated)
    cdef SNode* few_items[8]
    cdef vector[SNode*] more_above, more_items
    cdef SNode** above = few_above
    cdef SNode** items
    if n > 32:
        more_above.resize(n)
        above = more_above.data()
    _nat(tree, path, n, above)
    cdef SNode* t
    for k in range(n - 1, -1, -1):
        t = above[k]
        m = t.items.size()
        items = few_items
        if m > 8:
            more_items.resize(m)
            items = more_items.data()
        for j in range(m):
            items[j] = t.items[j]
        items[path[k]] = new
        new = s.c.list(items, m)
    return new


cdef inline SNode* _nlist2(Simplifier s, SNode* a, SNode* b) except NULL:
    cdef SNode* items[2]
    items[0], items[1] = a, b
    return s.c.list(items, 2)


cdef inline SNode* _nlist3(Simplifier s, SNode* a, SNode* b, SNode* c) except NULL:
    cdef SNode* items[3]
    items[0], items[1], items[2] = a, b, c
    return s.c.list(items, 3)


cdef bint _nrefs(SNode* t, SNode* name, int depth) except -1:
    # does the Node tree mention the symbol whose Node is ``name``? (one Node per name)
    cdef size_t j
    if node_kind(t) == 4:
        _bdeeper(depth)
        for j in range(t.items.size()):
            if _nrefs(t.items[j], name, depth + 1):
                return True
        return False
    return t == name


ctypedef unordered_map[uintptr_t, PyObject*] _Back  # a Node -> the Python object it is


cdef SNode* _bnode(Simplifier s, object tree, _Back* back) except NULL:
    # ``tree``'s Node in ``s`` (the public operators'), each of its Nodes noted in ``back`` with
    # the object it is: a child made of them shares the tree's own lists and atoms. An atom the
    # core does not take (an object, an integer past 64 bits) is a symbol of its own, a name no
    # program has: the operators pass such atoms through, as the Python operators did.
    cdef SNode* n
    s.busy += 1
    try:
        n = _bconvert(s, tree, back, 0)
    finally:
        s.busy -= 1
    return n


cdef SNode* _bconvert(Simplifier s, object t, _Back* back, int depth) except NULL:
    cdef vector[SNode*] items
    cdef SNode* n
    if isinstance(t, list):
        _bdeeper(depth)
        for x in t:
            items.push_back(_bconvert(s, x, back, depth + 1))
        n = s.c.list(items.data(), items.size())
    else:
        try:
            n = s._convert(t, 0, NULL)  # (an atom: no recursion)
        except (TypeError, OverflowError):
            n = s.c.sym(f"\0{id(t)}".encode("utf-8"))
    deref(back)[<uintptr_t>n] = <PyObject*>t
    return n


cdef object _bpython(Simplifier s, SNode* n, _Back* back, char* limit):
    # the Python tree of a child made by the public operators: the Nodes ``back`` notes are the
    # objects they are (a child shares its parent's lists off the rewritten path), the others
    # new (lists tracked by the collector: the caller's to change)
    cdef size_t j, m
    cdef _Back.iterator found = back.find(<uintptr_t>n)
    if found != back.end():
        return <object>deref(found).second
    if node_kind(n) != 4:
        return s._tree(n, limit)
    if _below_limit(limit):
        raise RecursionError(_STACK_EXHAUSTED)
    m = n.items.size()
    out = PyList_New(m)
    for j in range(m):
        x = _bpython(s, n.items[j], back, limit)
        Py_INCREF(x)
        PyList_SET_ITEM(out, j, x)
    return out


ctypedef struct _Spot:  # a position of a Sites
    Py_ssize_t scope  # its scope is scope_objs[scope] (most share their neighbour's object)
    bint in_loop  # whether it is in a loop's body
    Py_ssize_t path_at, path_len  # its path: paths[path_at:path_at + path_len]


cdef class Sites:
    """A tree's rewrite positions (``positions``) and its literal and operator positions, listed
    once: a parent in the search is mutated many times. The tree must not change afterwards.
    The positions are kept as C arrays (the operators read a drawn one's path and scope there);
    ``spots``, their (path, scope, in_loop) tuples, is made when first asked: a parent is
    listed whole and only a few of its positions are ever drawn."""

    cdef readonly object tree
    cdef list nodes  # the subtree at each spot: spot k's is nodes[k] (no path walked)
    cdef list scope_objs  # ... its scope (the names bound there) is scope_objs[at[k].scope]
    cdef vector[_Spot] at  # ... its scope, whether in a loop, where its path is in ``paths``
    cdef vector[Py_ssize_t] paths
    cdef list _spots  # (the tuples, once made)
    cdef Py_ssize_t _n_atoms
    cdef vector[Py_ssize_t] sizes  # the size of the subtree at each spot, -1 until asked
    cdef list _numbers  # (these four: the indices in ``spots`` of the positions they list)
    cdef list _inner
    cdef dict _operators
    cdef dict _names
    cdef _Form form  # its Node form in the last Simplifier that bred from it (``_form_in``)

    def __init__(self, tree, entry=None):
        """``entry``: the tree's canonical entry as Breeder.children kept it (a child that
        becomes a parent): while the Node its tree was made of is valid, that Node is the
        tree's Node form in its Simplifier, not converted again from the tree (nor held: no
        later tree shares its lists, its children being bred of its Nodes)."""
        self._init(tree, entry)

    cdef int _init(self, object tree, object entry) except -1:
        # (__init__'s work; ParentEntries makes a parent's Sites by it, without a Python call)
        self._list(tree, _NO_NAMES, _NO_NAMES, ())
        cdef _Made m
        cdef Simplifier owner
        if type(entry) is _Made:
            m = <_Made>entry
            owner = m.owner()
            if (owner is not None and owner.n_resets == m.resets and m.tree is tree
                    and m.node != NULL):  # (its tree made of that Node)
                self.form = _bform(owner, m.node, self)
        return 0

    cdef int _list(self, object tree, object scope, object counters, object prefix) except -1:
        # lists the positions of ``tree`` (positions' rule, from ``scope`` and ``counters``),
        # their paths after the indices ``prefix``
        cdef vector[Py_ssize_t] path
        path.reserve(16)
        for i in prefix:
            path.push_back(i)
        self.tree = tree
        self.nodes = []
        self.scope_objs = []
        # (room for a parent's positions at once: not grown, and freed, five times over)
        self.at.clear()
        self.at.reserve(32)
        self.paths.clear()
        self.paths.reserve(128)
        self._spots = None
        _bpositions(self, tree, scope, counters, True if counters else False, path, 0)
        self._n_atoms = -1
        self.sizes.clear()
        self._numbers = None
        self._inner = None
        self._operators = None  # (made when first asked: most parents are drawn few times)
        self._names = None
        self.form = None
        return 0

    cdef int _add(self, object node, object scope, bint in_loop, const Py_ssize_t* path,
                  size_t n_path) except -1:
        # a position: the subtree at it, its scope, whether in a loop, its path (``n_path``
        # indices at ``path``)
        self.nodes.append(node)
        cdef Py_ssize_t n = PyList_GET_SIZE(self.scope_objs)
        if n == 0 or <object>PyList_GET_ITEM(self.scope_objs, n - 1) is not scope:
            self.scope_objs.append(scope)
            n += 1
        cdef _Spot spot
        spot.scope = n - 1
        spot.in_loop = in_loop
        spot.path_at = self.paths.size()
        spot.path_len = n_path
        self.at.push_back(spot)  # (one record a position, its path appended in one copy)
        self.paths.insert(self.paths.end(), path, path + n_path)
        return 0

    cdef inline Py_ssize_t n_spots(self):
        return self.at.size()

    cdef inline object scope(self, Py_ssize_t k):
        # spot k's scope
        return <object>PyList_GET_ITEM(self.scope_objs, self.at[k].scope)

    cdef inline bint in_loop(self, Py_ssize_t k):
        # whether spot k is in a loop's body
        return self.at[k].in_loop

    cdef inline const Py_ssize_t* path_of(self, Py_ssize_t k):
        # spot k's path (path_len(k) indices); (the array's data: never read when empty)
        return self.paths.data() + self.at[k].path_at

    cdef inline Py_ssize_t path_len(self, Py_ssize_t k):
        return self.at[k].path_len

    cdef tuple _path(self, Py_ssize_t k):
        # spot k's path as a tuple of ints
        cdef Py_ssize_t j, n = self.path_len(k)
        cdef const Py_ssize_t* p = self.path_of(k)
        cdef tuple out = PyTuple_New(n)
        cdef object x
        for j in range(n):
            x = p[j]
            Py_INCREF(x)
            PyTuple_SET_ITEM(out, j, x)
        return out

    cdef list _spot_list(self):
        cdef Py_ssize_t k
        if self._spots is None:
            self._spots = [_acyclic((self._path(k), self.scope(k), self.in_loop(k)))
                           for k in range(self.n_spots())]
        return self._spots

    @property
    def spots(self):
        """[(path, scope, in_loop), ...]: the positions (``positions(tree)``)."""
        return self._spot_list()

    def size(self):
        """``size(tree)``."""
        return self._size()

    cdef Py_ssize_t _size(self) except -1:
        if self._n_atoms < 0:
            self._n_atoms = _bsize(self.tree, 0)
        return self._n_atoms

    cdef Py_ssize_t spot_size(self, object tree, Py_ssize_t k) except -1:
        # the size of the subtree of ``tree`` at spots[k]: of this tree's, found once (a
        # crossover weighs the sizes of the subtrees it trades, and a parent is crossed often)
        if tree is not self.tree:
            return _bsize(self.node(tree, k), 0)
        if self.sizes.empty():
            self.sizes.assign(self.n_spots(), -1)
        cdef Py_ssize_t n = self.sizes[k]
        if n < 0:
            n = self.sizes[k] = _bsize(self.nodes[k], 0)
        return n

    cdef list _spots_at(self, list ks):
        spots = self._spot_list()
        return [spots[k] for k in ks]

    def numbers(self):
        """The positions that hold a numeric literal."""
        return self._spots_at(self.numbers_at())

    cdef list numbers_at(self):
        cdef Py_ssize_t k
        if self._numbers is None:
            self._numbers = [k for k in range(self.n_spots())
                             if _bis_number(<object>PyList_GET_ITEM(self.nodes, k))]
        return self._numbers

    cdef list inner_at(self):
        # the positions below the root (hoist's)
        if self._inner is None:
            self._inner = [k for k in range(self.n_spots()) if self.path_len(k) > 0]
        return self._inner

    def names(self, names):
        """The positions that hold one of ``names`` (a frozenset of atoms)."""
        return self._spots_at(self.names_at(names))

    cdef list names_at(self, object names):
        cdef Py_ssize_t k
        if self._names is None:
            self._names = {}
        out = self._names.get(names)
        if out is None:
            out = self._names[names] = []
            for k in range(self.n_spots()):
                x = <object>PyList_GET_ITEM(self.nodes, k)
                if isinstance(x, str) and x in names:
                    (<list>out).append(k)
        return out

    def operators(self, ops):
        """The positions that hold a call of one of ``ops`` (a frozenset)."""
        return self._spots_at(self.operators_at(ops))

    @cython.boundscheck(True)  # (() raises IndexError, as Python indexes it)
    @cython.wraparound(True)
    cdef list operators_at(self, object ops):
        cdef Py_ssize_t k
        if self._operators is None:
            self._operators = {}
        out = self._operators.get(ops)
        if out is None:
            out = self._operators[ops] = []
            for k in range(self.n_spots()):
                x = <object>PyList_GET_ITEM(self.nodes, k)
                # (a call's head read in place; () and a list's subclass as Python reads them)
                if type(x) is list and PyList_GET_SIZE(x):
                    if <object>PyList_GET_ITEM(x, 0) in ops:
                        (<list>out).append(k)
                elif isinstance(x, list) and x[0] in ops:
                    (<list>out).append(k)
        return out

    cdef object node(self, object tree, Py_ssize_t k):
        # the subtree of ``tree`` at spots[k]: listed, when ``tree`` is this tree
        if tree is self.tree:
            return self.nodes[k]
        return _bget_at(tree, self._path(k))

    cdef _Form _form_in(self, Simplifier s, bint hold):
        # the tree's Node form in ``s`` (Breeder.children's canonical form), converted once
        # until ``s``'s next reset; ``hold``: ``s`` holds the tree too (Simplifier._parent_node)
        cdef _Form f = self.form
        if f is None or f.uid != s.uid or f.resets != s.n_resets:
            f = self.form = _bform(s, s._parent_node(self.tree, hold), self)
        return f


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
    cdef object scratch  # the public operators' Simplifier (``_scratch``)
    # the Nodes of the grammar's names (params, inputs, unary, binary: group g's i-th at
    # name_at[g] + i, NULL until asked) in the Simplifier numbered ``names_uid``, valid while its
    # n_resets is ``names_resets``: a name drawn is one read, not a look up by its str
    cdef vector[SNode*] name_nodes
    cdef Py_ssize_t name_at[5]
    cdef Py_ssize_t names_uid, names_resets

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
        self.name_at[0] = 0
        self.name_at[1] = len(self.params)
        self.name_at[2] = self.name_at[1] + len(self.inputs)
        self.name_at[3] = self.name_at[2] + len(self.unary)
        self.name_at[4] = self.name_at[3] + len(self.binary)
        self.names_uid = 0  # (no Simplifier's: their numbers start at 1)

    # -- the Nodes the operators build (a child is built in the Simplifier ``s`` as Nodes, of
    # its parents' Nodes, _Form; the public operators convert at their boundary) --

    cdef Simplifier _scratch(self):
        # the Simplifier the public operators build in (the search's children are built in its
        # canonical form's): reset between calls when its memo outgrows the core's limits
        if self.scratch is None:
            self.scratch = Simplifier((), ValueError)
        cdef Simplifier s = <Simplifier>self.scratch
        s._reset_if_due()
        return s

    cdef SNode* _sym(self, Simplifier s, object name) except NULL:
        # (the grammar's names are str; any other atom as the core converts it)
        if type(name) is str:
            return s._symbol(<str>name)
        return s._convert(name, 0, native_stack_limit())

    cdef SNode* _name(self, Simplifier s, int group, Py_ssize_t i) except NULL:
        # the Node in ``s`` of the i-th name of the grammar's ``group`` (_PARAMS ...), i in range
        cdef SNode* n
        if self.names_uid != s.uid or self.names_resets != s.n_resets:
            self.name_nodes.assign(self.name_at[4], NULL)
            self.names_uid, self.names_resets = s.uid, s.n_resets
        n = self.name_nodes[self.name_at[group] + i]
        if n == NULL:
            names = (self.params if group == _PARAMS else self.inputs if group == _INPUTS
                     else self.unary if group == _UNARY else self.binary)
            n = self._sym(s, (<tuple>names)[i])
            self.name_nodes[self.name_at[group] + i] = n
        return n

    cdef SNode* _draw_name(self, Draws d, Simplifier s, int group) except NULL:
        # a name of the grammar's ``group`` drawn uniformly (``names[integers(len(names))]``)
        return self._name(s, group,
                          d._below(self.name_at[group + 1] - self.name_at[group]))

    # -- terminals --

    cdef SNode* _constant(self, Draws d, Simplifier s) except NULL:
        if d._random() < 0.5:
            return s.c.real(float(self.constants[d._below(len(self.constants))]))
        return s.c.real(python_round(uniform(d.bg, -3.0, 3.0), 2))

    cdef SNode* _leaf(self, Draws d, Simplifier s, object scope) except NULL:
        cdef double r = d._random()
        if r < 0.5:
            return self._draw_name(d, s, _PARAMS)
        if r < 0.88:
            if not scope:
                return self._draw_name(d, s, _INPUTS)
            names = list(self.inputs) + sorted(scope)
            return self._sym(s, names[d._below(len(names))])
        return self._constant(d, s)

    # -- grow --

    cdef SNode* _grow(self, Draws d, Simplifier s, long depth, object scope, bint in_loop,
                      int level) except NULL:
        cdef double r
        cdef SNode* items[3]
        cdef SNode* four[4]
        cdef SNode* init
        cdef SNode* update
        cdef SNode* value
        cdef SNode* body
        cdef SNode* sn
        cdef SNode* kn
        _bdeeper(level)
        if depth <= 0 or d._random() < 0.25:
            return self._leaf(d, s, scope)
        r = d._random()
        if self.loop and not in_loop and depth >= 3 and r < 0.1:
            n = int(d.integers(self.lo, self.hi + 1))
            init = self._grow(d, s, depth - 2, scope, True, level + 1)
            update = self._grow(d, s, depth - 1, scope | _S, True, level + 1)
            sn = s._symbol("s")
            if not _nrefs(update, sn, 0):
                update = _nlist3(s, s._symbol("+" if d._random() < 0.5 else "*"), sn, update)
            # (loop ((s init) (k 0)) (if (= k n) s (recur update (+ k 1))))
            kn = s._symbol("k")
            items[0] = _nlist2(s, sn, init)
            items[1] = _nlist2(s, kn, s.c.integer(0))
            items[2] = s.c.list(items, 2)  # (the bindings)
            items[0] = _nlist3(s, s._symbol("recur"), update,
                               _nlist3(s, s._symbol("+"), kn, s.c.integer(1)))
            items[1] = _nlist3(s, s._symbol("="), kn, s.c.integer(n))
            four[0], four[1], four[2], four[3] = s._symbol("if"), items[1], sn, items[0]
            return _nlist3(s, s._symbol("loop"), items[2], s.c.list(four, 4))
        if self.let and depth >= 2 and r < 0.17:
            var = f"u{len(scope)}"
            value = self._grow(d, s, depth - 1, scope, in_loop, level + 1)
            body = self._grow(d, s, depth - 1, scope | {var}, in_loop, level + 1)
            items[0] = _nlist2(s, self._sym(s, var), value)
            return _nlist3(s, s._symbol("let"), s.c.list(items, 1), body)
        if r < 0.45:
            items[0] = self._draw_name(d, s, _UNARY)
            return _nlist2(s, items[0], self._grow(d, s, depth - 1, scope, in_loop, level + 1))
        items[0] = self._draw_name(d, s, _BINARY)
        items[1] = self._grow(d, s, depth - 1, scope, in_loop, level + 1)
        items[2] = self._grow(d, s, depth - 1, scope, in_loop, level + 1)
        return s.c.list(items, 3)

    def grow(self, rng, depth=None, scope=frozenset(), in_loop=False):
        """A random expression of at most ``depth`` levels over the grammar."""
        cdef long dp = self.max_depth if depth is None else depth
        cdef Draws d = _bdraws(rng)
        cdef Simplifier s = self._scratch()
        cdef _Back back
        s.busy += 1
        try:
            return _bpython(s, self._grow(d, s, dp, scope, in_loop, 0), &back,
                            native_stack_limit())
        finally:
            s.busy -= 1

    # -- shifts --

    cdef SNode* _shift_inputs(self, Simplifier s, SNode* t, int depth) except NULL:
        # ``t`` with every input x in it written (+ p x), p the first parameter: the inputs'
        # Nodes found once for the walk (one Node a name: an atom is an input by its address)
        cdef vector[SNode*] ins
        cdef Py_ssize_t i
        for i in range(len(self.inputs)):
            ins.push_back(self._name(s, _INPUTS, i))
        cdef SNode* p0 = self._name(s, _PARAMS, 0) if self.params else NULL
        return self._nshift(s, t, ins, s._symbol("+"), p0, depth)

    cdef SNode* _nshift(self, Simplifier s, SNode* t, const vector[SNode*]& ins, SNode* plus,
                        SNode* p0, int depth) except NULL:
        # (every list new, as the Python operator copied them; ``p0`` NULL: no parameter)
        cdef size_t j, m
        cdef SNode* few[8]
        cdef vector[SNode*] more
        cdef SNode** items = few
        if node_kind(t) == 4:
            _bdeeper(depth)
            m = t.items.size()
            if m > 8:
                more.resize(m)
                items = more.data()
            for j in range(m):
                items[j] = self._nshift(s, t.items[j], ins, plus, p0, depth + 1)
            return s.c.list(items, m)
        if node_kind(t) == 0:
            for j in range(ins.size()):
                if ins[j] == t:
                    if p0 == NULL:
                        raise IndexError("tuple index out of range")
                    return _nlist3(s, plus, p0, t)
        return t

    def shift_inputs(self, t):
        """``t`` with every input x in it written (+ p x), p the first parameter."""
        cdef Simplifier s = self._scratch()
        cdef _Back back
        cdef SNode* n
        s.busy += 1
        try:
            n = self._shift_inputs(s, _bnode(s, t, &back), 0)
            return _bpython(s, n, &back, native_stack_limit())
        finally:
            s.busy -= 1

    cdef SNode* _shifted(self, Draws d, Simplifier s, object x, SNode* xn) except NULL:
        # (``x``: the input, ``xn`` its Node)
        cdef Py_ssize_t p = d._below(len(self.params))
        cdef double r = d._random()
        others = [y for y in self.inputs if y != x]
        if others and r < 0.2:
            y = others[d._below(len(others))]
            return _nlist3(s, s._symbol("/" if self.has_div and d._random() < 0.5 else "*"), xn,
                           self._sym(s, y))
        if r < 0.5:
            return _nlist3(s, s._symbol("+"), self._name(s, _PARAMS, p), xn)
        if r < 0.75 or not self.has_square:
            return _nlist3(s, s._symbol("*"), self._name(s, _PARAMS, p), xn)
        return _nlist2(s, s._symbol("square"),
                       _nlist3(s, s._symbol("+"), self._name(s, _PARAMS, p), xn))

    def shifted(self, rng, x):
        """A parameterized change of the input ``x`` (grammar.shifted)."""
        cdef Draws d = _bdraws(rng)
        cdef Simplifier s = self._scratch()
        cdef _Back back
        cdef SNode* n
        s.busy += 1
        try:
            n = self._shifted(d, s, x, _bnode(s, x, &back))
            return _bpython(s, n, &back, native_stack_limit())
        finally:
            s.busy -= 1

    # -- mutate --

    cdef SNode* _mutate(self, Draws d, Simplifier s, object tree, Sites sites,
                        _Form f) except NULL:
        # (a position drawn as its index k in the Sites' positions: its subtree is listed by
        # its Node by ``f``; what the operator tests it reads of the Python tree)
        cdef list ks
        cdef Py_ssize_t n_spots = sites.n_spots()
        cdef double r
        cdef Py_ssize_t k, j, m
        cdef SNode* term
        cdef SNode* part
        cdef SNode* at
        cdef SNode* few[8]
        cdef vector[SNode*] more
        cdef SNode** items = few
        cdef int kind = self._kind(d)
        if kind == _EXTEND:  # add, multiply or divide in a small new term
            if d._random() < 0.5:
                term = self._grow(d, s, 1 + d._below(2), _NO_NAMES, False, 0)
            else:
                k = 0 if d._random() < 0.5 else d._below(n_spots)
                part = f.spot(sites, k)
                if sites.scope(k):
                    part = self._grow(d, s, 1, _NO_NAMES, False, 0)
                elif d._random() < 0.5:
                    part = self._shift_inputs(s, part, 0)
                term = _nlist2(s, self._draw_name(d, s, _UNARY), part)
            if d._random() < 0.5:
                term = _nlist3(s, s._symbol("*"),
                               self._draw_name(d, s, _PARAMS), term)
            r = d._random()
            op = "+" if r < 0.5 else "*" if r < 0.85 or not self.has_div else "/"
            return _nlist3(s, s._symbol(op), f.root, term)
        if kind == _SHIFT:  # an input becomes a fitted shift or scale of it, or its square
            ks = sites.names_at(self.input_set)
            if ks and d._random() < 0.3:  # every input in one part of the model, shifted
                k = d._below(n_spots)
                return _nreplace(s, f.root, sites, k, self._shift_inputs(s, f.spot(sites, k), 0))
            if ks:
                k = ks[d._below(len(ks))]
                return _nreplace(s, f.root, sites, k,
                                 self._shifted(d, s, sites.node(tree, k), f.spot(sites, k)))
            kind = _SUBTREE
        if kind == _CONSTANT:
            ks = sites.numbers_at()
            if ks:
                k = ks[d._below(len(ks))]
                c = sites.node(tree, k)
                r = d._random()
                if r < 0.3:
                    at = self._draw_name(d, s, _PARAMS)
                elif r < 0.7:  # (Python's arithmetic and math.exp, as it was; numpy's draws)
                    at = s.c.real(python_round(
                        c * float(math.exp(0.4 * d._standard_normal())), 4))
                else:
                    at = s.c.real(python_round(c + d._normal(0.0, 0.5), 4))
                return _nreplace(s, f.root, sites, k, at)
            kind = _SUBTREE
        if kind == _OPERATOR:
            ks = sites.operators_at(self.op_set)
            if ks:
                k = ks[d._below(len(ks))]
                choices = self._choices(sites.node(tree, k))
                if choices is not None:  # ([new op] + node[1:])
                    part = f.spot(sites, k)
                    m = part.items.size()
                    if m > 8:
                        more.resize(m)
                        items = more.data()
                    items[0] = self._sym(s, choices[d._below(len(choices))])
                    for j in range(1, m):
                        items[j] = part.items[j]
                    return _nreplace(s, f.root, sites, k, s.c.list(items, m))
            kind = _SUBTREE
        if kind == _HOIST:  # replace a node by one of its own subexpressions (simplifies)
            ks = sites.inner_at()
            if ks:
                k = ks[d._below(len(ks))]
                return f.spot(sites, k) if not sites.scope(k) else f.root
        k = d._below(n_spots)
        cdef long most = max(1, self.max_depth - sites.path_len(k) // 2)
        return _nreplace(s, f.root, sites, k,
                         self._grow(d, s, 1 + d._below(most), sites.scope(k),
                                    sites.in_loop(k), 0))

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
        cdef Draws d = _bdraws(rng)
        cdef Sites st = _bsites(tree, sites)
        cdef Simplifier s = self._scratch()
        cdef _Back back
        s.busy += 1
        try:
            f = _bform(s, _bnode(s, tree, &back), st)
            return _bpython(s, self._mutate(d, s, tree, st, f), &back, native_stack_limit())
        finally:
            s.busy -= 1

    # -- crossover --

    cdef SNode* _crossover(self, Draws d, Simplifier s, object a, object b, Sites sites_a,
                           Sites sites_b, _Form fa, _Form fb) except NULL:
        cdef int attempt
        cdef Py_ssize_t i, j
        for attempt in range(8):
            i = d._below(sites_a.n_spots())
            j = d._below(sites_b.n_spots())
            scope = sites_a.scope(i)
            dscope = sites_b.scope(j)
            piece = sites_b.node(b, j)
            if ((not dscope or _blocals_in(piece, dscope, scope, 0))
                    and not (sites_a.in_loop(i) and _brefs(piece, _LOOP, 0))):
                # (the child's size: the parent's with one subtree traded for the piece)
                if (sites_a._size() - sites_a.spot_size(a, i) + sites_b.spot_size(b, j)
                        <= self.max_size):
                    return _nreplace(s, fa.root, sites_a, i, fb.spot(sites_b, j))
        return self._mutate(d, s, a, sites_a, fa)

    def crossover(self, rng, a, b, sites_a=None, sites_b=None):
        """Insert a random subexpression of ``b`` at a random position of ``a`` where it is in
        scope (grammar.crossover); ``sites_a``, ``sites_b``: the trees' Sites, when kept."""
        cdef Sites sa = _bsites(a, sites_a)
        cdef Sites sb = _bsites(b, sites_b)
        cdef Draws d = _bdraws(rng)
        cdef Simplifier s = self._scratch()
        cdef _Back back
        s.busy += 1
        try:
            fa = _bform(s, _bnode(s, a, &back), sa)
            fb = _bform(s, _bnode(s, b, &back), sb)
            return _bpython(s, self._crossover(d, s, a, b, sa, sb, fa, fb), &back,
                            native_stack_limit())
        finally:
            s.busy -= 1

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
        it to the entry (a sequence equal to ``canonical.entry``'s tuple, its tree made when it
        is read: few kept children are ever read whole). Draws from ``rng`` as the search's
        Python loop did, draw for draw. Each child is built in ``canonical`` as Nodes of its
        parents' (Sites._form_in: each parent's tree converted once until the core's next
        reset): no Python tree is made, converted or freed for a bred child.
        ``hold_parents``: each parent's tree is held by ``canonical`` too (``Simplifier.hold``)
        when it is converted, so that later trees sharing its lists meet them by identity: for
        trees that never change afterwards (the search's parents; a held list changed in place
        would keep its old canonical form)."""
        cdef Draws d = _bdraws(rng)
        cdef vector[double] errv
        _berrors(errors, n_front, tournament, errv)
        cdef const double* errs = errv.data()
        cdef Py_ssize_t tries, n_parents = len(parents)
        cdef double r
        cdef Sites a, b
        cdef SNode* child
        cdef _Made m
        cdef bint digests = type(seen) is Seen  # (asked directly, see _bmet)
        if <Py_ssize_t>errv.size() != n_parents:
            raise ValueError(f"one error per parent: {n_parents} parents, {errv.size()} errors")
        for tries in range(n * 20):
            if len(out) >= n:
                break
            # (the core forgets its Nodes only here, between children: while one is bred and
            # its canonical form computed, ``busy``, its parents' Nodes and its own stay valid)
            canonical._reset_if_due()
            canonical.busy += 1
            try:
                r = d._random()
                if not n_parents or r < fresh:
                    if seeds and d._random() < 0.3:
                        a = <Sites?>seeds[d._below(len(seeds))]
                        child = self._mutate(d, canonical, a.tree, a,
                                             a._form_in(canonical, hold_parents))
                    else:
                        child = self._grow(d, canonical, self.max_depth, _NO_NAMES, False, 0)
                elif r < fresh + crossover and n_parents > 1:
                    a = <Sites?>parents[self._pick(d, n_parents, errs, n_front, front_rate,
                                                    tournament)]
                    b = <Sites?>parents[self._pick(d, n_parents, errs, n_front, front_rate,
                                                    tournament)]
                    fa = a._form_in(canonical, hold_parents)
                    child = self._crossover(d, canonical, a.tree, b.tree, a, b, fa,
                                            b._form_in(canonical, hold_parents))
                else:
                    a = <Sites?>parents[self._pick(d, n_parents, errs, n_front, front_rate,
                                                    tournament)]
                    child = self._mutate(d, canonical, a.tree, a,
                                         a._form_in(canonical, hold_parents))
                self.n_tries += 1
                entry = canonical._entry_of(child, node_kind(child) == 4, None, True)
            finally:
                canonical.busy -= 1
            if type(entry) is _Made:  # (computed now or met before: its tree not made)
                m = <_Made>entry
                if m.size > self.max_size:
                    continue
                if admits is None:
                    src = m.src
                    if _bmet(src, made, seen, digests):
                        continue
                    out.append(src)
                    made[src] = m
                    continue
                entry = canonical._complete(m)  # (``admits`` reads the tree)
            if entry is None or (<tuple>entry)[2] > self.max_size or (
                    admits is not None and not admits((<tuple>entry)[0])):
                continue
            src = (<tuple>entry)[1]
            if _bmet(src, made, seen, digests):
                continue
            out.append(src)
            made[src] = entry
        return out


cdef inline bint _bmet(object src, dict made, object seen, bint digests) except -1:
    # whether a child's source was met: made this round or seen before. A Seen (``digests``:
    # ``seen`` is one, not a subclass) is asked first and directly: its digest is cheaper than
    # the dict's string hash of a new source, and a child met was almost always seen in an
    # earlier round, seldom made in this one (a damped search: 44% of the children asked were
    # seen; two answers without side effects, the same in either order). Any other ``seen`` is
    # asked after ``made``, as before (its answers may be recorded or raise).
    if digests:
        return (<Seen>seen)._has(src) or src in made
    return src in made or src in seen


cdef inline object _bfitness(object record):
    # (record_fitness's rule: ParentEntries reads it without a call when given it)
    train = record["train_error"]
    held = record["heldout_error"]
    return held if held > train else train


def record_fitness(record):
    """What the search ranks its candidates by (``ndvm.cosearch.select.fitness`` is this): the
    worse of the training and held-out errors. With a few held-out points (6 of 20) their error
    alone rewards a model that misses the training points but happens to pass near those six; a
    model must fit both splits. (``max``'s answer, the held-out error only when it is above the
    training one, NaN included, compared as Python compares them; native: it ranks every record
    a search folds into its population, and every new parent's entry.)"""
    return _bfitness(record)


@cython.final
cdef class ParentEntries:
    """A parent's Sites and entry as Mutate makes them (its ``_tree`` and ``_parents``), called
    by breed_parents without a Python frame: ``sites_of(src)`` is the Sites of the parsed tree
    of ``src``, kept in ``parsed`` (source -> Sites, the process's for the grammar's parameter
    names: at most 100,000, then all forgotten) and made once, of the canonical entry
    ``proposed`` held for it (popped: the tree it was made as, and its Node form while valid,
    Sites' ``entry``) or else of ``to_tree(src)``; calling it with a record gives the record's
    entry (record, the Sites of its ``model``, ``fitness(record) * (1 + parsimony *
    record["size"])``: its tournament error, 2% more a parent's atom at the default parsimony,
    so bloated parents lose close tournaments)."""

    cdef dict parsed, proposed
    cdef object parsimony, fitness, to_tree

    def __init__(self, dict parsed not None, dict proposed not None, parsimony, fitness,
                 to_tree):
        self.parsed = parsed
        self.proposed = proposed
        self.parsimony = parsimony
        self.fitness = fitness
        self.to_tree = to_tree

    cdef Sites _sites(self, object src):
        found = self.parsed.get(src)
        if found is not None:
            return <Sites?>found
        if len(self.parsed) > 100_000:
            self.parsed.clear()
        canon = self.proposed.pop(src, None)  # (our own proposal: the tree it was made as)
        cdef Sites out = Sites.__new__(Sites)
        if canon is None:
            out._init(self.to_tree(src), None)
        else:
            out._init(canon[0], canon)
        self.parsed[src] = out
        return out

    cdef tuple _entry(self, object r):
        # (evaluated in the order the Python tuple's items were: the Sites first)
        sites = self._sites(r["model"])
        error = _bfitness(r) if self.fitness is record_fitness else self.fitness(r)
        return (r, sites, error * (1 + self.parsimony * r["size"]))

    def sites_of(self, src):
        """The Sites of the parsed tree of ``src`` (made once; see the class)."""
        return self._sites(src)

    def __call__(self, r):
        return self._entry(r)


cdef extern from "simplify.hpp" namespace "ndvm::simp" nogil:
    cdef cppclass _Places "ndvm::simp::AddressTable<Py_ssize_t>":
        Py_ssize_t find(uintptr_t)
        void insert(uintptr_t, Py_ssize_t) except +
        void clear()
        void swap(_Places&)
        size_t size()


@cython.final
cdef class ParentsKept:
    """The entries (record, Sites, tournament error) of a round's parents, each record's once,
    by the record itself (its address, while the entry holds it alive): breed_parents' ``kept``,
    the next round's ``known``. A record met again is that record; a copy (a migrant come back
    round the ring, a record re-made with the same content and id) is a record of its own."""

    cdef list entries  # in the order their records were first met
    cdef _Places places  # a record's address -> 1 + its entry's index in ``entries``
    # the set ``island`` the entries were read against, and its size then (-1: none)
    cdef object island
    cdef Py_ssize_t island_size
    # (the round before's, while breed_parents reads a round: its records alive, by address)
    cdef list old
    cdef _Places old_places

    def __cinit__(self):
        self.entries = []
        self.island_size = -1

    def __len__(self):
        return len(self.entries)

    def entry(self, record):
        """The entry kept for ``record`` (this object), or None."""
        cdef Py_ssize_t i = self.places.find(<uintptr_t><PyObject*>record)
        return self.entries[i - 1] if i else None

    cdef PyObject* _known(self, PyObject* r) except? NULL:
        # the entry (borrowed: ``entries`` holds it) of the record at ``r`` met this round, or
        # kept the round before (kept for this round now: _keep's work, its record known not
        # met yet), else NULL. (A record is known by its address: neither it nor its entry is
        # touched to find it, a round's ~70 records and entries scattered in memory.)
        cdef uintptr_t at = <uintptr_t>r
        cdef Py_ssize_t i = self.places.find(at)
        if i:
            return PyList_GET_ITEM(self.entries, i - 1)
        i = self.old_places.find(at)
        if not i:
            return NULL
        cdef PyObject* entry = PyList_GET_ITEM(self.old, i - 1)  # (an entry of ``r``: _keep's)
        self._put(at, <object>entry)
        return entry

    cdef inline int _put(self, uintptr_t at, object entry) except -1:
        # ``entry`` kept this round for the record at address ``at`` (not kept yet)
        self.entries.append(entry)
        self.places.insert(at, len(self.entries))
        return 0

    cdef int _keep(self, object r, tuple entry) except -1:
        # (once a record a round; an entry not of ``r`` is not kept: made again when met)
        cdef uintptr_t at = <uintptr_t><PyObject*>r
        if <object>PyTuple_GET_ITEM(entry, 0) is r and not self.places.find(at):
            self._put(at, entry)
        return 0


def breed_parents(list front not None, list population not None, island, known, make):
    """(their Sites, their tournament errors, how many of them are the front's, the entries
    kept) of a round's parents, for ``Breeder.children``: the records of ``front`` and then of
    ``population`` whose ``proposed`` source is not in ``island``, each through its entry
    (record, Sites, error): the one ``known`` (the ParentsKept the last round gave, or None)
    kept for that record, or met earlier this round, else ``make(record)``'s, once a record (a
    ParentsKept's entry made natively, see ParentEntries). The entries kept (a ParentsKept, the
    last round's ``known`` itself when there is one: it keeps only this round's) are the next
    round's ``known`` (Mutate._parents: most parents are again; one call a round, not a Python
    loop over its ~70 records). An ``island`` that is a set only grows (Mutate's: the shape
    library's sources): while it is the set ``known`` was read against, of the same size, a
    record kept is not in it, and neither the record nor the set is read again for it (a
    round's records are mostly the last round's)."""
    cdef list sites = [], errors = []
    cdef ParentsKept kept = ParentsKept() if known is None else <ParentsKept?>known
    cdef Py_ssize_t n_front = 0, part, k
    cdef list records
    cdef tuple entry
    cdef PyObject* found
    cdef bint entries = type(make) is ParentEntries
    cdef Py_ssize_t island_size = (PySet_GET_SIZE(island)
                                   if type(island) is set or type(island) is frozenset else -1)
    cdef bint same_island = (island_size >= 0 and kept.island is island
                             and kept.island_size == island_size)
    kept.old, kept.entries = kept.entries, []
    kept.old_places.swap(kept.places)
    kept.places.clear()
    try:
        for part in range(2):  # (by part: the front and the population may be one list)
            records = population if part else front
            k = 0
            while k < PyList_GET_SIZE(records):  # (``for r in records``' steps, r borrowed)
                found = kept._known(PyList_GET_ITEM(records, k)) if same_island else NULL
                if found == NULL:  # (kept by _known when found)
                    r = <object>PyList_GET_ITEM(records, k)
                    if r["proposed"] in island:
                        k += 1
                        continue
                    r = <dict?>r
                    if not same_island:  # (else looked up above, and not there)
                        found = kept._known(<PyObject*>r)
                    if found == NULL:
                        entry = <tuple?>((<ParentEntries>make)._entry(r) if entries else make(r))
                        kept._keep(r, entry)
                        found = <PyObject*>entry
                k += 1
                sites.append(<object>PyTuple_GET_ITEM(<object>found, 1))
                errors.append(<object>PyTuple_GET_ITEM(<object>found, 2))
            if part == 0:
                n_front = len(sites)
    except BaseException:  # (the round before's entries kept as they were)
        kept.entries, kept.old = kept.old, None
        kept.places.swap(kept.old_places)
        kept.old_places.clear()
        raise
    kept.old = None  # (the round before's entries no longer needed: their records freed)
    kept.old_places.clear()
    kept.island, kept.island_size = (island, island_size) if island_size >= 0 else (None, -1)
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
