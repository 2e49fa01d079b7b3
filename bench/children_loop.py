"""The search's children loop (``Breeder.children`` with the canonical entries it asks of the
core's Simplifier), replayed: the arguments of every ``children`` call of a damped island search
are captured once, then the calls are replayed in order against a fresh Simplifier (its memo
empty; each parent held once, when first met, as the search holds a parent it parses), timed,
and their results checked against the captured ones (the same children kept, the same entries).

    python bench/children_loop.py capture /tmp/calls.pickle   # (a damped search: ~1 minute)
    python bench/children_loop.py replay /tmp/calls.pickle 7  # us per kept and per bred child
    python bench/children_loop.py compare /tmp/calls.pickle OTHER_BUILD/_core...so 7

``replay`` prints the median of its runs (each run replays every call once, in a fresh
Simplifier): microseconds per child kept and per child bred, and the total; then the same
medians of the thread's CPU time (steadier than the wall clock on a shared machine). The
answers of the search's Seen are captured per query (a set of the sources it held), so a replay
costs the same set lookups under any build: ``compare`` replays one capture under this build
and another build's core extension, alternated in one process (the machine is noisy). The
capture pickles trees, not Sites (made again at load).
"""
import pickle
import statistics
import sys
import time

import numpy as np
from ndvm._core._core import Breeder, Draws, Sites

import ndvm
from ndvm.cosearch import proposers
from ndvm.cosearch.simplify import Simplifier, TooManyParameters


class _SeenAnswers:
    """The search's Seen, its answers recorded (``in``: the only question children asks)."""

    def __init__(self, seen):
        self.seen, self.held = seen, set()

    def __contains__(self, src):
        if src in self.seen:
            self.held.add(src)
            return True
        return False


class _Recorder:
    """A Breeder that records each ``children`` call's arguments and results, calling through."""

    def __init__(self, breeder, params, calls):
        self.breeder, self.params, self.calls = breeder, params, calls

    def children(self, rng, n, out, made, seen, canonical, parents, errors, n_front, seeds,
                 admits=None, **options):
        call = {"grammar": self.breeder.grammar, "params": self.params,
                "state": rng.rng.bit_generator.state, "n": n, "out": list(out),
                "made": dict(made), "parents": [s.tree for s in parents],
                "errors": list(errors), "n_front": n_front, "seeds": [s.tree for s in seeds],
                "admits": admits is not None, "options": options}
        answers = _SeenAnswers(seen)
        got = self.breeder.children(rng, n, out, made, answers, canonical, parents, errors,
                                    n_front, seeds, admits=admits, **options)
        call.update(seen=answers.held, result=list(got), entries=dict(made))
        self.calls.append(call)
        return got


def capture(path, n=4096, islands=4, seed=1):
    """Captures every ``children`` call of a damped search into ``path``; returns their number."""
    calls = []
    real = proposers.Mutate._breeder

    def breeder(self, state):
        return _Recorder(real(self, state), tuple(state.grammar.params), calls)

    proposers.Mutate._breeder = breeder
    try:
        ndvm.search("damped", islands=islands, workers=1, max_candidates=n, seed=seed,
                    budget=3600)
    finally:
        proposers.Mutate._breeder = real
    if any(c["admits"] for c in calls):
        raise SystemExit("a capture with units (admits) is not replayed here")
    with open(path, "wb") as f:
        pickle.dump(calls, f, protocol=pickle.HIGHEST_PROTOCOL)
    return len(calls)


def _load(path):
    with open(path, "rb") as f:
        calls = pickle.load(f)
    sites = {}  # (a parent's Sites once, as the search lists it once)
    for c in calls:
        c["parents"] = [sites.setdefault(id(t), Sites(t)) for t in c["parents"]]
        c["seeds"] = [sites.setdefault(id(t), Sites(t)) for t in c["seeds"]]
    return calls, list(sites.values())


