"""Long fuzzing run: random cases (tests/fuzzgen.py) thrown at every client for a time budget.

    python tests/fuzz_long.py --seconds 3600 [--seed 1] [--out fuzz-out/]

The cases run in a child process; the parent restarts it after a crash (a signal) or a hang (no
progress for --hang seconds) and saves the offending case, so one run finds many problems. Case i
of seed s is reproducible: `python tests/fuzz_long.py --replay s:i`. Exit status 1 if anything
failed. Prints the number of cases run, per category and outcome.
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def make_case(seed, i):
    from fuzzgen import Gen
    return Gen(random.Random(seed * 1_000_003 + i), big=True).case()


def worker(seed, start, progress):
    """Runs cases start, start+1, ... of `seed`, recording each index before running it."""
    import numpy as np  # noqa: F401 - imported before the first case is timed
    from fuzzgen import check_case, still_usable
    with open(progress, "a", buffering=1) as log:
        i = start
        while True:
            log.write(f"start {i}\n")
            case = make_case(seed, i)
            try:
                kind = check_case(case)
                log.write(f"done {i} {case.category} {kind}\n")
            except AssertionError as e:
                log.write("fail " + json.dumps({"i": i, "error": str(e)}) + "\n")
            i += 1
            if i % 500 == 0:
                still_usable()


def parent(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = out / f"progress-{args.seed}.log"
    progress.unlink(missing_ok=True)
    deadline = time.monotonic() + args.seconds
    start, problems = 0, []
    counts = collections.Counter()
    pos = 0
    while time.monotonic() < deadline:
        child = subprocess.Popen([sys.executable, __file__, "--worker", str(args.seed), str(start),
                                  str(progress)], cwd=HERE)
        last_change, last_size, died = time.monotonic(), -1, None
        while True:
            time.sleep(0.5)
            rc = child.poll()
            size = progress.stat().st_size if progress.exists() else 0
            if size != last_size:
                last_size, last_change = size, time.monotonic()
            if rc is not None:
                died = f"exit status {rc}"
                break
            if time.monotonic() - last_change > args.hang:
                child.kill()
                child.wait()
                died = f"hang (no progress for {args.hang} s)"
                break
            if time.monotonic() >= deadline:
                child.kill()
                child.wait()
                break
        lines = progress.read_text().splitlines()
        current = None
        for line in lines[pos:]:
            if line.startswith("start "):
                current = int(line.split()[1])
            elif line.startswith("done "):
                _, i, cat, kind = line.split(maxsplit=3)
                counts[(cat, kind)] += 1
                current = None
            elif line.startswith("fail "):
                rec = json.loads(line[5:])
                problems.append(rec)
                counts[("failed", "assertion")] += 1
                print(f"FAILED case {args.seed}:{rec['i']}\n{rec['error']}\n", flush=True)
                current = None
        pos = len(lines)
        if died and current is not None:
            case = make_case(args.seed, current)
            rec = {"i": current, "error": f"{died}\n{case!r}"}
            problems.append(rec)
            counts[("failed", died.split()[0])] += 1
            print(f"CRASHED case {args.seed}:{current}: {rec['error']}\n", flush=True)
            start = current + 1
        elif died:
            start = (current or 0) + 1
            print(f"worker ended ({died}) between cases", flush=True)
        else:
            break
    total = sum(v for k, v in counts.items())
    print(f"{total} cases in {args.seconds:.0f} s budget (seed {args.seed}):")
    for k, v in sorted(counts.items()):
        print(f"  {k[0]:8} {k[1]:13} {v}")
    (out / f"problems-{args.seed}.json").write_text(json.dumps(problems, indent=1))
    print(f"{len(problems)} problem(s); details in {out}/problems-{args.seed}.json")
    return 1 if problems else 0


def main():
    sys.path.insert(0, str(HERE))
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hang", type=float, default=300, help="seconds without progress = hang")
    ap.add_argument("--out", default="fuzz-out")
    ap.add_argument("--replay", help="seed:index of one case to print and run")
    args = ap.parse_args()
    if args.replay:
        from fuzzgen import check_case
        seed, i = map(int, args.replay.split(":"))
        case = make_case(seed, i)
        print(repr(case))
        print(check_case(case))
        return 0
    return parent(args)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore::RuntimeWarning")
    sys.exit(main())
