"""Proposers: where candidate programs come from.

A proposer's ``propose(n, state)`` returns up to n source texts (an empty list when it has nothing
more); ``state`` holds the task, the grammar, the current front and the best candidates so far.
``replay`` reads JSON-lines files, ``mutate`` is genetic programming over the trees, ``llm`` asks
an OpenAI-compatible chat-completions endpoint.
"""
import json
import math
import os
import re
import urllib.error
import urllib.request
from numbers import Real

import numpy as np

from ndvm._core._core import Draws, ParentEntries, breed_parents
from ndvm.cosearch import grammar as gp
from ndvm.cosearch.structure import building_blocks
from ndvm.cosearch.sexpr import canonical, size, skeleton, to_source, to_tree
from ndvm.cosearch.select import fitness
from ndvm.cosearch.simplify import Simplifier
from ndvm.cosearch.units import units_of
from ndvm.errors import utf8_text

__all__ = ["Proposer", "Replay", "Mutate", "LLM", "make_proposer", "check_options",
           "read_candidates", "CandidateFileError", "LLMError"]


class CandidateFileError(ValueError):
    """A candidate file cannot be read; ``location`` is file:line:col."""

    def __init__(self, location, message):
        self.location = location
        super().__init__(f"{location}: {message}")


class LLMError(RuntimeError):
    """An llm request failed; the message says why (HTTP status, connection, bad answer)."""


class Proposer:
    """Base class: ``propose(n, state) -> [source, ...]``.

    ``pipelined``: the search may ask for the next batch while the current one calibrates, so
    ``state`` then holds every batch but the last (one batch of lag, the same on any number of
    workers). False (the default) waits for the current batch's scores: a proposer that learns
    from each batch (llm) sees them all.
    """

    name = "proposer"
    pipelined = False

    def propose(self, n, state):
        raise NotImplementedError


def read_candidates(path):
    """The sources of a JSON-lines candidate file: objects with a ``src`` field, or the records
    of an earlier search (their ``model``, else ``proposed``)."""
    out = []
    try:
        lines = utf8_text(path).splitlines()
    except OSError as e:
        raise CandidateFileError(str(path), f"cannot read: {e.strerror}") from None
    except ValueError as e:
        raise CandidateFileError(str(path), str(e)) from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CandidateFileError(f"{path}:{i}:{e.colno}", f"invalid JSON: {e.msg}") from None
        src = next((obj[k] for k in ("src", "model", "proposed")
                    if isinstance(obj, dict) and isinstance(obj.get(k), str)), None)
        if src is None:
            raise CandidateFileError(f"{path}:{i}:1", "expected an object with a \"src\" string "
                                     "(or a search record's \"model\" or \"proposed\")")
        out.append(src)
    if not out:  # (a replay of nothing: "no good fit" would blame the search)
        raise CandidateFileError(f"{path}:1:1", "no candidates in the file (expected JSON lines, "
                                 "objects with a \"src\" string)")
    return out


class Replay(Proposer):
    """Candidates from JSON-lines files, then from ``sources`` (program texts), in order."""

    name = "replay"
    pipelined = True  # (it never looks at the state)

    def __init__(self, *files, sources=()):
        self.queue = []
        for f in files:
            self.queue.extend(read_candidates(f))
        self.queue.extend(sources)
        self.pos = 0

    def propose(self, n, state):
        out = self.queue[self.pos:self.pos + n]
        self.pos += len(out)
        return out