def _core_of(path):
    """The core extension module built at ``path`` (another build's _core .so, loaded beside
    this one under its own name: nothing of it enters sys.modules)."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader("ndvm._core._core", path)
    spec = importlib.util.spec_from_file_location("ndvm._core._core", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def replay_once(calls, keep, core=None):
    """One replay of ``calls`` in a fresh Simplifier: (seconds in ``children``, children kept,
    children bred, canonical entries computed, the thread's CPU seconds in ``children``); raises
    AssertionError at the first result unlike the captured one (``keep``: checks them, once
    every call is replayed: a kept child's entry is a sequence whose tree is made when read).
    ``core``: the extension module whose Breeder, Draws and Simplifier replay them (this
    build's by default)."""
    if core is not None:  # (its own Sites of the same trees)
        calls = [dict(c, parents=[core.Sites(s.tree) for s in c["parents"]],
                      seeds=[core.Sites(s.tree) for s in c["seeds"]]) for c in calls]
    simps, breeders, parsed, results = {}, {}, set(), []
    spent, cpu, kept, bred = 0.0, 0.0, 0, 0
    for c in calls:
        simp = simps.get(c["params"])
        if simp is None:
            simp = simps[c["params"]] = Simplifier(c["params"])
            if core is not None:  # (the same bindings, made by the other build)
                simp.core = core.Simplifier(list(c["params"]), TooManyParameters)
                simp.hold = simp.core.hold
            params = c["params"]
            simp.core.fallback = lambda tree, params=params: proposers._as_grown(tree, params)
        key = repr(c["grammar"])
        br = breeders.get(key)
        if br is None:
            br = breeders[key] = (Breeder if core is None else core.Breeder)(c["grammar"])
        for s in c["parents"] + c["seeds"]:  # (held once, when the search parsed it)
            if type(s.tree) is list and id(s) not in parsed:
                parsed.add(id(s))
                simp.hold(s.tree)
        rng = np.random.default_rng()
        rng.bit_generator.state = c["state"]
        d = (Draws if core is None else core.Draws)(rng)
        out, made = list(c["out"]), dict(c["made"])
        before, tries = len(out), br.n_tries
        t0, c0 = time.perf_counter(), time.thread_time()
        br.children(d, c["n"], out, made, c["seen"], simp.core, c["parents"], c["errors"],
                    c["n_front"], c["seeds"], **c["options"])
        spent += time.perf_counter() - t0
        cpu += time.thread_time() - c0
        kept += len(out) - before
        bred += br.n_tries - tries
        if keep:
            results.append((c, out, made))
    # (checked once every call is replayed: a kept child's entry makes its tree when it is
    # read, and the search reads few; read here, the replay would free them in its resets)
    for c, out, made in results:
        assert out == c["result"], "other children kept"
        assert made == c["entries"], "other entries"
    return spent, kept, bred, sum(s.core.n_entries_made for s in simps.values()), cpu


def replay(path, runs=7):
    """Prints the medians of ``runs`` replays of the calls captured in ``path`` (the first run
    checks every result against the captured one)."""
    calls, _ = _load(path)
    results = [replay_once(calls, keep=(i == 0)) for i in range(runs)]
    spent = statistics.median(r[0] for r in results)
    cpu = statistics.median(r[4] for r in results)
    kept, bred, computed = results[0][1:4]
    print(f"{len(calls)} calls, {kept} children kept of {bred} bred ({computed} canonical "
          f"forms computed); median of {runs} runs: "
          f"{spent * 1e6 / kept:.2f} us per kept, {spent * 1e6 / bred:.2f} us per bred, "
          f"{spent * 1e3:.1f} ms in all (runs: "
          f"{', '.join(f'{r[0] * 1e3:.1f}' for r in results)} ms); CPU time: "
          f"{cpu * 1e6 / kept:.2f} us per kept, {cpu * 1e6 / bred:.2f} us per bred")


def compare(path, other, runs=7):
    """Prints, for this build and the build whose _core extension is the file ``other``, the
    medians of ``runs`` replays of the calls captured in ``path``, alternated in one process
    (each checked against the captured results once), and the ratio of their medians."""
    from ndvm._core import _core

    calls, _ = _load(path)
    # (this build's module passed as the other's is: both replays make their Sites afresh, run
    # by run; the captured ones, listed once, kept this build's caches of positions warm)
    cores = {"this": _core, "other": _core_of(other)}
    for name, core in cores.items():
        replay_once(calls, keep=True, core=core)
    times = {name: [] for name in cores}
    for k in range(runs):  # (the order alternated: neither build always runs first)
        for name, core in list(cores.items())[::1 if k % 2 == 0 else -1]:
            times[name].append(replay_once(calls, keep=False, core=core))
    kept, bred = times["this"][0][1], times["this"][0][2]
    for name in cores:
        wall = statistics.median(r[0] for r in times[name])
        cpu = statistics.median(r[4] for r in times[name])
        print(f"{name} build: {wall * 1e6 / kept:.2f} us per kept, {wall * 1e6 / bred:.2f} us "
              f"per bred (CPU time: {cpu * 1e6 / kept:.2f} per kept, {cpu * 1e6 / bred:.2f} per "
              f"bred); {kept} kept of {bred} bred, median of {runs}")
    ratio = [o[4] / t[4] for o, t in zip(times["other"], times["this"])]
    print(f"other / this, CPU time, run by run: median {statistics.median(ratio):.3f} "
          f"({', '.join(f'{x:.2f}' for x in ratio)})")


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        print(capture(sys.argv[2]), "calls captured")
    elif sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 7)
    else:
        replay(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 7)
