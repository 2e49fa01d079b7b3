"""A damped search's instructions a candidate outside its fits and inside them (issue 30, item
3's repeatable measure): callgrind counts two searches of N and 2N candidates, and the
difference over N is one candidate's share, the process's start and the search's fixed costs
cancelled out.

    cd bench
    PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind \\
        --callgrind-out-file=cg_1024.out python outside_fits.py run 1024
    (the same with 2048 and cg_2048.out)
    python outside_fits.py count cg_1024.out cg_2048.out

``run N``: ``ndvm.search("damped", max_candidates=N, seed=1, islands=4, budget=3600,
migration_every=256, workers=1)`` with the GIL's switch interval at 1,000 s: a search's two
threads then hand the GIL over only where one waits, not on a wall-clock tick, so the count
repeats to ~0.03 k a candidate (on the tick it moved by 1-2 k from run to run).

``count A B``: reads each file's total and the inclusive counts of ``ndvm::run_optimizer`` (the
fits) and ``ndvm::evaluate_after`` (each fit's native evaluation after it, made in the fits'
calls with the GIL released) with ``callgrind_annotate``, and prints a candidate's share of:
the fits, everything outside them, and of that the island's own work (outside both: the part
run under the GIL on the island's thread).
"""
import re
import subprocess
import sys


def run(n):
    """The measured search: ``n`` candidates of the damped task, 4 islands, one worker."""
    sys.setswitchinterval(1000.0)
    import ndvm

    ndvm.search("damped", max_candidates=n, seed=1, islands=4, budget=3600,
                migration_every=256, workers=1)


def _counts(path):
    """(total, run_optimizer inclusive, evaluate_after inclusive) instructions of a callgrind
    output file, and the candidates of the run it counted (its command line's last word)."""
    def annotate(*flags):
        return subprocess.run(["callgrind_annotate", *flags, path], capture_output=True,
                              text=True, check=True).stdout

    def first(pattern, text):
        m = re.search(pattern, text, re.MULTILINE)
        if m is None:
            raise SystemExit(f"{path}: no line matching {pattern!r} in callgrind_annotate's output")
        return int(m.group(1).replace(",", ""))

    flat, inclusive = annotate(), annotate("--inclusive=yes")
    total = first(r"^\s*([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", flat)
    fits = first(r"^\s*([\d,]+) \([^)]*\)\s+\S*ndvm::run_optimizer\(", inclusive)
    after = first(r"^\s*([\d,]+) \([^)]*\)\s+\S*ndvm::evaluate_after\(", inclusive)
    n = first(r"^Profiled target:.*\s(\d+) \(PID", flat)
    return total, fits, after, n


def count(small, large):
    """Print one candidate's instructions from the two runs' files (``large`` the longer run)."""
    (t1, f1, a1, n1), (t2, f2, a2, n2) = _counts(small), _counts(large)
    if n2 <= n1:
        raise SystemExit(f"{large} counted {n2} candidates, not more than {small}'s {n1}")
    per = n2 - n1
    fits, outside, after = (f2 - f1) / per, ((t2 - f2) - (t1 - f1)) / per, (a2 - a1) / per
    print(f"a candidate ({n1} and {n2} candidates): {fits / 1e6:.3f} M instructions in its fits; "
          f"{outside / 1e3:.1f} k outside them, of which {after / 1e3:.1f} k are each fit's "
          f"native evaluation after it and {(outside - after) / 1e3:.1f} k the island's own work")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "run":
        run(int(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "count":
        count(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(__doc__)
