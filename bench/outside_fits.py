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

``functions A B [REGEX] [--self]``: each function's instructions a candidate, the same
difference of the two runs over their candidates, from ``callgrind_annotate``'s inclusive counts
(its own, with ``--self``), largest first, those whose name matches REGEX (a Python regular
expression, searched) and of at least 0.15 k a candidate: where a change's instructions went,
function by function (``functions old_2048.out new_2048.out`` is not that: both files must be
one tree's two runs).
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


def _annotate(path, *flags):
    """callgrind_annotate's output for a callgrind output file (with ``flags``)."""
    return subprocess.run(["callgrind_annotate", *flags, path], capture_output=True, text=True,
                          check=True).stdout


def _first(path, pattern, text):
    """The number (commas allowed) of ``pattern``'s first match in ``text``, read from
    ``path``'s annotation."""
    m = re.search(pattern, text, re.MULTILINE)
    if m is None:
        raise SystemExit(f"{path}: no line matching {pattern!r} in callgrind_annotate's output")
    return int(m.group(1).replace(",", ""))


_CANDIDATES = r"^Profiled target:.*\s(\d+) \(PID"  # (the run's command line's last word)


def _counts(path):
    """(total, run_optimizer inclusive, evaluate_after inclusive) instructions of a callgrind
    output file, and the candidates of the run it counted (its command line's last word)."""
    flat, inclusive = _annotate(path), _annotate(path, "--inclusive=yes")
    total = _first(path, r"^\s*([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", flat)
    fits = _first(path, r"^\s*([\d,]+) \([^)]*\)\s+\S*ndvm::run_optimizer\(", inclusive)
    after = _first(path, r"^\s*([\d,]+) \([^)]*\)\s+\S*ndvm::evaluate_after\(", inclusive)
    return total, fits, after, _first(path, _CANDIDATES, flat)


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


def _by_function(path, inclusive):
    """{function: instructions} of a callgrind output file (every function callgrind_annotate
    lists above 0.01% of the total; a function's lines under one name summed), and the
    candidates of the run it counted."""
    text = _annotate(path, "--threshold=99.99", *(["--inclusive=yes"] if inclusive else []))
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(.*?)\s*(?:\[[^\]]*\])?$", line)
        if m and "PROGRAM TOTALS" not in line:
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return out, _first(path, _CANDIDATES, text)


def functions(small, large, pattern="", inclusive=True):
    """Print each function's instructions a candidate (``large``'s count minus ``small``'s,
    over the candidates between them), largest first, those matching ``pattern``."""
    (a, n1), (b, n2) = _by_function(small, inclusive), _by_function(large, inclusive)
    if n2 <= n1:
        raise SystemExit(f"{large} counted {n2} candidates, not more than {small}'s {n1}")
    wanted = re.compile(pattern)
    rows = sorted(((b[k] - a.get(k, 0)) / (n2 - n1), k) for k in b if wanted.search(k))
    print(f"instructions a candidate ({n1} and {n2} candidates), "
          f"{'inclusive' if inclusive else 'self'}:")
    for per, name in reversed(rows):
        if abs(per) >= 150:
            print(f"{per / 1e3:9.2f} k  {name}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "run":
        run(int(args[1]))
    elif len(args) == 3 and args[0] == "count":
        count(args[1], args[2])
    elif args[:1] == ["functions"] and len([x for x in args if x != "--self"]) in (3, 4):
        files_and_pattern = [x for x in args[1:] if x != "--self"]
        functions(*files_and_pattern, inclusive="--self" not in args)
    else:
        raise SystemExit(__doc__)
