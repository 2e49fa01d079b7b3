# The canonical form's bindings (included by _core.pyx): a tree of nested lists crosses into the
# core's Simplifier (simplify.hpp) as Nodes and comes back as nested lists; the genetic operators
# (breed.pxi) build their children as Nodes here, and a kept child's tree is made when read.
cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.list cimport PyList_GetSlice, PyList_New, PyList_SET_ITEM
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from cpython.weakref cimport PyWeakref_NewRef
from libc.stdint cimport uint64_t
from libcpp.unordered_map cimport unordered_map


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void*)
    Py_ssize_t PyList_GET_SIZE(object)
    PyObject* PyList_GET_ITEM(object, Py_ssize_t)
    object PyUnicode_New(Py_ssize_t, Py_UCS4)
    void* PyUnicode_DATA(object)


cdef extern from "stack.hpp" namespace "ndvm":
    char* native_stack_limit() nogil
    # (against a limit looked up once a tree)
    bool _below_limit "ndvm::native_stack_exhausted"(const char* limit) nogil


cdef inline object _acyclic(object o):
    # The collector walks every container it tracks, at each collection, and a search keeps
    # hundreds of thousands of trees in its caches (canonical entries, parents' Sites): a tree's
    # lists, and the tuples of its canonical entry and rewrite positions, hold atoms and other
    # such containers, made once and never changed, so they can be in no cycle. Untracked, they
    # are freed by their reference counts alone, and the collections never walk them.
    PyObject_GC_UnTrack(<void*>o)
    return o


cdef extern from "simplify.hpp" namespace "ndvm::simp" nogil:
    cdef cppclass SItems "ndvm::simp::Items":
        size_t size()
        SNode* operator[](size_t)

    cdef cppclass SNode "ndvm::simp::Node":
        bool b
        int64_t i
        double f
        const string& s()
        SItems items

    cdef cppclass STextView "ndvm::simp::TextView":
        const char* data
        size_t size

    cdef cppclass SCanonical "ndvm::simp::Canonical":
        SNode* tree
        STextView source
        STextView skeleton
        int64_t size

    int node_kind(const SNode*)
    const vector[string]& arithmetic_heads()

    cdef cppclass AddressMap "ndvm::simp::AddressMap":
        SNode* find(uintptr_t)
        void insert(uintptr_t, SNode*) except +
        void clear()

    cdef cppclass CSimplifier "ndvm::simp::Simplifier":
        CSimplifier(vector[string]) except +
        SNode* sym(const string&) except +
        SNode* integer(int64_t) except +
        SNode* real(double) except +
        SNode* boolean(bool) except +
        SNode* list(vector[SNode*]) except +
        SNode* list(SNode**, size_t) except +
        bool maybe_reset()
        uint64_t next_id()
        bool ascii()
        int canonical_form(SNode*, const SCanonical**, bool) except +
        int canonical_tree(const SCanonical&, SNode**) except +
        int simplify(SNode*, SNode**) except +
        int source_of(SNode*, string*) except +
        int skeleton_of(SNode*, string*) except +
        int size_of(SNode*, int64_t*) except +
        int content_id(SNode*, uint64_t*) except +
        const string& failure_message()


# A tree nested deeper than this is refused (the Python rules hit the interpreter's recursion
# limit well before).
SIMPLIFY_MAX_DEPTH = 1000
cdef int _MAX_DEPTH = SIMPLIFY_MAX_DEPTH
# A Simplifier holds at most this many lists with their Nodes (then forgets them all).
SIMPLIFY_HOLD_LIMIT = 100_000
# ... and keeps at most this many canonical entries (``entry``) before it forgets them all (those
# of lists go with the core's memo, at each of its resets).
SIMPLIFY_ENTRY_LIMIT = 200_000
cdef Py_ssize_t _ENTRY_LIMIT = SIMPLIFY_ENTRY_LIMIT
_STACK_EXHAUSTED = ("maximum recursion depth exceeded in the simplifier (the tree is nested too "
                    "deeply for this thread's native stack)")