class Mutate(Proposer):
    """Genetic programming: subtree/constant/operator mutation and crossover, from the front.

    Parents are drawn by tournament from the front and the best candidates so far, or
    (``front_rate`` of them) uniformly from the front; a few children are grown afresh. Every child is simplified to its canonical form (simplify.py).
    ``small``: first propose every small model of the grammar (grammar.small_programs) and then
    the shape library (grammar.separable_shapes) when the task fits data, preceded by the
    building blocks its training data suggest (structure.building_blocks; ``blocks``); the library's models
    compete for the front and the answer but are never parents. ``library_share`` (k, n): only
    every n-th of those from the k-th (islands share the library out instead of each proposing
    all of it). Deterministic for a seed (given the same scores). A task with units
    (Task.data_units) gets the Buckingham Pi models before all of those, and only dimensionally
    consistent candidates (units.Dimensions).
    """

    name = "mutate"
    canonical = True  # proposes canonical sources: the loop need not simplify them again
    pipelined = True

    def __init__(self, seed=0, crossover=0.3, fresh=0.1, tournament=3, parsimony=0.02,
                 small=True, front_rate=0.25, library_share=(0, 1), blocks=True):
        self.rng = Draws(np.random.default_rng(seed))  # (numpy's stream, at C speed)
        self.blocks = blocks
        self.front_rate = front_rate
        self.n_front = 0
        self.small = small
        self.library_share = tuple(library_share)
        self._small = None  # the small models and the shape library still to propose
        self._shapes = None
        self._island = set()  # the shape library's sources: scored, never parents
        self._units = None  # the task's units.Dimensions (set with the library)
        self._proposed = {}  # source -> its canonical entry, for proposals not yet parents
        self._as_parents = None  # the last round's parents' entries (ParentsKept, or None)
        # source -> (tree, source, size, skeleton) of the last batch proposed (a bred child's
        # a sequence whose tree is made when it is read: Breeder.children)
        self.made = {}
        self._bred = None  # (the search state, its grammar's Breeder): looked up once a search
        self.parsimony = parsimony
        self.crossover = crossover
        self.fresh = fresh
        if not (isinstance(parsimony, Real) and math.isfinite(parsimony) and parsimony >= 0):
            raise ValueError(f"parsimony is the relative error added per atom in parent "
                             f"tournaments: a number >= 0, got {parsimony!r}")
        if tournament < 1:
            raise ValueError(f"tournament must be at least 1 (got {tournament})")
        self.tournament = tournament

    def _admits(self, tree):
        """False for a candidate whose dimensions do not agree (tasks with units only)."""
        return self._units is None or self._units.admits(tree)

    def _parents(self, state, entries=None):
        """The parents' Sites (the front's members first: ``n_front`` of them) and their
        tournament errors, for Breeder.children; the shape library's models are never parents.
        A record's entry is made once while it stays a parent (the last round's parents: most
        are again), by ``entries`` (``_entries``; None: the state's grammar's)."""
        if entries is None:
            entries = self._entries(tuple(state.grammar.params))
        trees, errors, self.n_front, self._as_parents = breed_parents(
            state.front, state.population, self._island, self._as_parents, entries)
        return trees, errors

    def _entries(self, params):
        """The ParentEntries of the grammar's parameter names ``params`` (a tuple): a parent's
        entry (record, Sites, tournament error: the worse of its training and held-out errors,
        ``parsimony`` more an atom) and a source's Sites (``sites_of``). A parent is parsed and
        listed once in a process, whichever island or search of it proposes from it; the
        children loop has the canonical form's Simplifier hold it when it is first drawn
        (``hold_parents``: its children share its lists), not here: a parent may never be
        drawn; a kept child's Sites take its canonical Node as the tree's Node form while that
        Node is valid (Sites' ``entry``: not converted back, nor held). A proposal's own tree
        and the tree its source reads back as are the same, so where a parent was parsed
        changes nothing."""
        known = _PARENTS.get(params)
        if known is None:
            known = _PARENTS[params] = {}
        return ParentEntries(known, self._proposed, self.parsimony, fitness, to_tree)

    def _blocks(self, state):
        """The building blocks the training data suggest (structure.py), when ``blocks``."""
        g = state.grammar
        if not self.blocks or not set(g.inputs) <= set(state.task.inputs):
            return []
        inputs, target = state.task.split("train")
        X = np.stack([inputs[x] for x in g.inputs], axis=1) if g.inputs else None
        return building_blocks(g, X, target) if X is not None else []

    def _breeder(self, state):
        """The Breeder of the search's grammar, looked up once a search (``state``: a search's
        grammar does not change while it runs; ``grammar.breeder`` reads the grammar's repr,
        4.6 us in a warm loop and ~24 inside a round, a round's fixed cost were it asked every
        round)."""
        if self._bred is None or self._bred[0] is not state:
            self._bred = (state, gp.breeder(state.grammar))
        return self._bred[1]

    def __getstate__(self):  # (an island between epochs: its parsed-parent caches stay behind,
        state = {k: ({} if k == "_proposed" else None if k in ("_as_parents", "_bred") else v)
                 for k, v in vars(self).items()}
        if isinstance(self._shapes, list):  # and of the shape library only how much is left)
            state["_shapes"] = len(self._shapes)
        return state

    def propose(self, n, state):
        g = state.grammar
        if len(self._proposed) > 20_000:
            self._proposed.clear()
        self._proposed.update(self.made)
        entries = self._entries(tuple(g.params))
        trees, errors = self._parents(state, entries)
        seeds = [entries.sites_of(s) for s in state.task.seeds]
        out = []
        self.made = made = {}  # each source's canonical tree, size and skeleton (for the loop)
        if self._small is None:
            fits_data = self.small and state.task.objective == "mse" and bool(state.task.inputs)
            k, every = self.library_share
            self._units = units_of(state.task, g)  # (None: the task has no units)
            small = (self._blocks(state) + gp.small_programs(g)) if fits_data else []
            if self._units is not None and fits_data:  # the Buckingham Pi models first
                small = self._units.seeds() + small
            self._small = small[k::every]
            self._shapes = _library(g, k, every) if fits_data else []
            self._small.reverse()  # (popped from the end: smallest first)
        elif isinstance(self._shapes, int):  # (unpacked: the library's last ones, made again)
            self._shapes = _library(g, *self.library_share)[:self._shapes]
        for todo, island in ((self._small, None), (self._shapes, self._island)):
            while todo and len(out) < n:
                canon = _canonical(todo.pop(), g.params)
                src = None if canon is None else canon[1]
                if (src is not None and src not in made and src not in state.seen
                        and self._admits(canon[0])):
                    out.append(src)
                    made[src] = canon
                    if island is not None:
                        island.add(src)
        if len(out) < n:  # the children of the parents (the core's operators for the grammar)
            self._breeder(state).children(
                self.rng, n, out, made, state.seen, _simplifier(g.params).core, trees, errors,
                self.n_front, seeds, admits=None if self._units is None else self._units.admits,
                fresh=self.fresh, crossover=self.crossover, tournament=self.tournament,
                front_rate=self.front_rate, hold_parents=True)
        return out


