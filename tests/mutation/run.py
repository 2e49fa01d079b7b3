"""Mutation testing: plant each bug of tests/mutation/mutants.py in a copy of the tree, rebuild
incrementally, run the tests that should notice, and report which mutants survived.

    python tests/mutation/run.py --list              # the mutants, with their targets
    python tests/mutation/run.py                     # all mutants, one worker
    python tests/mutation/run.py --only num-mod-db   # one mutant (repeatable)
    python tests/mutation/run.py --exclude fit-      # all but those (repeatable)
    python tests/mutation/run.py --baseline b041faf  # also run the tests as they were at b041faf

The tree (git's tracked and untracked, not ignored, files) is copied to --workdir (default
$TMPDIR/ndvm-mutation/slotK/tree), installed once in editable mode into its own venv, and rebuilt
with ninja after every patch, so only the translation units that include the patched file are
recompiled. A mutant whose snippet does not occur exactly once is STALE (re-anchor it); one that
does not compile is BUILD-ERROR; neither counts in the kill rate, and neither do mutants marked
equivalent. Not collected by pytest (no test_ prefix); see tests/mutation/README.md.
"""
import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from mutants import MUTANTS  # noqa: E402

BUILD_DIR = "build/mutation"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def tracked_files(root):
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                         check=True, capture_output=True).stdout.decode()
    return [p for p in out.split("\0") if p and not p.startswith("build/") and (root / p).is_file()]


def sync_tree(src, dst):
    """Copies the files of src to dst, leaving unchanged files (and their mtimes) alone."""
    dst.mkdir(parents=True, exist_ok=True)
    for rel in tracked_files(src):
        a, b = src / rel, dst / rel
        data = a.read_bytes()
        if b.exists() and b.read_bytes() == data:
            continue
        b.parent.mkdir(parents=True, exist_ok=True)
        b.write_bytes(data)
        shutil.copymode(a, b)


def base_site_dirs():
    """site-packages of the running interpreter: the dependencies the slot's venv shares (meson-
    python among them, which the slot's build needs). The running venv's own are left out only
    when they hold an installed ndvm package, which could shadow the slot's copy; an editable
    install there is a .pth file the slot never runs (only a venv's own site dirs run theirs)."""
    own = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    dirs = []
    for p in sys.path:
        if p.endswith("site-packages") and Path(p).is_dir() and p not in dirs:
            dirs.append(p)
    for sp in own:  # entries of the running venv's .pth files that point at other site dirs
        for pth in Path(sp).glob("*.pth"):
            for line in pth.read_text().splitlines():
                if line.endswith("site-packages") and Path(line).is_dir() and line not in dirs:
                    dirs.append(line)
    return [d for d in dirs if d not in own or not Path(d, "ndvm").is_dir()]