def simplify_arithmetic_heads():
    """The heads the canonical form folds and rewrites (every other head is kept as written)."""
    return frozenset(h.decode("utf-8") for h in arithmetic_heads())


# (no cycle: its fields are a number, two str, a weak reference and an untracked tree; the
# collector need not track the thousands a round makes)
@cython.no_gc
@cython.freelist(16)
cdef class _Made:
    """A canonical entry ``Simplifier._entry`` computed for Breeder.children, its Python tree
    made only when it is read (index 0): (tree, source, size, skeleton) as a sequence, equal to
    the tuple ``Simplifier.entry`` gives. The children a round breeds and does not keep (their
    source proposed before, their size too large) are most of the canonical forms computed, and
    only a few kept ones ever become parents (Mutate._tree): the tree is made from the canonical
    Node while it is valid (until the core's next reset), else by parsing the source, which
    reads back as the same tree. Kept by the tree's content number among the entries."""

    cdef uint64_t key   # the content number it is kept by
    cdef object src     # the canonical source (str)
    cdef int64_t size
    cdef object skel    # the skeleton (str)
    cdef SCanonical form  # the canonical form's record, as it was (its tree made from it)
    cdef SNode* node    # the canonical tree once made (NULL before), valid while ...
    # ... its Simplifier's n_resets is ``resets`` (as ``form``'s Nodes)
    cdef Py_ssize_t resets
    cdef object owner   # a weak reference to that Simplifier (it keeps its _Mades: no cycle)
    cdef object tree    # the Python tree, once made (None before)

    cdef object _tree(self):
        # the canonical Python tree: made once, from the Node while it is valid, else parsed
        if self.tree is not None:
            return self.tree
        cdef Simplifier s = self.owner()
        t = None
        if s is not None and s.n_resets == self.resets:
            try:
                if self.node == NULL:
                    self.node = s._canonical_node(self.form)
                t = s._python_tree(self.node)
            except RecursionError:  # (too deep for this thread's native stack: parsed)
                t = None
            else:
                s.last_out = t
                s.last_out_node = self.node
        if t is None:
            from ndvm.cosearch.sexpr import to_tree
            t = to_tree(self.src)
        self.tree = t
        return t

    cdef tuple _tuple(self):
        return _acyclic((self._tree(), self.src, self.size, self.skel))

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 0:  # (the tree alone: a parent's, Mutate._tree)
            return self._tree()
        if i == 1:
            return self.src
        if i == 2:
            return self.size
        if i == 3:
            return self.skel
        return self._tuple()[i]

    def __iter__(self):
        return iter(self._tuple())

    def __eq__(self, other):
        if isinstance(other, (tuple, _Made)):
            return self._tuple() == tuple(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return repr(self._tuple())

    def __reduce__(self):  # (pickled as the entry it is: a Node means nothing elsewhere)
        return tuple, (self._tuple(),)


cdef Py_ssize_t _last_simplifier_uid = 0  # (each Simplifier's uid its own, for the process)


cdef class Simplifier:
    """The core's canonical form for one set of parameter names, memoized per subtree content
    (the Python face is ndvm.cosearch.simplify.Simplifier). ``too_many`` is the exception class
    raised when a model needs more parameters than there are names."""

    cdef CSimplifier* c
    cdef object too_many
    cdef object last_in      # the last tree converted, with its Node (valid until a reset)
    cdef SNode* last_in_node
    cdef object last_out     # the last canonical tree returned, with its Node
    cdef SNode* last_out_node
    cdef dict symbols        # name -> its Node's address (the core shares one Node per name)
    # a name's str object, by address, -> its Node (one slot read: a tree's names are mostly the
    # str objects met before, the grammar's and those ``_tree`` decoded) ...
    cdef AddressMap symbol_nodes
    cdef list symbol_strs    # ... those str objects, kept (their addresses stay theirs)
    cdef list names          # the str of each symbol Node met by ``_tree`` ...
    cdef unordered_map[uintptr_t, PyObject*] name_of  # ... by the Node's address (borrowed)
    cdef bint holding        # (while ``hold`` converts)
    # conversions (Python tree -> Nodes, Nodes -> Python tree) under way: Python code that runs
    # during one (an atom's comparison, a garbage collector's finalizer) may use this Simplifier
    # again, and a reset then would free the Nodes the conversion holds; it waits for them
    cdef int busy
    cdef readonly Py_ssize_t n_resets  # how many times the core's memo was forgotten
    cdef readonly Py_ssize_t n_entries_made  # canonical entries computed (``entry`` not kept)
    cdef list held           # the lists held (alive: their addresses stay theirs) ...
    cdef AddressMap held_nodes  # ... by address, with their Nodes
    cdef dict entries        # an atom's source -> its canonical entry
    # a list's canonical entry by its content number, less ``list_base``: the core numbers each
    # new content one more than the last, so those met since its last reset are at least its
    # next number at the reset, and index one array (an owned reference, or NULL: none kept),
    # not a dict of Python ints (a child's entry was a dict look up and insert of a new int)
    cdef vector[PyObject*] list_entries
    cdef uint64_t list_base
    cdef Py_ssize_t n_list_entries  # (those not NULL)
    cdef public object fallback  # tree -> the entry of a tree outside the forms (``entry``)
    # called with the Python tree of each tree whose entry is computed (not met before), before
    # it is computed, when set: for checks that replay a search's canonical forms elsewhere
    # (bench/check_canonical.py); None in a search
    cdef public object trace
    # (a Simplifier's own number for the process: Sites keep their Node forms by it, with its
    # n_resets)
    cdef readonly Py_ssize_t uid
    cdef object __weakref__  # (a kept child's _Made refers to it weakly ...
    cdef object me           # ... by this one weak reference, made once)

    def __cinit__(self, params, too_many):
        cdef vector[string] names
        for p in params:
            names.push_back(_utf8_name(p))
        self.c = new CSimplifier(names)
        self.too_many = too_many
        self.symbols = {}
        self.symbol_strs = []
        self.names = []
        self.holding = False
        self.held = []
        self.entries = {}
        self.list_base = self.c.next_id()
        self.n_list_entries = 0
        self.fallback = None
        self.trace = None
        global _last_simplifier_uid
        _last_simplifier_uid += 1
        self.uid = _last_simplifier_uid

    def __dealloc__(self):
        self._forget_list_entries()
        del self.c

    cdef int _fail(self, int code) except -1:
        msg = self.c.failure_message().decode("utf-8", "replace")
        if code == 1:
            raise self.too_many(msg)
        if code == 2:
            raise ValueError(msg)
        if code == 3:
            raise TypeError(msg)
        if code == 4:
            raise IndexError(msg)
        if code == 5:
            raise RecursionError(msg)
        if code == 6:
            raise StopIteration
        if code == 7:
            raise OverflowError(msg)
        raise MemoryError(msg)

    cdef SNode* _node(self, object t) except NULL:
        if t is self.last_in:
            return self.last_in_node
        if t is self.last_out:
            return self.last_out_node
        self._reset_if_due()
        cdef SNode* n
        self.busy += 1
        try:
            n = self._convert(t, 0, native_stack_limit())
        finally:
            self.busy -= 1
        self.last_in = t
        self.last_in_node = n
        return n

    cdef SNode* _convert(self, object t, int depth, char* limit) except NULL:
        # (``limit``: this thread's native stack limit, native_stack_limit())
        cdef vector[SNode*] items
        cdef SNode* few[8]  # (a list's items, most lists: no vector allocated)
        cdef SNode** at
        cdef Py_ssize_t n, k
        cdef const char* p
        cdef SNode* node
        if type(t) is str:
            return self._symbol(t)
        if isinstance(t, list):
            if self.held:
                node = self.held_nodes.find(<uintptr_t><void*>t)
                if node != NULL:
                    return node
            if depth >= _MAX_DEPTH:
                raise RecursionError(f"the tree is nested more than {_MAX_DEPTH} levels deep")
            if _below_limit(limit):  # (datum.pxi's guard, native_stack_exhausted)
                raise RecursionError(_STACK_EXHAUSTED)
            if type(t) is list:  # (a list's own items, by index: its length cannot change here)
                n = PyList_GET_SIZE(t)
                if n <= 8:
                    at = few
                else:
                    items.resize(n)
                    at = items.data()
                for k in range(n):
                    if k >= PyList_GET_SIZE(t):  # (an atom's comparison emptied it: no read past)
                        raise RuntimeError("a list of the tree changed while it was converted")
                    at[k] = self._convert(<object>PyList_GET_ITEM(t, k), depth + 1, limit)
                node = self.c.list(at, n)
            else:  # (a subclass's, as it iterates)
                items.reserve(len(t))
                for x in t:
                    items.push_back(self._convert(x, depth + 1, limit))
                node = self.c.list(items)
            if self.holding:
                if len(self.held) >= SIMPLIFY_HOLD_LIMIT:
                    self._forget_held()
                self.held.append(t)
                self.held_nodes.insert(<uintptr_t><void*>t, node)
            return node
        if isinstance(t, float):
            return self.c.real(t)
        if t is True or t is False:
            return self.c.boolean(t is True)
        if isinstance(t, int):
            if not -2 ** 63 <= t < 2 ** 63:
                raise OverflowError(f"the integer literal {t} is too large for the simplifier")
            return self.c.integer(t)
        if isinstance(t, str):
            p = PyUnicode_AsUTF8AndSize(t, &n)
            return self.c.sym(string(p, n))
        raise TypeError(f"a tree's atoms are symbols (str), numbers and booleans, not "
                        f"{type(t).__name__} ({t!r})")

    cdef SNode* _symbol(self, str t) except NULL:
        # the Node of the name ``t`` (one per name; a str object met before: one slot read)
        cdef Py_ssize_t n
        cdef const char* p
        cdef SNode* node = self.symbol_nodes.find(<uintptr_t><void*>t)
        if node != NULL:
            return node
        hit = self.symbols.get(t)
        if hit is None:
            p = PyUnicode_AsUTF8AndSize(t, &n)
            node = self.c.sym(string(p, n))
            self.symbols[t] = <uintptr_t>node
        else:
            node = <SNode*><uintptr_t>hit
        if len(self.symbol_strs) < SIMPLIFY_HOLD_LIMIT:  # (as many as the lists held)
            self.symbol_strs.append(t)
            self.symbol_nodes.insert(<uintptr_t><void*>t, node)
        return node

    def hold(self, list tree):
        """Keep ``tree``'s lists with their Nodes, to be met again by identity (not converted
        again) in later trees: a genetic operator's children share every list off one path with
        their parent. The caller never changes a held list (the search's trees never are: every
        operator copies). At most SIMPLIFY_HOLD_LIMIT lists, all forgotten at a reset."""
        self._reset_if_due()
        self.holding = True
        self.busy += 1
        try:
            self._convert(tree, 0, native_stack_limit())
        finally:
            self.holding = False
            self.busy -= 1

    cdef SNode* _parent_node(self, object tree, bint hold) except NULL:
        # The Node of a genetic operator's parent (Breeder.children builds its children of it),
        # valid until the core's next reset; raises as ``_convert`` for a tree the core cannot
        # take. ``hold``: the tree is held too (``hold``), unless it is already (one look up):
        # its lists are then met by identity in later trees. No reset here: the Nodes of the
        # child being bred must stay valid.
        cdef SNode* node
        if hold and type(tree) is list and self.held:
            node = self.held_nodes.find(<uintptr_t><void*>tree)
            if node != NULL:
                return node
        self.holding = hold and type(tree) is list
        self.busy += 1
        try:
            return self._convert(tree, 0, native_stack_limit())
        finally:
            self.holding = False
            self.busy -= 1

    @property
    def n_held(self):
        """How many lists the Simplifier holds now (``hold``)."""
        return len(self.held)

    cdef _reset_if_due(self):
        # (the core forgets every Node when its memo outgrows its limits: so does every map here;
        # not while a conversion is under way, ``busy``: the next call resets)
        if self.busy:
            return
        if self.c.maybe_reset():
            self.n_resets += 1
            self.last_in = self.last_out = None
            self.symbols.clear()
            self.symbol_nodes.clear()
            self.symbol_strs = []
            self.name_of.clear()
            self.names = []
            self._forget_held()
            # (an entry kept by a list's content number cannot be met again: no number comes
            # back; an atom's, kept by its source, can)
            self._forget_list_entries()
            self.list_base = self.c.next_id()

    cdef PyObject* _list_entry(self, uint64_t number) noexcept:
        # the entry kept for the list whose content number is ``number`` (borrowed), or NULL
        cdef uint64_t k = number - self.list_base
        if number < self.list_base or k >= self.list_entries.size():
            return NULL
        return self.list_entries[k]

    cdef int _keep_list_entry(self, uint64_t number, object entry) except -1:
        # keeps ``entry`` for the list whose content number is ``number`` (one numbered before
        # the core's last reset: not kept, it cannot be met again)
        if number < self.list_base:
            return 0
        cdef uint64_t k = number - self.list_base
        if k >= self.list_entries.size():
            self.list_entries.resize(max(k + 1, 2 * self.list_entries.size()), NULL)
        cdef PyObject* old = self.list_entries[k]
        Py_INCREF(entry)
        self.list_entries[k] = <PyObject*>entry
        if old == NULL:
            self.n_list_entries += 1
        else:
            Py_DECREF(<object>old)
        return 0

    cdef _forget_list_entries(self):
        cdef size_t k
        cdef PyObject* e
        for k in range(self.list_entries.size()):
            e = self.list_entries[k]
            if e != NULL:
                self.list_entries[k] = NULL
                Py_DECREF(<object>e)
        self.list_entries.clear()
        self.n_list_entries = 0

    cdef _forget_held(self):
        self.held_nodes.clear()
        self.held = []

    cdef object _python_tree(self, SNode* n):
        # ``_tree(n)``, a conversion under way (``busy``) while it makes Python objects
        self.busy += 1
        try:
            return self._tree(n, native_stack_limit())
        finally:
            self.busy -= 1

    cdef object _tree(self, SNode* n, char* limit):
        # (``limit``: this thread's native stack limit, native_stack_limit())
        cdef int k = node_kind(n)
        cdef unordered_map[uintptr_t, PyObject*].iterator found
        if k == 0:  # (one str per name, decoded once: the core shares one Node per name)
            found = self.name_of.find(<uintptr_t>n)
            if found != self.name_of.end():
                return <object>deref(found).second
            name = PyUnicode_DecodeUTF8(n.s().data(), n.s().size(), NULL)
            self.names.append(name)
            self.name_of[<uintptr_t>n] = <PyObject*>name
            return name
        if k == 1:
            return n.i
        if k == 2:
            return n.f
        if k == 3:
            return n.b
        if _below_limit(limit):
            raise RecursionError(_STACK_EXHAUSTED)
        cdef size_t j, m = n.items.size()
        # (made at its length and filled: the items not yet set are NULL, which a list freed
        # midway, at an error, skips)
        out = PyList_New(m)
        for j in range(m):
            x = self._tree(n.items[j], limit)
            Py_INCREF(x)
            PyList_SET_ITEM(out, j, x)
        return _acyclic(out)

    def canonical_form(self, tree, skeleton=False):
        """(tree, source, size) of the canonical simplified tree, and its skeleton after them
        when ``skeleton``; raises ``too_many`` when the model needs more parameters than there
        are names."""
        return self._canonical_form(tree, skeleton)

    cdef object _canonical_form(self, object tree, bint skeleton, bint none_if_too_many=False):
        return self._canonical_of(self._node(tree), skeleton, none_if_too_many)

    cdef object _canonical_of(self, SNode* n, bint skeleton, bint none_if_too_many):
        # ``canonical_form`` of the tree whose Node is ``n``. (``none_if_too_many``: None for a
        # model that needs too many parameters, ``entry``'s answer, without raising and catching
        # ``too_many`` for each such child)
        cdef const SCanonical* c = NULL
        cdef int code = self.c.canonical_form(n, &c, True)
        if code:
            if code == 1 and none_if_too_many:
                return None
            self._fail(code)
        # (the record's texts read before the Python tree is made: Python code that runs while
        # it is made may call this Simplifier again)
        src = _view_text(c.source, self.c.ascii())
        skel = _view_text(c.skeleton, self.c.ascii()) if skeleton else None
        cdef int64_t size = c.size
        cdef SNode* out = c.tree  # (made with the form)
        t = self._python_tree(out)
        self.last_out = t
        self.last_out_node = out
        if skeleton:
            return _acyclic((t, src, size, skel))
        return _acyclic((t, src, size))

    cdef SNode* _canonical_node(self, const SCanonical& c) except NULL:
        # the renamed tree of canonical form ``c``: its own once made, else a new one each call
        # (made only for the canonical forms whose tree is read), raising as ``_canonical_form``
        cdef SNode* out = NULL
        cdef int code = self.c.canonical_tree(c, &out)
        if code:
            self._fail(code)
        return out

    def simplify(self, tree):
        """An equivalent (up to fitted constants) and never larger tree."""
        cdef SNode* out = NULL
        cdef SNode* n = self._node(tree)
        cdef int code = self.c.simplify(n, &out)
        if code:
            self._fail(code)
        return self._python_tree(out)

    def source(self, t):
        """``sexpr.to_source(t)``, memoized per subtree content."""
        cdef string out
        cdef int code = self.c.source_of(self._node(t), &out)
        if code:
            self._fail(code)
        return _text(out)

    def skeleton(self, t):
        """``sexpr.skeleton(t, params)``, memoized per subtree content."""
        cdef string out
        cdef int code = self.c.skeleton_of(self._node(t), &out)
        if code:
            self._fail(code)
        return _text(out)

    def size(self, t):
        """``sexpr.size(t)``: the number of atoms, memoized per subtree content."""
        cdef int64_t out = 0
        cdef int code = self.c.size_of(self._node(t), &out)
        if code:
            self._fail(code)
        return out

    def entry(self, tree):
        """The canonical entry of ``tree``: (tree, source, size, skeleton) of its canonical form
        (``canonical_form(tree, skeleton=True)``), None when it needs more parameters than there
        are names; for a tree outside the forms, what ``fallback(tree)`` gives. Kept per content
        (at most SIMPLIFY_ENTRY_LIMIT, then all forgotten): a search meets the same child again
        and again."""
        return self._entry(tree)

    cdef object _entry(self, object tree):
        return self._entry_of(self._node(tree), type(tree) is list, tree, False)

    cdef object _entry_of(self, SNode* n, bint is_list, object tree, bint lazy):
        # ``entry`` of the tree whose Node is ``n`` (``is_list``: kept by its content number,
        # else by its source); ``tree``: its Python tree, or None (Breeder.children's children,
        # bred as Nodes: made of ``n`` only for ``fallback``). ``lazy``, Breeder.children's: the
        # entry of a list computed now is a _Made, its Python tree made when it is read.
        cdef uint64_t number = 0
        cdef string src
        cdef PyObject* kept
        cdef int code = self.c.content_id(n, &number) if is_list else self.c.source_of(n, &src)
        if code:
            self._fail(code)
        if is_list:
            kept = self._list_entry(number)
            out = False if kept == NULL else <object>kept
        else:
            key = _text(src)
            out = self.entries.get(key, False)
        if out is False:
            self.n_entries_made += 1
            if self.trace is not None:
                self.trace(self._python_tree(n) if tree is None else tree)
            if len(self.entries) + self.n_list_entries > _ENTRY_LIMIT:
                self.entries.clear()
                self._forget_list_entries()
            try:
                out = (self._made(n, number) if lazy and is_list
                       else self._canonical_of(n, True, True))
            except self.too_many:
                out = None
            except Exception:  # noqa: BLE001 - a tree outside the forms: the caller's rule
                if self.fallback is None:
                    raise
                out = _fallback_entry(self.fallback,
                                      self._python_tree(n) if tree is None else tree)
            if is_list:
                self._keep_list_entry(number, out)
            else:
                self.entries[key] = out
        elif not lazy and type(out) is _Made:
            out = self._complete(<_Made>out)
        return out

    cdef object _made(self, SNode* n, uint64_t key):
        # The canonical form of the list whose Node is ``n`` as a _Made, or None when it needs
        # too many parameters; raises as ``_canonical_form``.
        cdef const SCanonical* c = NULL
        cdef _Made m = _Made.__new__(_Made)
        cdef int code = self.c.canonical_form(n, &c, False)
        if code:
            if code == 1:
                return None
            self._fail(code)
        m.src = _view_text(c.source, self.c.ascii())
        m.skel = _view_text(c.skeleton, self.c.ascii())
        m.size = c.size
        m.key = key
        m.form = c[0]
        m.resets = self.n_resets
        if self.me is None:
            self.me = PyWeakref_NewRef(self, None)
        m.owner = self.me
        return m

    cdef tuple _complete(self, _Made m):
        # The entry (a tuple) of the canonical form ``m``, kept in its place among the entries.
        out = m._tuple()
        if self._list_entry(m.key) == <PyObject*>m:
            self._keep_list_entry(m.key, out)
        return out

    def content(self, list t):
        """A number that names list ``t``'s content (equal contents, equal numbers, for the
        Simplifier's life: a key for caches of results per content)."""
        cdef uint64_t out = 0
        cdef int code = self.c.content_id(self._node(t), &out)
        if code:
            self._fail(code)
        return out


cdef object _fallback_entry(object fallback, object tree):
    # ``fallback(tree)``, checked: an entry is (tree, source, size, skeleton) or None (the
    # children loop reads its items unchecked)
    out = fallback(tree)
    if out is not None and not (type(out) is tuple and len(<tuple>out) == 4):
        raise TypeError(f"a Simplifier's fallback returns (tree, source, size, skeleton) or "
                        f"None, not {type(out).__name__}"
                        + (f" of {len(out)}" if isinstance(out, tuple) else ""))
    return out


cdef inline str _text(const string& s):
    # the str of a UTF-8 text the core keeps (read in place: Cython's decode of a C++ string
    # copies it first)
    return PyUnicode_DecodeUTF8(s.data(), s.size(), NULL)


cdef inline str _view_text(const STextView& v, bint ascii):
    # the str of a canonical form's text (``_text`` of one the core keeps in its Arena); its
    # bytes copied as they are into an ASCII str when the core's texts are all ASCII
    # (``CSimplifier.ascii``: a child's source and skeleton, no UTF-8 decoded for each)
    if not ascii:
        return PyUnicode_DecodeUTF8(v.data, v.size, NULL)
    out = PyUnicode_New(v.size, 127)
    memcpy(PyUnicode_DATA(out), v.data, v.size)
    return out


cdef string _utf8_name(object p) except *:
    if not isinstance(p, str):
        raise TypeError(f"parameter names are str, not {type(p).__name__}")
    return (<str>p).encode("utf-8")
