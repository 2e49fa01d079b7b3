"""What one `ndvm.parse` costs (read, check and expand a program, build its Program), per call.

    python bench/parse_speed.py [--corpus srcs.pkl] [--reps 7] [--rounds 20]

The co-search parses every new candidate once to validate it, so its sources are the main set:
--corpus is a pickled list of sources (make one with
`ndvm.search("damped", max_candidates=4096, seed=3, budget=3600, workers=1)`, the records'
"model"s); without it the set is skipped. For breadth, also timed when present: the programs under
tests/programs and bench/programs (*.scm, whole files), and the co-search candidates and the
other "src" entries of the JSON files under the shared data folder (NDVM_SHARED_DATA, or
../shared/data beside the checkout; skipped when absent).

Each set is parsed in a loop, `--rounds` passes over all its sources per repetition; the figure is
microseconds per parse, the median of `--reps` repetitions (with the min and max beside it). Sources
that do not parse (the error programs) are timed too: raising is part of a parse's cost. Runs with
whichever ndvm the interpreter imports, so the same script measures main and a branch; alternate
the two on a shared machine.
"""
import argparse
import json
import os
import pickle
import statistics
import time
from pathlib import Path

import ndvm

ROOT = Path(__file__).resolve().parents[1]


def shared_dir():
    d = os.environ.get("NDVM_SHARED_DATA")
    return Path(d) if d else ROOT.parent / "shared" / "data"


def json_sources(obj, out):
    """Every string under a "src" key of a JSON value, depth first."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "src" and isinstance(v, str):
                out.append(v)
            else:
                json_sources(v, out)
    elif isinstance(obj, list):
        for v in obj:
            json_sources(v, out)


def shared_sources(d):
    out = []
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.jsonl")):
        for line in p.read_text().splitlines():
            if line.strip():
                json_sources(json.loads(line), out)
    for p in sorted(d.glob("*.json")):
        json_sources(json.loads(p.read_text()), out)
    return out


def parse_one(src):
    try:
        ndvm.parse(src, "<bench>")
    except ndvm.SchemeError:
        pass


def time_set(srcs, reps, rounds):
    """us per parse over srcs: (median, min, max) of reps repetitions."""
    for s in srcs:  # warm-up (and the prelude read once)
        parse_one(s)
    per = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(rounds):
            for s in srcs:
                parse_one(s)
        per.append((time.perf_counter() - t0) / (rounds * len(srcs)) * 1e6)
    return statistics.median(per), min(per), max(per)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", help="pickled list of candidate sources")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=20, help="passes over a set per repetition")
    a = ap.parse_args()
    sets = []
    if a.corpus and Path(a.corpus).exists():
        with open(a.corpus, "rb") as f:
            sets.append(("candidates", list(pickle.load(f)), a.rounds))
    elif a.corpus:
        print(f"(no corpus at {a.corpus}: skipped)")
    progs = sorted((ROOT / "tests" / "programs").glob("*.scm")) + sorted(
        (ROOT / "bench" / "programs").glob("*.scm"))
    if progs:
        sets.append(("program files", [p.read_text() for p in progs], a.rounds * 20))
    shared = shared_sources(shared_dir())
    if shared:
        sets.append(("shared data", shared, a.rounds * 4))
    else:
        print(f"(no shared data at {shared_dir()}: skipped)")
    for label, srcs, rounds in sets:
        med, lo, hi = time_set(srcs, a.reps, rounds)
        chars = sum(map(len, srcs)) / len(srcs)
        print(f"{label:>14}: {med:7.3f} us/parse (min {lo:.3f}, max {hi:.3f}) over {len(srcs)} "
              f"sources of {chars:.0f} characters on average")


if __name__ == "__main__":
    main()
