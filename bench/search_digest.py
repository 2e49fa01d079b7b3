"""A digest of seeded searches' records, to check a change leaves every record as it was: three
searches (damped, 1 island, 1,500 candidates; damped, 2 islands, 1,200; recurrence, 1 island,
800; seed 3, one worker), each record of their candidates.jsonl with its times left out (the
fields whose names hold "time" or "seconds", the only ones that differ from run to run).

    python bench/search_digest.py                  # prints the three digests
    python bench/search_digest.py --out a.json     # and writes them; then on the changed tree:
    python bench/search_digest.py --out b.json; cmp a.json b.json

A change that should not alter what a search finds (a leaner loop, a faster rule) must leave the
digests as they were; ``--records`` also writes each search's records (times left out), to see
the first record that differs. (``bench/fit_many_digest.py`` is the same check of
``ndvm.fit_many``.) About 2 s.
"""
import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import ndvm

SEARCHES = (("damped", 1, 1500), ("damped", 2, 1200), ("recurrence", 1, 800))
SEED = 3


def timeless(record):
    """``record`` without the fields that hold a time."""
    return {k: v for k, v in record.items() if "time" not in k and "seconds" not in k}


def search_records(task, islands, n):
    """The records (times left out) of the seeded search of ``task``."""
    with tempfile.TemporaryDirectory() as d:
        ndvm.search(task, max_candidates=n, budget=3600, seed=SEED, islands=islands, workers=1,
                    out=d, progress=False)
        with open(Path(d) / "candidates.jsonl", encoding="utf-8") as f:
            return [timeless(json.loads(line)) for line in f]


def digest(records):
    """The first 12 hex digits of a sha256 over ``records``, each as its sorted-key JSON."""
    h = hashlib.sha256()
    for r in records:
        h.update(json.dumps(r, sort_keys=True).encode())
    return h.hexdigest()[:12]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the digests to this JSON file")
    p.add_argument("--records", help="write each search's records to this JSON file")
    args = p.parse_args(argv)
    runs = {f"{task} islands={islands} n={n}": search_records(task, islands, n)
            for task, islands, n in SEARCHES}
    digests = {name: digest(records) for name, records in runs.items()}
    for name, d in digests.items():
        print(f"{d}  {name} ({len(runs[name])} records)")
    if args.out:
        Path(args.out).write_text(json.dumps(digests, indent=1) + "\n", encoding="utf-8")
    if args.records:
        Path(args.records).write_text(json.dumps(runs) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
