"""Does the pipelined loop's one batch of lag cost search quality? The same seeded searches with
the mutate proposer pipelined (as shipped) and waiting for every batch's scores before proposing
the next (the loop's earlier behaviour), over a fixed number of candidates.

    python bench/pipeline_quality.py [--tasks damped recurrence sunspots] [--seeds 0 1 2]
                                     [--candidates 1500] [--workers 2]

Prints, per task and seed, the lowest held-out error after the candidates and the id of the
first good fit (held-out R^2 above the task's threshold; '-' when none).
"""
import argparse
import math

import numpy as np

import ndvm
from ndvm.cosearch.proposers import Mutate


def run(task, seed, n, workers, pipelined):
    Mutate.pipelined = pipelined
    try:
        res = ndvm.search(task, seed=seed, max_candidates=n, workers=workers, budget=1e9)
    finally:
        Mutate.pipelined = True
    best = min((r["heldout_error"] for r in res.records if r["status"] == "ok"),
               default=math.inf)
    return best, (res.first_good or {}).get("id")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["damped", "recurrence", "sunspots"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--candidates", type=int, default=1500)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    print(f"{'task':11s} {'seed':>4s}  {'best held-out: lag 1':>20s} {'lag 0':>10s}   "
          f"{'first good: lag 1':>17s} {'lag 0':>6s}")
    for task in a.tasks:
        ratios = []
        for seed in a.seeds:
            b1, g1 = run(task, seed, a.candidates, a.workers, True)
            b0, g0 = run(task, seed, a.candidates, a.workers, False)
            ratios.append(b1 / b0 if b0 > 0 else np.nan)
            print(f"{task:11s} {seed:4d}  {b1:20.4g} {b0:10.4g}   {str(g1 if g1 is not None else '-'):>17s} "
                  f"{str(g0 if g0 is not None else '-'):>6s}", flush=True)
        print(f"{task:11s} geometric mean of best(lag 1) / best(lag 0): "
              f"{float(np.exp(np.nanmean(np.log(ratios)))):.3f}", flush=True)


if __name__ == "__main__":
    main()