# parameter names -> source -> the parsed parent's Sites (ParentEntries.sites_of), for the process:
# an island's next epoch in this process finds its parents parsed (its Mutate arrives unpickled)
_PARENTS = {}

_LIBRARIES = {}  # repr(grammar) -> its shape library (grammar.separable_shapes), made once


def _library(g, k, every):
    """Share k of ``every`` of grammar g's shape library, in the order it is popped (a new list
    of trees the process shares: they are never changed)."""
    key = repr(g)
    full = _LIBRARIES.get(key)
    if full is None:
        if len(_LIBRARIES) >= 8:
            _LIBRARIES.clear()
        full = _LIBRARIES[key] = gp.separable_shapes(g)
    return full[k::every][::-1]


# One Simplifier per parameter set keeps its per-subtree memo across children and searches
# (simplify.py), beside the canonical entries it gave, by input content: genetic operators
# propose the same child again and again.
_SIMPLIFIERS = {}


def _simplifier(params):
    """The process's Simplifier for a parameter set; its ``entry`` is ``_canonical``'s."""
    params = tuple(params)
    simp = _SIMPLIFIERS.get(params)
    if simp is None:
        simp = _SIMPLIFIERS[params] = Simplifier(params)
        simp.core.fallback = lambda tree: _as_grown(tree, params)
    return simp


def _canonical(tree, params):
    """(tree, source, size, skeleton) of the canonical simplified tree, or None when it needs
    too many parameters; a tree the simplifier cannot handle is only renamed."""
    return _simplifier(params).entry(tree)


def _as_grown(tree, params):
    """The entry of a tree outside the simplifier's forms: simplified as grown and renamed."""
    out = canonical(gp.simplify(tree), params)
    return out, to_source(out), size(out), skeleton(out, params)


def extract_programs(text):
    """Balanced top-level S-expressions in a model's answer (one candidate each)."""
    text = re.sub(r"```[a-zA-Z]*", "\n", text)
    out, depth, start = [], 0, None
    for i, ch in enumerate(text):
        if ch == ";" and depth == 0:
            continue
        if ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
    return out


