"""Where a co-search's time goes: proposing (genetic operators, canonical form, dedup), the loop's
per-candidate preparation (tree, size, skeleton), validation, calibration, scoring, the rest.

    python bench/search_profile.py [--task damped] [--candidates 4000] [--seed 0] [--workers 1]
                                   [--budget SECONDS] [--cprofile N] [--sequence FILE]
                                   [--replay R]

Every stage is timed by wrapping its function (the wall time spent inside it, in whichever thread
runs it), and the shares are of the search's wall time; in a pipelined loop stages overlap, so
the shares can add up to more than 100%. A fixed candidate count (the default) makes runs of two
versions comparable; --sequence writes the proposed sources, one a line, to compare two versions'
candidates (they must be identical for a seed). Runs with whichever ndvm the interpreter imports,
so the same script measures main and a branch.

--replay R then times the proposer alone, R times: the search's own records rebuild, batch by
batch, the state it proposed from (seen sources, front, population), and a fresh proposer of the
same seed proposes again from each one, with cold caches, as in a new process. It must propose the
recorded candidates (checked); nothing is calibrated, so this figure is free of the calibration
workers' noise.
"""
import argparse
import cProfile
import functools
import pstats
import threading
import time

import numpy as np

import ndvm
from ndvm.cosearch import loop, proposers, rounds, score
from ndvm.cosearch.tasks import get_task

_LOCK = threading.Lock()


def _timed(owner, name, totals, key):
    """Wrap owner.name so that its wall time adds to totals[key]; returns an undo function."""
    plain = getattr(owner, name, None)
    if plain is None:
        return lambda: None

    @functools.wraps(plain)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return plain(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t
            with _LOCK:
                totals[key] = totals.get(key, 0.0) + dt

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, plain)


def profile(task, n, seed, workers, budget):
    """(SearchResult, {stage: seconds}) of one search with its stages timed."""
    totals = {}
    undo = [
        _timed(proposers.Mutate, "propose", totals, "propose"),
        _timed(proposers.Replay, "propose", totals, "propose"),
        _timed(score.Scorer, "validate_round", totals, "validate"),  # (a round's, in one call)
        _timed(rounds._Rounds, "calibrate", totals, "calibrate"),
        _timed(score.Scorer, "assess", totals, "score"),
    ]
    for name in ("to_tree", "size", "skeleton", "canonicalize"):  # the loop's own preparation
        undo.append(_timed(rounds, name, totals, "prepare"))
    try:
        res = ndvm.search(task, max_candidates=n if budget is None else None, budget=budget,
                          seed=seed, workers=workers)
    finally:
        for u in undo:
            u()
    return res, totals


def _cold():
    """Forget every proposer cache that outlives a search (as in a new process)."""
    for name in ("_CANON_CACHE", "_SIMPLIFIERS"):  # (main: the first; this branch: the second)
        cache = getattr(proposers, name, None)
        if cache is not None:
            cache.clear()


def replay(task_name, records, seed, batch=loop.BATCH):
    """CPU seconds the mutate proposer of ``seed`` takes to propose ``records`` again from the
    states the search proposed them from (see the module docstring; CPU time, as this process
    runs nothing else meanwhile, is steadier than wall time on a shared machine)."""
    task = get_task(task_name)
    g = task.search_grammar()
    _cold()
    prop = task.proposer(proposers.make_proposer("mutate", seed=seed))
    lag = 1 if getattr(prop, "pipelined", False) else 0  # as the loop runs it (loop.py)
    state = rounds.SearchState(task=task, grammar=g)
    spent, i, scored = 0.0, 0, []  # scored: each batch's ok records, folded in lag batches late
    while i < len(records):
        while len(scored) > lag:
            ok = scored.pop(0)
            state.front = loop.pareto_front(state.front + ok)
            pool = state.population + [r for r in ok if np.isfinite(r["heldout_error"])]
            state.population = rounds._fittest(pool)  # (as _Rounds.finish folds a batch in)
        t = time.process_time()
        srcs = prop.propose(min(batch, len(records) - i), state)
        spent += time.process_time() - t
        got = records[i:i + len(srcs)]
        if not srcs or srcs != [r["proposed"] for r in got]:
            raise AssertionError(f"the replayed proposer differs from the search at candidate {i}")
        for r in got:
            state.seen.add(r["proposed"])
            if r.get("model"):
                state.seen.add(r["model"])
        scored.append([r for r in got if r["status"] == "ok"])
        i += len(srcs)
    return spent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="damped")
    ap.add_argument("--candidates", type=int, default=4000)
    ap.add_argument("--budget", type=float, default=None, help="seconds instead of a count")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cprofile", type=int, default=0, metavar="N",
                    help="also print the N functions with the most cumulative time")
    ap.add_argument("--sequence", default=None, help="write the proposed sources to this file")
    ap.add_argument("--replay", type=int, default=0, metavar="R",
                    help="then time the proposer alone R times on the search's own states")
    a = ap.parse_args()
    ndvm.search(a.task, max_candidates=32, seed=a.seed + 1, workers=a.workers)  # warm up
    if a.cprofile:
        prof = cProfile.Profile()
        prof.enable()
    res, totals = profile(a.task, a.candidates, a.seed, a.workers, a.budget)
    if a.cprofile:
        prof.disable()
    wall = res.elapsed
    n = len(res.records)
    print(f"{a.task}, seed {a.seed}, workers {a.workers}: {n} candidates in {wall:.2f} s "
          f"= {n / wall:.0f} cand/s ({res.n_calibrated} calibrated, best held-out "
          f"{res.best['heldout_error'] if res.best else float('nan'):.4g})")
    for key in ("propose", "prepare", "validate", "calibrate", "score"):
        t = totals.get(key, 0.0)
        print(f"  {key:10s} {t:7.2f} s  {100 * t / wall:5.1f}%")
    rest = wall - sum(totals.values())
    print(f"  {'rest':10s} {rest:7.2f} s  {100 * rest / wall:5.1f}%  (negative: stages overlap)")
    if a.sequence:
        with open(a.sequence, "w", encoding="utf-8") as f:
            f.write("".join(r["proposed"] + "\n" for r in res.records))
    if a.cprofile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(a.cprofile)
    if a.replay:
        times = sorted(replay(a.task, res.records, a.seed) for _ in range(a.replay))
        print(f"  proposer alone (replayed {a.replay}x, same candidates): median "
              f"{np.median(times):.2f} CPU s = {1e6 * np.median(times) / n:.0f} us/candidate, "
              f"min {times[0]:.2f} s")


if __name__ == "__main__":
    main()
