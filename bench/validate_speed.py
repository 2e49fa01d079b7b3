"""What validating a round's candidates costs (``Scorer.validate_round``: parse, free names,
probe), per candidate, on the rounds a damped island search validates.

    python bench/validate_speed.py capture ROUNDS.pkl      # the rounds of one search, pickled
    python bench/validate_speed.py time ROUNDS.pkl [--reps 9]
    python bench/validate_speed.py once ROUNDS.pkl         # one pass, for callgrind:
        valgrind --tool=callgrind --toggle-collect='*validate_each*' \\
            python bench/validate_speed.py once ROUNDS.pkl

capture runs ndvm.search("damped", max_candidates=4096, seed=5, islands=4, migration_every=256,
workers=1) after a 256-candidate warm-up and keeps the source lists its scorer validated, round by
round. time replays them through a damped Scorer (the one a 64-candidate search made: its probes
bound as a search's are) and reports thread CPU microseconds a candidate, the median of --reps
passes after one unmeasured pass (warm caches: a search's validation after its calibrations runs
colder). once makes the same scorer (its search is inside the toggle too: divide by the number of
``_parse`` calls callgrind counts) and replays the rounds once. Runs with whichever ndvm the
interpreter imports, so the same rounds measure main and a branch; alternate the two.
"""
import argparse
import pickle
import statistics
import time

import ndvm
from ndvm.cosearch import score


def _scorer_of(search):
    """The Scorer the search ``search()`` validates with, and the source lists it validated."""
    rounds, scorers = [], []
    orig = score.Scorer.validate_round

    def kept(self, sources):
        scorers.append(self)
        rounds.append(list(sources))
        return orig(self, sources)

    score.Scorer.validate_round = kept
    try:
        search()
    finally:
        score.Scorer.validate_round = orig
    return scorers[0], rounds


def capture(path):
    run = {"islands": 4, "budget": 3600, "migration_every": 256, "workers": 1}
    ndvm.search("damped", max_candidates=256, seed=0, **run)
    _, rounds = _scorer_of(lambda: ndvm.search("damped", max_candidates=4096, seed=5, **run))
    with open(path, "wb") as f:
        pickle.dump(rounds, f)
    print(f"{len(rounds)} rounds, {sum(map(len, rounds))} sources -> {path}")


def replay(path, reps, once):
    with open(path, "rb") as f:
        rounds = pickle.load(f)
    scorer, _ = _scorer_of(lambda: ndvm.search("damped", max_candidates=64, seed=0, islands=1,
                                               budget=3600, workers=1))
    n = sum(map(len, rounds))

    def one_pass():
        for r in rounds:
            scorer.validate_round(r)

    one_pass()
    if once:
        return
    us = []
    for _ in range(reps):
        t = time.thread_time()
        one_pass()
        us.append((time.thread_time() - t) / n * 1e6)
    print(f"validating (warm): median {statistics.median(us):.2f} us a candidate "
          f"(passes: {' '.join(f'{x:.2f}' for x in us)}; {n} candidates a pass)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["capture", "time", "once"])
    ap.add_argument("rounds")
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    if a.what == "capture":
        capture(a.rounds)
    else:
        replay(a.rounds, a.reps, a.what == "once")


if __name__ == "__main__":
    main()