class LLM(Proposer):
    """Candidates from an OpenAI-compatible chat-completions endpoint.

    base_url: e.g. ``http://127.0.0.1:8000/v1``; the key is read from the environment variable
    ``key_env`` (no key: no Authorization header). Answers are parsed, validated by the search
    and deduplicated by skeleton.
    """

    name = "llm"

    def __init__(self, base_url=None, model="gpt-4o-mini", key_env="OPENAI_API_KEY",
                 temperature=0.8, timeout=60.0, max_calls=None):
        self.base_url = (base_url or os.environ.get("NDVM_LLM_URL")
                         or "https://api.openai.com/v1").rstrip("/")
        self.model = model
        self.key_env = key_env
        self.temperature = temperature
        self.timeout = timeout
        self.max_calls = max_calls
        self.calls = 0
        self.skeletons = set()

    def prompt(self, n, state):
        """The chat messages for one request."""
        task, g = state.task, state.grammar
        front = "\n".join(f"  size {r['size']:>3}  held-out MSE {r['heldout_error']:.4g}  {r['model']}"
                          for r in state.front[:12]) or "  (empty)"
        system = ("You propose Scheme model programs for symbolic regression. Answer with one "
                  "program per line, each a single S-expression, and nothing else.")
        user = (f"Task: {task.description or task.name}.\n"
                f"Inputs: {', '.join(task.inputs)}. Parameters (fitted by gradient descent): "
                f"{', '.join(task.params)}.\nGrammar: {g.describe()}\n"
                f"Current Pareto front (error vs size):\n{front}\n"
                f"Propose {n} new, structurally different programs likely to fit better.")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def ask(self, messages):
        """One chat-completions call; the answer's text. LLMError says why a call failed."""
        body = json.dumps({"model": self.model, "messages": messages,
                           "temperature": self.temperature}).encode()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.key_env) if self.key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = self.base_url + "/chat/completions"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        hint = "" if key or not self.key_env else f" (no API key: ${self.key_env} is not set)"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace").strip().replace("\n", " ")[:200]
            raise LLMError(f"HTTP {e.code} {e.reason} from {url}{hint}"
                           + (f": {detail}" if detail else "")) from None
        except urllib.error.URLError as e:
            raise LLMError(f"cannot connect to {url}: {e.reason}") from None
        except (TimeoutError, OSError) as e:
            raise LLMError(f"no answer from {url}: {e}") from None
        try:
            reply = json.loads(raw)
        except ValueError:
            raise LLMError(f"the answer from {url} is not JSON: {raw[:120]!r}") from None
        if not isinstance(reply, dict) or "choices" not in reply:
            what = list(reply) if isinstance(reply, dict) else type(reply).__name__
            raise LLMError(f"the answer from {url} has no \"choices\" (got {what})")
        try:
            return "\n".join(c["message"]["content"] for c in reply["choices"]
                             if c.get("message", {}).get("content"))
        except (KeyError, TypeError, AttributeError):
            raise LLMError(f"the answer from {url} has malformed \"choices\"") from None

    def propose(self, n, state):
        if self.max_calls is not None and self.calls >= self.max_calls:
            return []
        self.calls += 1
        try:
            text = self.ask(self.prompt(n, state))
        except LLMError as e:
            state.warn(f"llm request failed: {e}")
            return None  # nothing this round, but not exhausted
        out = []
        for src in extract_programs(text):
            try:
                tree = to_tree(src)
            except Exception:  # noqa: BLE001 - unreadable answers are dropped; the loop counts them
                state.rejected += 1
                continue
            sk = skeleton(tree, state.task.params)
            if sk in self.skeletons:
                continue
            self.skeletons.add(sk)
            out.append(to_source(tree))
        return out


def check_options(proposer, options, also=()):
    """TypeError for an option (keyword) that the proposer named ``proposer`` does not take (a
    Proposer object takes none here: it was made with its own), with a "did you mean" among its
    options and ``also`` (the caller's own keywords: a misspelt one lands here)."""
    if not options:
        return
    import inspect

    cls = {"mutate": Mutate, "llm": LLM}.get(proposer) if isinstance(proposer, str) else None
    takes = [] if cls is None else [p for p in inspect.signature(cls.__init__).parameters
                                    if p not in ("self", "seed")]
    bad = [k for k in options if k not in takes]
    if bad:
        from ndvm.fit import did_you_mean

        what = (f"the {proposer} proposer's options are {', '.join(takes)}" if takes else
                f"the {proposer} proposer takes no options" if isinstance(proposer, str) else
                "a Proposer object takes its options where it is made")
        raise TypeError(f"search() got an unexpected keyword argument {bad[0]!r}"
                        f"{did_you_mean(bad[0], [*takes, *also])}; {what}")


def make_proposer(name, seed=0, candidates=None, **options):
    """A proposer by name: "mutate", "replay" (``candidates``: files or sources), "llm"."""
    if name == "mutate":
        return Mutate(seed=seed, **options)
    if name == "replay":
        if not candidates:
            raise ValueError("the replay proposer needs candidate files (--candidates FILE)")
        if isinstance(candidates, (str, os.PathLike)):  # (one file: not its characters)
            candidates = [candidates]
        return Replay(*candidates)
    if name == "llm":
        return LLM(**options)
    raise ValueError(f"unknown proposer {name!r}; choose mutate, replay or llm")
