"""Where the threads of a one-population search spend their time (issue 30): py-spy samples
every thread of a damped search on ``--workers`` worker threads, waiting ones included, and each
thread's samples are sorted into native fits, Python, and waiting (a futex or condition wait in
libc), the waits by what they wait for.

    python bench/search_threads.py                 # 4 searches of 8,192 candidates, 2 workers
    python bench/search_threads.py --candidates 4096 --searches 2 --raw samples.txt

Needs py-spy (``pip install py-spy``) and the permission to read another process's memory
(ptrace: as root, or with ``kernel.yama.ptrace_scope`` 0). A wait is told by its innermost frame
being an unnamed address in libc (py-spy names the C library's exported functions, not the
system-call stubs a blocked thread sits in); the reasons are the Python or native frames above
it: ``close`` (the round's last fit, run by another thread), ``reset`` (another thread still in
a batch's drain), ``the GIL after a drain`` (a native drain has ended and waits to run Python
again), ``the next round`` (the calling thread waits for the proposer thread's next round),
``no job`` (a pool thread with nothing to do). Measured on this 2-core VM: see
bench/results/one_population_threads_2026-12-07_s31.txt.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

SEARCH = """
import ndvm
ndvm.search("damped", max_candidates=256, seed=0, budget=3600, workers={workers})
for s in range({searches}):
    ndvm.search("damped", max_candidates={candidates}, seed=9 + s, budget=3600,
                workers={workers})
"""

_FRAME = re.compile(r"^(?P<name>.*?)(?: \((?P<where>[^()]*)\))?$")


def _name(frame):
    return _FRAME.match(frame).group("name")


def _waiting(frames):
    """Whether a sample's innermost frame is an unnamed address in libc (a blocked thread)."""
    m = _FRAME.match(frames[-1])
    return m.group("name").startswith("0x") and "libc.so" in (m.group("where") or "")


def _reason(names):
    """What a waiting sample waits for, from its frames' names."""
    if "close" in names:
        return "close: the round's last fit, on another thread"
    if "reset" in names:
        return "reset: another thread still in the batch's drain"
    if "drain" in names:
        return "the GIL, after a native drain"
    if "Future.result" in names or "Handle.result" in names:
        return "the next round, from the proposer thread"
    if "_worker" in names and names.index("_worker") >= len(names) - 6:
        return "no job (a pool thread)"
    return "other: " + next((n for n in reversed(names) if not n.startswith("0x")), "?")


def classify(lines):
    """{thread: Counter(kind -> samples)} of py-spy's raw lines (``stack count``, the stack's
    first frame naming the thread)."""
    out = collections.defaultdict(collections.Counter)
    for line in lines:
        line = line.rstrip()
        if not line:
            continue
        stack, n = line.rsplit(" ", 1)
        frames = stack.split(";")
        thread = ("calling thread" if "MainThread" in frames[0] else
                  "pool threads" if "ndvm-worker" in frames[0] else "other threads")
        names = [_name(f) for f in frames]
        if _waiting(frames):
            kind = "waiting for " + _reason(names)
        elif any(n.startswith("ndvm::") for n in names) and "drain" in names:
            kind = "native fits"
        else:
            kind = "Python (and native work under the GIL)"
        out[thread][kind] += int(n)
    return out


def report(counts):
    for thread in ("calling thread", "pool threads", "other threads"):
        c = counts.get(thread)
        if not c:
            continue
        total = sum(c.values())
        print(f"{thread} ({total} samples):")
        for kind, n in sorted(c.items(), key=lambda kv: -kv[1]):
            if n / total >= 0.005:
                print(f"  {n / total:6.3f}  {kind}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=8192)
    ap.add_argument("--searches", type=int, default=4)
    ap.add_argument("--rate", type=int, default=500, help="py-spy's samples a second")
    ap.add_argument("--raw", help="keep py-spy's raw samples in this file (or read them from it "
                    "when it exists, without running anything)")
    args = ap.parse_args()
    if args.raw and os.path.exists(args.raw):
        with open(args.raw) as f:
            report(classify(f))
        return
    spy = shutil.which("py-spy")
    if spy is None:
        ap.exit(2, f"{ap.prog}: needs py-spy: pip install py-spy\n")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "search.py")
        with open(script, "w") as f:
            f.write(SEARCH.format(workers=args.workers, searches=args.searches,
                                  candidates=args.candidates))
        raw = args.raw or os.path.join(tmp, "samples.txt")
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        done = subprocess.run([spy, "record", "--idle", "--threads", "--native", "-r",
                               str(args.rate), "-f", "raw", "-o", raw, "--", sys.executable,
                               script], env=env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0 or not os.path.exists(raw):
            ap.exit(1, f"{ap.prog}: py-spy failed:\n{done.stderr[-2000:]}")
        print(f"damped, {args.searches} searches of {args.candidates} candidates on "
              f"{args.workers} worker threads (after a warm-up), {args.rate} samples/s:")
        with open(raw) as f:
            report(classify(f))


if __name__ == "__main__":
    main()