class Slot:
    """One copy of the tree with its own venv and build directory."""

    def __init__(self, path, opt):
        self.path = path
        self.tree = path / "tree"
        self.venv = path / "venv"
        self.py = self.venv / "bin" / "python"
        self.opt = opt

    def setup(self, baseline):
        sync_tree(ROOT, self.tree)
        # tests find ../shared/data relative to the checkout, or $NDVM_SHARED_DATA (a worktree)
        env_data = os.environ.get("NDVM_SHARED_DATA")
        shared = Path(env_data).parent if env_data else ROOT.parent / "shared"
        link = self.path / "shared"
        if shared.is_dir() and not link.exists():
            link.symlink_to(shared)
        if not (link / "data").is_dir():
            log(f"[{self.path.name}] no reference data at {link}/data: the tests that read it "
                "will skip (set NDVM_SHARED_DATA=/path/to/shared/data)")
        if baseline:
            old = self.tree / ".tests_before"
            shutil.rmtree(old, ignore_errors=True)
            old.mkdir()
            arch = subprocess.run(["git", "archive", baseline, "tests"], cwd=ROOT, check=True,
                                  capture_output=True).stdout
            subprocess.run(["tar", "-x", "--strip-components=1", "-C", str(old)], input=arch,
                           check=True)
        if not self.py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
            sp = subprocess.run([str(self.py), "-c", "import sysconfig;"
                                 "print(sysconfig.get_paths()['purelib'])"], check=True,
                                capture_output=True, text=True).stdout.strip()
            Path(sp, "_mutation_base.pth").write_text("\n".join(base_site_dirs()) + "\n")
        if not (self.tree / BUILD_DIR / "build.ninja").exists():
            log(f"[{self.path.name}] installing the copy (a full build; a few minutes)")
            subprocess.run([str(self.py), "-m", "pip", "install", "-q", "--no-build-isolation",
                            "--no-deps", "-e", ".", f"-Cbuild-dir={BUILD_DIR}",
                            f"-Csetup-args=-Doptimization={self.opt}"],
                           cwd=self.tree, check=True)
        return self.build()

    def build(self):
        """(ok, output) of an incremental build."""
        r = subprocess.run(["ninja", "-C", BUILD_DIR], cwd=self.tree, capture_output=True,
                           text=True)
        return r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    def pytest(self, args, timeout):
        """'pass', 'fail' or 'timeout', and the tail of the output."""
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MESONPY_EDITABLE_VERBOSE="")
        cmd = [str(self.py), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=", *args]
        try:
            r = subprocess.run(cmd, cwd=self.tree, capture_output=True, text=True,
                               timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return "timeout", ""
        if r.returncode == 0:
            return "pass", r.stdout[-800:]
        if r.returncode in (3, 4, 5):  # internal or usage error, nothing collected: a wrong
            return "error", r.stdout[-2000:] + r.stderr[-2000:]  # test id in the mutant list
        return "fail", r.stdout[-1500:] + r.stderr[-800:]


def before_args(tree, args):
    """The same test selection against the baseline's tests (missing files are dropped)."""
    out = []
    for a in args:
        if a.startswith("tests/"):
            a = ".tests_before/" + a[len("tests/"):]
            if not (tree / a.split("::")[0]).exists():
                continue
        out.append(a)
    return out if any(a.startswith(".tests_before/") for a in out) else None


def run_mutant(slot, m, timeout, baseline):
    rec = {"id": m.id, "file": m.file, "models": m.models, "equivalent": m.equivalent}
    path = slot.tree / m.file
    text = path.read_text()
    n = text.count(m.find)
    if n != 1:
        rec["status"] = "STALE"
        rec["detail"] = f"the snippet occurs {n} times in {m.file}"
        return rec
    t0 = time.time()
    try:
        path.write_text(text.replace(m.find, m.replace))
        if m.file.endswith((".hpp", ".cpp", ".pyx", ".pxd")):
            ok, out = slot.build()
            if not ok:
                rec["status"] = "BUILD-ERROR"
                rec["detail"] = out[-1500:]
                return rec
        status, out = slot.pytest(m.tests, timeout)
        rec["after"] = status
        rec["detail"] = out
        if baseline:
            old = before_args(slot.tree, m.tests)
            rec["before"] = slot.pytest(old, timeout)[0] if old else "no-tests"
    finally:
        path.write_text(text)
        rec["seconds"] = round(time.time() - t0, 1)
    killed = {"fail": "killed", "timeout": "killed", "pass": "survived", "error": "ERROR"}
    rec["status"] = killed[rec["after"]]
    if baseline:
        rec["status_before"] = killed.get(rec["before"], "survived")
    return rec


def sanity(slot, mutants, timeout, baseline):
    """Every selected test must pass on the unmutated tree, or no kill would mean anything."""
    sets = {tuple(m.tests) for m in mutants}
    bad = []
    for args in sorted(sets):
        status, out = slot.pytest(list(args), timeout)
        if status != "pass":
            bad.append((args, status, out))
        if baseline:
            old = before_args(slot.tree, list(args))
            if old:
                status, out = slot.pytest(old, timeout)
                if status != "pass":
                    bad.append((tuple(old), status, out))
    return bad


def kill_rate(recs, key):
    counted = [r for r in recs if r.get(key) in ("killed", "survived") and not r["equivalent"]]
    killed = sum(r[key] == "killed" for r in counted)
    return killed, len(counted)


def report(recs, baseline):
    w = max(len(r["id"]) for r in recs)
    head = f"{'mutant':<{w}}  {'file':<34} " + ("before    " if baseline else "") + "after     s"
    print(head)
    print("-" * len(head))
    for r in recs:
        st = r["status"]
        if r["equivalent"] and st in ("killed", "survived"):
            st += " (equiv.)"
        b = f"{r.get('status_before', '-'):<10}" if baseline else ""
        print(f"{r['id']:<{w}}  {r['file']:<34} {b}{st:<10}{r.get('seconds', 0):>5}")
    print()
    stale = [r["id"] for r in recs if r["status"] in ("STALE", "BUILD-ERROR", "ERROR")]
    if stale:
        print("!!! NOT APPLICABLE (re-anchor or fix these mutants): " + ", ".join(stale))
        for r in recs:
            if r["id"] in stale:
                print(f"  {r['id']}: {r['status']}: {r.get('detail', '')[:300]}")
    k, n = kill_rate(recs, "status")
    print(f"kill rate: {k}/{n} = {100 * k / max(n, 1):.0f}% (equivalent, stale and non-building "
          "mutants excluded)")
    if baseline:
        k, n = kill_rate(recs, "status_before")
        print(f"kill rate with the tests of {baseline}: {k}/{n} = {100 * k / max(n, 1):.0f}%")
    surv = [r["id"] for r in recs if r["status"] == "survived" and not r["equivalent"]]
    if surv:
        print("survivors: " + ", ".join(surv))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--only", action="append", default=[], metavar="ID",
                    help="run only this mutant (repeatable; a prefix selects several)")
    ap.add_argument("--exclude", action="append", default=[], metavar="ID",
                    help="leave out the mutants whose id starts with this (repeatable)")
    ap.add_argument("--jobs", type=int, default=1, help="parallel slots (each its own copy and "
                    "build; the first run of each slot is a full build)")
    ap.add_argument("--workdir", type=Path,
                    default=Path(tempfile.gettempdir()) / "ndvm-mutation",
                    help="where the copies live; reused across runs (incremental builds)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    ap.add_argument("--baseline", metavar="REV",
                    help="also run each mutant's tests as they were at this git revision")
    ap.add_argument("--opt", default="0", help="C++ optimization level of a new slot's build "
                    "(-O0 rebuilds about twice as fast as -O3)")
    ap.add_argument("--no-sanity", action="store_true",
                    help="skip checking that the unmutated tree passes the selected tests")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--spread", action="store_true",
                    help="interleave the mutants of different files (for a partial run)")
    ap.add_argument("--cheap-first", action="store_true",
                    help="run the mutants that rebuild the least first")
    ap.add_argument("--setup-only", action="store_true",
                    help="copy and build the slots, then stop")
    a = ap.parse_args(argv)

    ids = [m.id for m in MUTANTS]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        sys.exit(f"duplicate mutant ids: {sorted(dup)}")
    mutants = [m for m in MUTANTS if (not a.only or any(m.id.startswith(o) for o in a.only))
               and not any(m.id.startswith(x) for x in a.exclude)]
    if a.spread:  # round robin over the mutated files, so a partial run covers every area
        by_file = {}
        for m in mutants:
            by_file.setdefault(m.file, []).append(m)
        mutants = [m for k in range(max(len(v) for v in by_file.values()))
                   for v in by_file.values() if k < len(v) for m in [v[k]]]
    if a.cheap_first:  # python, then one extension module, then the core every module includes
        mutants.sort(key=lambda m: (0 if m.file.endswith(".py") else 1 if "_core/fit/" in m.file
                                    or m.file.startswith("clients/") else 2
                                    if m.file.endswith(".cpp") else 3))
    if a.list:
        for m in mutants:
            eq = f"  [equivalent: {m.equivalent}]" if m.equivalent else ""
            print(f"{m.id:<28} {m.file:<34} {m.models}{eq}\n{'':<29}tests: {' '.join(m.tests)}")
        print(f"\n{len(mutants)} mutants")
        return 0
    if not mutants:
        sys.exit("no mutant matches --only / --exclude")

    slots = [Slot(a.workdir / f"slot{k}", a.opt) for k in range(max(1, a.jobs))]
    for s in slots:
        s.path.mkdir(parents=True, exist_ok=True)
        ok, out = s.setup(a.baseline)
        if not ok:
            sys.exit(f"the unmutated copy does not build:\n{out}")
    if a.setup_only:
        return 0
    t0 = time.time()
    if not a.no_sanity:
        bad = sanity(slots[0], mutants, a.timeout, a.baseline)
        if bad:
            for args, status, out in bad:
                log(f"unmutated tree: {' '.join(args)}: {status}\n{out}")
            sys.exit("some selected tests fail without any mutant: fix them first")
        log(f"sanity: every selected test passes unmutated ({time.time() - t0:.0f} s)")

    work = queue.Queue()
    for m in mutants:
        work.put(m)
    recs, lock = {}, threading.Lock()

    def worker(slot):
        while True:
            try:
                m = work.get_nowait()
            except queue.Empty:
                return
            rec = run_mutant(slot, m, a.timeout, a.baseline)
            with lock:
                recs[m.id] = rec
                if a.json:
                    a.json.write_text(json.dumps(list(recs.values()), indent=1))
                log(f"[{slot.path.name}] {m.id}: {rec['status']}"
                    + (f" (before: {rec.get('status_before')})" if a.baseline else "")
                    + f" {rec.get('seconds', 0)} s")

    threads = [threading.Thread(target=worker, args=(s,)) for s in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in slots:  # leave every copy built from unmutated sources
        s.build()
    ordered = [recs[m.id] for m in mutants]
    report(ordered, a.baseline)
    print(f"\n{len(ordered)} mutants in {time.time() - t0:.0f} s")
    if a.json:
        a.json.write_text(json.dumps(ordered, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
