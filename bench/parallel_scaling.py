"""Scaling of ndvm.fit_many on the 247 co-search candidates (the paper's protocol), of a whole
co-search (each with its serial fraction, the share of a one-worker run spent outside the native
calibrations, and the speed-up Amdahl's law projects from it), and the per-task overhead of the
executor path on a Dask LocalCluster, which sets the default chunk size.

    python bench/parallel_scaling.py [--rounds 7] [--search-candidates 4000] [--dask]

Protocol: x = linspace(0.1, 6, 64), y = exp(-0.3x) cos(2x) + 0.02 N(0, 1) (seed 0), the first 44
points train, 50 Adam steps, lr 0.05, one start per candidate. Runs alternate 1 and 2 workers. The
machine is shared and Linux schedules sessions as groups, so a second thread gains nothing while
another session is busy: every run also records how much CPU the rest of the machine used
(/proc/stat minus this process), and the speed-up is reported over all pairs and over the quiet
pairs (the rest of the machine below 0.1 core during both runs).
"""
import argparse
import contextlib
import json
import multiprocessing
import os
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import ndvm
from ndvm import parallel, schedule

# ../shared/data next to the checkout, or $NDVM_SHARED_DATA (e.g. from a worktree)
CANDIDATES = Path(os.environ.get("NDVM_SHARED_DATA")
                  or Path(__file__).resolve().parents[2] / "shared" / "data"
                  ) / "cosearch_candidates.jsonl"
QUIET = 0.1  # cores used by other processes during a run for it to count as quiet
ADAM = {"optimizer": "adam", "steps": 50, "lr": 0.05}  # the protocol's calibration


def protocol():
    """The candidates' programs and the training data of the paper's protocol."""
    rows = [json.loads(line) for line in CANDIDATES.read_text().splitlines() if line.strip()]
    progs = [ndvm.parse(r["src"], name=f"cosearch[{i}]") for i, r in enumerate(rows)]
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x) + 0.02 * np.random.default_rng(0).standard_normal(64)
    return progs, {"x": x[:44]}, y[:44]


def _busy_seconds():
    """CPU seconds used so far by the whole machine (all cores, from /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def measure(fn, n):
    """(candidates/s, cores the rest of the machine used meanwhile, cores this process kept
    busy, its CPU seconds per candidate) for one call of ``fn``."""
    busy, mine, t = _busy_seconds(), time.process_time(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t
    ours = time.process_time() - mine
    return n / wall, max(0.0, _busy_seconds() - busy - ours) / wall, ours / wall, ours / n


def explain(one, two):
    """The 1 -> 2 worker speed-up of paired runs (rows of ``measure``) taken apart: how many
    cores the two-worker runs kept busy (what the code achieves) and how much more CPU a
    candidate took on two (above 1: each core ran slower while both were busy, the machine's
    share or contention between the threads); speed-up = busy / inflation."""
    busy = float(np.median(two[:, 2]))
    inflation = float(np.median(two[:, 3] / one[:, 3]))
    return (f"  taken apart: 2 workers kept {busy:.2f} cores busy (median), and a candidate took "
            f"{inflation:.2f}x the CPU it took on one (median of pairs): {busy / inflation:.2f}x")


def rate(fn, n):
    return measure(fn, n)[0]


def _search(n, workers):
    """The timed co-search: the damped task, ``n`` candidates, seed 0."""
    return ndvm.search("damped", max_candidates=n, seed=0, workers=workers)


def _workload(kind, size):
    """(function, candidates) of one timed one-worker call: "fit_many" (the 247 candidates x
    ``size``) or "search" (a damped co-search of ``size`` candidates)."""
    if kind == "fit_many":
        progs, data, target = protocol()
        batch = progs * size
        opts = dict(data=data, target=target, **ADAM)
        return (lambda: ndvm.fit_many(batch, workers=1, **opts)), len(batch)
    return (lambda: _search(size, 1)), size


def _twin(kind, size, barrier, conn):
    """A process of ``Twins``: sends its workload's candidate count once warm, then runs the
    workload whenever asked, in step with the other (``barrier``), and sends back when it
    started and ended."""
    fn, n = _workload(kind, size)
    fn()  # (warm)
    conn.send(n)
    while conn.recv():
        barrier.wait()
        t = time.perf_counter()  # (CLOCK_MONOTONIC: one clock for every process)
        fn()
        conn.send((t, time.perf_counter()))


class Twins:
    """Two separate processes running the same one-worker workload at once: nothing is shared
    between them but the machine, so their combined rate against one worker's is the most two
    cores give at that moment, the ceiling for two threads of one process."""

    def __init__(self, kind, size):
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(2)
        self.pipes, self.procs = [], []
        for _ in range(2):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_twin, args=(kind, size, barrier, there), daemon=True)
            proc.start()
            self.pipes.append(here)
            self.procs.append(proc)
        counts = [c.recv() for c in self.pipes]  # (both warm before anything is timed)
        self.n = counts[0]

    def rate(self):
        """Candidates/s of the two processes together (both started at once)."""
        for c in self.pipes:
            c.send(True)
        spans = [c.recv() for c in self.pipes]
        return 2 * self.n / (max(e for _, e in spans) - min(s for s, _ in spans))

    def close(self):
        for c in self.pipes:
            c.send(False)
        for p in self.procs:
            p.join()


def ceiling(twins_rates, one, two):
    """The line on the machine's ceiling: two separate processes' speed-up over one worker, and
    the two workers' against it (pair by pair)."""
    twins = np.asarray(twins_rates)
    return (f"  the machine's ceiling: two separate processes of one worker each ran "
            f"{np.median(twins / one[:, 0]):.2f}x one worker's rate (median of pairs); 2 workers "
            f"reached {np.median(two[:, 0] / twins):.2f} of it (median of pairs)")


def scaling(progs, data, target, rounds, repeat):
    """Candidates/s for 1 and 2 pool workers, runs interleaved; checks identical results."""
    batch = progs * repeat
    opts = dict(data=data, target=target, **ADAM)
    reference = ndvm.fit_many(batch, workers=1, **opts)  # warm every worker's machine
    runs, twins = {1: [], 2: [], "twins": []}, Twins("fit_many", repeat)
    for _ in range(rounds):
        for w in (1, 2):
            out = []
            runs[w].append(measure(lambda w=w, out=out: out.append(
                ndvm.fit_many(batch, workers=w, **opts)), len(batch)))
            assert all(_same(a, b) for a, b in zip(out[0], reference))
        runs["twins"].append(twins.rate())
    twins.close()
    serial = rate(lambda: [_fit_or_error(p, opts) for p in batch], len(batch))
    held = [held_fraction(lambda: ndvm.fit_many(batch, workers=1, **opts))
            for _ in range(max(3, rounds // 2))]
    one, two = np.array(runs[1]), np.array(runs[2])
    quiet = (one[:, 1] < QUIET) & (two[:, 1] < QUIET)
    for w, r in ((1, one), (2, two)):
        print(f"fit_many workers={w}: median {np.median(r[:, 0]):7.0f} cand/s, "
              f"quiet median {np.median(r[quiet, 0]) if quiet.any() else np.nan:7.0f}, "
              f"best {r[:, 0].max():7.0f}")
    print(f"plain ndvm.fit loop:  {serial:7.0f} cand/s")
    ratio = two[:, 0] / one[:, 0]
    print(f"speed-up 2 vs 1 worker: median {np.median(ratio):.2f}x over {len(ratio)} pairs; "
          f"{np.median(ratio[quiet]) if quiet.any() else np.nan:.2f}x over the {quiet.sum()} "
          f"quiet pairs; best/best {two[:, 0].max() / one[:, 0].max():.2f}x")
    print("  per pair (speed-up @ other load, cores): " + " ".join(
        f"{q:.2f}@{max(a, b):.1f}" for q, a, b in zip(ratio, one[:, 1], two[:, 1])))
    print(explain(one, two))
    print(ceiling(runs["twins"], one, two))
    f = float(np.median([h[0] for h in held]))
    fc = float(np.median([h[1] for h in held]))
    print(f"  fit_many's serial fraction (one worker, outside the native calibration calls): "
          f"median {f:.3f} of the wall time (runs: {' '.join(f'{x[0]:.3f}' for x in held)}); "
          f"Amdahl: {amdahl(f, 2):.2f}x on 2 cores, {amdahl(f, 16):.1f}x on 16, "
          f"{amdahl(f, 64):.1f}x on 64")
    print(f"  ... and of the CPU time: median {fc:.3f} (runs: "
          f"{' '.join(f'{x[1]:.3f}' for x in held)}); Amdahl: {amdahl(fc, 2):.2f}x on 2 cores, "
          f"{amdahl(fc, 16):.1f}x on 16, {amdahl(fc, 64):.1f}x on 64")


@contextlib.contextmanager
def timed_calls(owner, names, clocks=(time.perf_counter,), counted=False):
    """Yields a list, one total per clock, that grows by each clock's time spent in every call
    of ``owner``'s attributes ``names`` made meanwhile (in any thread), which stand wrapped in
    their place until the block ends; with ``counted``, the number of calls after them."""
    totals = [0.0] * len(clocks) + ([0] if counted else [])
    lock = threading.Lock()
    plain = {name: getattr(owner, name) for name in names}

    def timed(fn):
        def call(*args, **kwargs):
            start = [clock() for clock in clocks]
            try:
                return fn(*args, **kwargs)
            finally:
                spent = [clock() - t for clock, t in zip(clocks, start)]
                with lock:
                    for k, dt in enumerate(spent):
                        totals[k] += dt
                    if counted:
                        totals[-1] += 1
        return call

    for name, fn in plain.items():
        setattr(owner, name, timed(fn))
    try:
        yield totals
    finally:
        for name, fn in plain.items():
            setattr(owner, name, fn)


def native_seconds(cpu=True):
    """timed_calls() of every native calibration call (``Evaluator.calibrate``, a chunk on one
    thread, and ``Evaluator.drain``, a thread's share of a shared batch: both release the GIL):
    yields [seconds, CPU seconds of the thread making each call] (without ``cpu``: [seconds]).

    A measure of wall time alone should not read the CPU clock: on some VMs (this project's
    2-core VM since 2026-12-07) a read of ``time.thread_time`` after a native calibration takes a
    scheduler tick (~4 ms) now and then, which a wrapped call pays outside its native window and
    a wall-time share of the Python counts as the Python's (one island's serial fraction read
    0.16-0.22 with it, where its stage line said ~0.11)."""
    from ndvm.evaluator import Evaluator

    clocks = (time.perf_counter, time.thread_time) if cpu else (time.perf_counter,)
    return timed_calls(Evaluator, ("calibrate", "drain"), clocks)


def held_fraction(fn):
    """The shares of ``fn()``'s wall time and of its CPU time spent outside the native
    calibrations: checking, binding, staging and reading back, under the GIL. (The CPU share
    does not count the time the process waited for a core on a busy machine.)"""
    with native_seconds() as native:
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    return 1.0 - native[0] / wall, 1.0 - native[1] / cpu


@contextlib.contextmanager
def collecting_seconds():
    """Yields [seconds the garbage collector spent collecting, collections] while the block runs
    (every generation, any thread)."""
    import gc

    total, began = [0.0, 0], []

    def watch(phase, info):
        if phase == "start":
            began.append(time.perf_counter())
        elif began:
            total[0] += time.perf_counter() - began.pop()
            total[1] += 1

    gc.callbacks.append(watch)
    try:
        yield total
    finally:
        gc.callbacks.remove(watch)


def amdahl(serial, cores):
    """The speed-up on ``cores`` of a run whose fraction ``serial`` cannot run in parallel."""
    return 1.0 / (serial + (1.0 - serial) / cores)


def runs_text(xs, digits):
    """(median of ``xs``, "median M (runs: x1 x2 ...)" with ``digits`` decimals)."""
    m = float(np.median(xs))
    return m, f"median {m:.{digits}f} (runs: {' '.join(f'{x:.{digits}f}' for x in xs)})"


def search_scaling(n, rounds):
    """A co-search (damped task, ``n`` candidates, seed 0) on 1 and 2 workers (threads),
    runs interleaved, and its serial fraction: the share of a one-worker run's wall time spent
    outside the native calibrations (which release the GIL; proposing, simplifying, binding,
    scoring and bookkeeping hold it), measured by timing every ``Evaluator.calibrate`` call."""
    runs, fractions, cpu_shares, reference = {1: [], 2: [], "twins": []}, [], [], None
    ndvm.search("damped", max_candidates=64, seed=0, workers=2)  # warm the pool and machines
    twins = Twins("search", n)
    for _ in range(rounds):
        runs["twins"].append(twins.rate())
        for w in (1, 2):
            cpu = time.process_time()  # (os.times() counts in 10 ms steps)
            with native_seconds() if w == 1 else contextlib.nullcontext() as native:
                got, res = measure_result(lambda w=w: _search(n, w), n)
            cpu = time.process_time() - cpu
            srcs = [r["proposed"] for r in res.records]
            assert reference is None or srcs == reference, "the search depends on the workers"
            reference = srcs
            runs[w].append(got)
            if w == 1:
                fractions.append(1.0 - native[0] / res.elapsed)
                cpu_shares.append((1.0 - native[1] / cpu, native[1], cpu - native[1]))
    twins.close()
    one, two = np.array(runs[1]), np.array(runs[2])
    quiet = (one[:, 1] < QUIET) & (two[:, 1] < QUIET)
    ratio = two[:, 0] / one[:, 0]
    f, f_runs = runs_text(fractions, 2)
    print(f"search (damped, {n} candidates): workers=1 median {np.median(one[:, 0]):.0f} cand/s, "
          f"workers=2 median {np.median(two[:, 0]):.0f} cand/s")
    print(f"  speed-up 2 vs 1 worker: median {np.median(ratio):.2f}x over {len(ratio)} pairs; "
          f"{np.median(ratio[quiet]) if quiet.any() else np.nan:.2f}x over the {quiet.sum()} "
          f"quiet pairs")
    print("  per pair: " + " ".join(f"{q:.2f}" for q in ratio))
    print(explain(one, two))
    print(ceiling(runs["twins"], one, two))
    print(f"  serial fraction (outside native calibration, one worker): {f_runs}")
    print(f"  Amdahl projection from it: {amdahl(f, 2):.2f}x on 2 cores, {amdahl(f, 16):.1f}x on "
          f"16, {amdahl(f, 64):.1f}x on 64 (ceiling {1 / f:.1f}x)")
    # One worker runs every step on one thread; at two, the proposer thread proposes and scores
    # the next batch while the calling thread calibrates this one, and then calibrates too. The
    # GIL-held CPU time h (proposing, scoring, staging) is serial, the native time n is not: on
    # c cores the best is max(h, (n + h) / c) against n + h on one.
    share = float(np.median([c[0] for c in cpu_shares]))
    n_cpu = float(np.median([c[1] for c in cpu_shares]))
    h_cpu = float(np.median([c[2] for c in cpu_shares]))
    bound = (n_cpu + h_cpu) / max(h_cpu, (n_cpu + h_cpu) / 2)
    print(f"  CPU outside the native calibrations (one worker, all threads): median {share:.2f} of "
          f"the process's CPU ({h_cpu:.3f} s held vs {n_cpu:.3f} s native per search; runs: "
          f"{' '.join(f'{c[0]:.2f}' for c in cpu_shares)}); best 2-core speed-up it allows "
          f"{bound:.2f}x")


def measure_result(fn, n):
    """measure() of ``fn`` that also returns what ``fn`` returned."""
    out = []
    got = measure(lambda: out.append(fn()), n)
    return got, out[0]


def _fit_or_error(p, opts):
    try:
        return ndvm.fit(p, **dict(opts, unused_data="ignore"))  # as fit_many does
    except ndvm.SchemeError as e:
        return e


def _same(a, b):
    if isinstance(a, ndvm.CandidateError):
        return isinstance(b, ndvm.CandidateError) and str(a.error) == str(b.error)
    return a.history.tobytes() == b.history.tobytes() and a.params == b.params


def _noop(_):
    return None


def _tree_cpu():
    """CPU seconds used so far by this process and its children (a LocalCluster's workers)."""
    import psutil

    me, total = psutil.Process(), 0.0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def cpu_per_candidate(fn, n, idle=0.0, runs=3):
    """The least CPU (seconds) per candidate of ``fn()`` over ``runs`` calls, over this process
    and its children, less ``idle`` cores for the call's wall time (what the cluster's event
    loops and heartbeats use when no task runs). CPU time, unlike wall time, does not count
    waiting for a core on a busy machine, so it measures the executor path's own cost."""
    best = np.inf
    for _ in range(runs):
        c, t = _tree_cpu(), time.perf_counter()
        fn()
        best = min(best, (_tree_cpu() - c - idle * (time.perf_counter() - t)) / n)
    return best


def dask_overhead(progs, data, target):
    """Per-task overhead of client.get_executor() (empty tasks), and fit_many by chunk size:
    candidates/s (wall) and the CPU it costs per candidate over every process of the cluster,
    against the CPU of the same fits on the local pool (one worker): the executor path's own
    cost per candidate, the share of the work it adds."""
    from distributed import Client, LocalCluster

    opts = dict(data=data, target=target, **ADAM)
    batch = progs * 4
    reference = ndvm.fit_many(batch, workers=1, **opts)
    big = progs * 8  # (psutil counts CPU in 10 ms ticks)
    local = cpu_per_candidate(lambda: ndvm.fit_many(big, workers=1, **opts), len(big))
    print(f"local pool, 1 worker: {local * 1e6:.0f} us CPU a candidate")
    for processes in (False, True):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            ex = client.get_executor()
            for f in [ex.submit(_noop, i) for i in range(50)]:
                f.result()
            n = 400
            t = time.perf_counter()
            for f in [ex.submit(_noop, i) for i in range(n)]:
                f.result()
            per_task = (time.perf_counter() - t) / n
            t = time.perf_counter()
            for i in range(50):
                ex.submit(_noop, i).result()
            latency = (time.perf_counter() - t) / 50
            print(f"dask processes={processes}: {per_task * 1e3:.2f} ms/task amortized over "
                  f"{n} empty tasks, {latency * 1e3:.2f} ms round trip")
            time.sleep(1.0)
            c = _tree_cpu()
            time.sleep(2.0)
            idle = (_tree_cpu() - c) / 2.0
            print(f"  idle cluster: {idle:.3f} cores")
            for chunk in (1, 4, 16, 64, 256, None, len(big) // 2):
                out = []
                r = rate(lambda ex=ex, chunk=chunk, out=out: out.append(
                    ndvm.fit_many(batch, executor=ex, chunk_size=chunk, **opts)), len(batch))
                assert all(_same(a, b) for a, b in zip(out[0], reference))
                line = f"  chunk_size={chunk or 'default':>7}: {r:7.0f} cand/s"
                if chunk is None or chunk >= 64:
                    cpu = cpu_per_candidate(lambda ex=ex, chunk=chunk: ndvm.fit_many(
                        big, executor=ex, chunk_size=chunk, **opts), len(big), idle)
                    line += (f"; {cpu * 1e6:.0f} us CPU a candidate ({len(big)} per call), "
                             f"overhead {(cpu - local) * 1e6:.0f} us = "
                             f"{(cpu - local) / local:.2f} of the work")
                print(line)


def dask_search(n, rounds):
    """A co-search (damped, ``n`` candidates, seed 0) on a 2-worker LocalCluster of processes
    against the same search on two local threads with the same rounds (``batch`` =
    executor_round: the same candidates), runs alternated: candidates/s of each, and the tasks
    the cluster ran (their candidates and the seconds they worked, as each reports), against
    the scheduling cost of an empty task measured on the same cluster."""
    from distributed import Client, LocalCluster

    tasks = []
    plain = parallel._unpack

    def counted(packed):
        tasks.append((len(packed.items), packed.seconds))
        return plain(packed)

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        ex = client.get_executor()
        batch = parallel.executor_round(ex)
        for f in [ex.submit(_noop, i) for i in range(50)]:
            f.result()
        t = time.perf_counter()
        for f in [ex.submit(_noop, i) for i in range(400)]:
            f.result()
        per_task = (time.perf_counter() - t) / 400
        ndvm.search("damped", max_candidates=batch, seed=1, executor=ex)  # warm the workers
        rates, reference = {"dask": [], "local": []}, None
        for _ in range(rounds):
            for how in ("dask", "local"):
                kw = dict(executor=ex) if how == "dask" else dict(workers=2, batch=batch)
                if how == "dask":
                    tasks.clear()
                    parallel._unpack = counted
                try:
                    (r, *_), res = measure_result(
                        lambda kw=kw: ndvm.search("damped", max_candidates=n, seed=0, **kw), n)
                finally:
                    parallel._unpack = plain
                srcs = [rec["proposed"] for rec in res.records]
                assert reference is None or srcs == reference, "dask and local searches differ"
                reference = srcs
                rates[how].append(r)
    size = np.mean([c for c, _ in tasks])
    work = np.mean([s for _, s in tasks])
    print(f"search on a Dask LocalCluster (2 worker processes, {n} candidates, rounds of "
          f"{batch}): {np.median(rates['dask']):.0f} cand/s; on 2 local threads with the same "
          f"rounds {np.median(rates['local']):.0f} cand/s (the same candidates)")
    print(f"  its last run's {len(tasks)} tasks: {size:.0f} candidates and {work * 1e3:.0f} ms of "
          f"work each on average; an empty task costs {per_task * 1e3:.2f} ms here = "
          f"{per_task / work:.3f} of a task's work ({per_task / size * 1e6:.1f} us a candidate)")


def _stat(pid):
    """The fields of /proc/``pid``/stat after the command's name (the parent's id first)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def _proc_cpu(pids):
    """CPU seconds (user + system) used so far by the processes ``pids``."""
    ticks = sum(int(fields[11]) + int(fields[12]) for fields in map(_stat, pids))
    return ticks / os.sysconf("SC_CLK_TCK")


def _descendants(pid):
    """The process ids of ``pid``'s children, grandchildren, ... (from /proc)."""
    parent = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent[int(d)] = int(_stat(d)[1])
        except OSError:  # (it ended meanwhile)
            continue
    out, todo = [], [pid]
    while todo:
        of = todo.pop()
        kids = [p for p, pp in parent.items() if pp == of]
        out += kids
        todo += kids
    return out


def _cores(pids, fn):
    """(``fn()``, the cores the processes ``pids`` kept busy on average while it ran)."""
    cpu, t = _proc_cpu(pids), time.perf_counter()
    out = fn()
    return out, (_proc_cpu(pids) - cpu) / (time.perf_counter() - t)


def _coordinator_share(pids, search, n):
    """measure_result() of ``search()``, an island search on the worker processes ``pids``, and
    the coordinating process's share of all CPU (its own and the worker processes') while the
    islands run: the serial fraction (the model selection after them excluded)."""
    from ndvm.cosearch import loop

    theirs = _proc_cpu(pids)
    # (search_islands: the name the search calls, timed in its place)
    with timed_calls(loop, ("search_islands",), (time.process_time,)) as coordinator:
        got, res = measure_result(search, n)
    theirs = _proc_cpu(pids) - theirs
    return got, res, coordinator[0] / (coordinator[0] + theirs)


def _island_search(islands, eq_id):
    """(search(m, seed): an island search of m candidates, its description) for
    one_island_share: damped, or with ``eq_id`` that Feynman equation's data set (seed 0)."""
    run = dict(islands=islands, budget=3600, migration_every=256, workers=1)
    if eq_id is None:
        def search(m, seed):
            ndvm.search("damped", max_candidates=m, seed=seed, **run)
        return search, "damped"
    import feynman  # (bench/, first on sys.path when this file runs as a script)

    eq = next(e for e in feynman.load_equations() if e.id == eq_id)
    X, y, _, _ = feynman.make_data(eq, 0)

    def search(m, seed):
        ndvm.SymbolicRegressor(max_candidates=m, random_state=seed, **run).fit(X, y)
    return search, f"Feynman {eq_id}, {X.shape[1]} inputs, {y.size} rows"


@contextlib.contextmanager
def _island_clocks():
    """Yields [Island.run's seconds, the native calibrations' seconds within them, the data
    analysis's seconds, the native calibrations' seconds within that analysis] of the island
    searches run meanwhile (read once the block ends). (Only those within Island.run: the
    search's model selection after its islands calibrates too, natively, outside any island; and
    the analysis fits its candidate blocks natively, so a share without it leaves out its native
    seconds too.)"""
    from ndvm.cosearch import islands as isl
    from ndvm.cosearch import proposers

    out = [0.0, 0.0, 0.0, 0.0]
    with native_seconds(cpu=False) as native:
        def native_clock():
            return native[0]
        with (timed_calls(isl.Island, ("run",), (time.perf_counter, native_clock)) as spent,
              timed_calls(proposers.Mutate, ("_blocks",),
                          (time.perf_counter, native_clock)) as once):
            yield out
    out[:] = spent[0], spent[1], once[0], once[1]


def _shares(t):
    """(the share of Island.run's time outside the native calibrations, the same without the
    data analysis and its own native calibrations) of _island_clocks's ``t``."""
    spent, native, once, native_once = t
    return 1.0 - native / spent, 1.0 - (native - native_once) / (spent - once)


def _fresh_island_share(n, islands, seed, eq_id):
    """one_island_share's two shares of one search run in a process of its own after a warm-up
    on another task (ndvm's code run once, none of this search's caches: as a user's process
    runs its first search)."""
    other = "recurrence" if eq_id is None else "damped"
    ndvm.search(other, max_candidates=64 * islands, seed=0, islands=islands, budget=3600,
                migration_every=256, workers=1)
    search, _ = _island_search(islands, eq_id)
    with _island_clocks() as t:
        search(n, seed)
    return _shares(t)


def one_island_share(n, islands, rounds, eq_id=None):
    """The serial fraction of one island (the issue's item 3): the share of an island's own time
    (``Island.run``: its rounds of proposing, simplifying, validating, calibrating and scoring,
    on one thread) spent outside the native calibrations, on the island search's own code
    (``n`` candidates, ``islands`` islands, one worker: every epoch runs on this thread; run k
    with seed k, after a short warm-up with seed 0: a run of a seed met before would find its
    children's canonical forms and its parents cached by the earlier run, as no user's does)
    of the damped task (44 training rows), or with ``eq_id`` of that Feynman equation's data set
    (bench/feynman.py's, seed 0: 7,500 rows, each candidate calibrated on Task.fit_points of
    them). That Python, under the GIL, is what one population cannot spread over cores:
    Amdahl's ceiling for a single population is 1 / this share. The Python per candidate is
    about the same on any data; the calibration it is a share of grows with the rows.

    Every seed's search proposes the same small models and shape library first, whose
    canonical forms the process keeps: the runs after the first find them made. So the same
    shares are also measured with each run in a new process (``_fresh_island_share``), as a
    user's first search runs."""
    from ndvm.cosearch import islands as isl

    search, what = _island_search(islands, eq_id)
    search(64 * islands, 0)  # (warm)
    shares, steady, whole = [], [], []
    for _ in range(rounds):
        with _island_clocks() as t, timed_calls(isl, ("_epoch",)) as epochs:
            search(n, 1 + len(shares))
        share, without = _shares(t)
        shares.append(share)
        whole.append(1.0 - t[1] / epochs[0])
        # (the data's building blocks are analysed once a search: a longer search's share
        # tends to this one's without them)
        steady.append(without)
    s, text = runs_text(shares, 3)
    print(f"one island's own serial fraction ({what}; {n} candidates, {islands} islands run on "
          f"one worker; the share of Island.run's time outside the native calibrations): {text}; "
          f"one population on many threads is capped at {1 / s:.1f}x by it; without the data "
          f"analysis a search makes once (the building blocks): {runs_text(steady, 3)[1]}; of "
          f"its whole epochs (unpacking the island, its rounds, packing it and its records): "
          f"{runs_text(whole, 3)[1]}")
    fresh = []
    for k in range(rounds):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as one:
            fresh.append(one.submit(_fresh_island_share, n, islands, 1 + k, eq_id).result())
    print(f"  the same, each run in a new process (its first search): "
          f"{runs_text([f[0] for f in fresh], 3)[1]}; without the data analysis: "
          f"{runs_text([f[1] for f in fresh], 3)[1]}")
    island_stages(lambda: search(n, 1 + rounds), n, what)


def island_stages(search, n, what):
    """Where one island's time goes, per candidate, in one more run of ``search()`` (``n``
    candidates) with every stage timed (the timers' own cost is in the run, so the serial
    fraction is measured without them, above): proposing (of it the parents' trees, the
    building blocks the data suggest, and the rest: the native loop over the children, with
    their operators, canonical forms and duplicate checks, and the library's models),
    validating (a round's parse, free names and probe, the evaluation on the bound inputs of
    each candidate's free names: one native call), the evaluations outside the calibrations (scoring's, where a fit
    brings no values back), the native calibrations, scoring and folding a round, staging its
    fits, and the rest of Island.run; and the garbage collector's share of all of it (collecting
    at the end of an epoch, when the search lets it run again, or once a round's young objects
    are many)."""
    from ndvm.cosearch import islands as isl
    from ndvm.cosearch import proposers, rounds, score
    from ndvm.evaluator import Evaluator

    timers = {"run": (isl.Island, "run"), "propose": (proposers.Mutate, "propose"),
              "_parents": (proposers.Mutate, "_parents"), "_blocks": (proposers.Mutate, "_blocks"),
              "validate": (score.Scorer, "validate_round"), "evaluate": (Evaluator, "evaluate"),
              "next": (rounds._Rounds, "next"), "begin": (rounds._Rounds, "begin"),
              "finish": (rounds._Rounds, "finish"), "calibrate": (rounds._Rounds, "calibrate")}
    bred = _children_counts()
    with contextlib.ExitStack() as stack:
        t = {k: stack.enter_context(timed_calls(o, (m,))) for k, (o, m) in timers.items()}
        native = stack.enter_context(native_seconds(cpu=False))
        collecting = stack.enter_context(collecting_seconds())
        search()
    tries, made = (b - a for a, b in zip(bred, _children_counts()))
    us = {k: v[0] / n * 1e6 for k, v in t.items()}
    records = us["next"] - us["propose"] - us["validate"]
    rest = us["run"] - us["next"] - us["begin"] - us["calibrate"] - us["finish"]
    print(f"  where it goes ({what}, one more run with every stage timed), us a candidate: "
          f"calibrating {us['calibrate']:.0f} (native calibrations in all stages "
          f"{native[0] / n * 1e6:.0f}); proposing {us['propose']:.1f} (the parents "
          f"{us['_parents']:.1f}, the building blocks {us['_blocks']:.1f}, the children and the "
          f"library {us['propose'] - us['_parents'] - us['_blocks']:.1f}: {tries / n:.2f} children "
          f"bred a candidate, {made / n:.2f} canonical forms computed a candidate); "
          f"validating {us['validate']:.1f} (a round's parse and probe in one call); "
          f"evaluations outside the calibrations {us['evaluate']:.1f} (the "
          f"scoring's where a fit brought no values back); records and duplicate checks "
          f"{records:.1f}; "
          f"scoring and folding {us['finish']:.1f}; staging the fits {us['begin']:.1f}; the "
          f"rest of the round {rest:.1f}; of all of it, the garbage collector's "
          f"{collecting[0] / n * 1e6:.1f} ({collecting[1]} collections)")


def _children_counts():
    """(children bred, canonical entries computed) so far in this process: the Breeders' tries
    (kept or not: a duplicate, too large or needing too many parameters) and the Simplifiers'
    canonical forms computed (a child whose content was met before costs none)."""
    from ndvm._core import _core
    from ndvm.cosearch import proposers

    return (sum(b.n_tries for b in _core._BREEDERS.values()),
            sum(s.core.n_entries_made for s in proposers._SIMPLIFIERS.values()))


def _round_calls(n, batch):
    """Microseconds a call of each step of an island's rounds (round_costs), in this process."""
    from ndvm.cosearch import proposers, rounds

    steps = {"propose": (proposers.Mutate, "propose"), "prepare": (rounds._Rounds, "prepare"),
             "finish": (rounds._Rounds, "finish"), "begin": (rounds._Rounds, "begin")}
    run = dict(islands=4, budget=3600, migration_every=256, workers=1, batch=batch)
    ndvm.search("damped", max_candidates=1024, seed=0, **run)  # (warm)
    with contextlib.ExitStack() as stack:
        t = {k: stack.enter_context(timed_calls(o, (m,), counted=True))
             for k, (o, m) in steps.items()}
        ndvm.search("damped", max_candidates=n, seed=5, **run)
    return {k: v[0] / v[1] * 1e6 for k, v in t.items()}


def round_costs(n, batches=(16, 64)):
    """A round's fixed cost and a candidate's, for each step of an island's rounds (damped,
    ``n`` candidates, 4 islands on one worker, seed 5, after a warm-up with seed 0; each round
    size in a new process: a run of the same seed in the same process finds the earlier run's
    parents and canonical forms kept): every step timed per call at two round sizes, and
    t = a + b x batch drawn through the two points (a: the round's fixed cost, b: a
    candidate's). Large fixed costs would make larger rounds cut the serial fraction."""
    per_call = {}
    for b in batches:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as one:
            per_call[b] = one.submit(_round_calls, n, b).result()
    (b0, b1), lines = batches, []
    for k in per_call[b0]:
        t0, t1 = per_call[b0][k], per_call[b1][k]
        each = (t1 - t0) / (b1 - b0)
        lines.append(f"{k}: {t0:.1f} us a call at batch {b0}, {t1:.1f} at {b1}; fixed a round "
                     f"{t0 - each * b0:.0f} us, a candidate {each:.1f} us")
    print(f"a round's costs (damped, {n} candidates, 4 islands on one worker):\n  "
          + "\n  ".join(lines))


def islands_on_large_data(eq_id, n, islands, rounds):
    """The serial fraction of an island search on a Feynman data set (bench/feynman.py's data for
    equation ``eq_id``, seed 0: 7,500 training rows), through SymbolicRegressor(islands=...,
    workers=2), as a user runs it: what passes between the coordinator and the workers grows
    with the data, the candidates' own work does not (at most Task.fit_points rows)."""
    import feynman  # (bench/, first on sys.path when this file runs as a script)

    eq = next(e for e in feynman.load_equations() if e.id == eq_id)
    X, y, _, _ = feynman.make_data(eq, 0)
    pids = schedule.process_ids(2)
    est = {"islands": islands, "workers": 2, "budget": None, "random_state": 0}
    ndvm.SymbolicRegressor(max_candidates=64 * islands, **est).fit(X, y)  # (warm)
    shares = [_coordinator_share(pids, lambda: ndvm.SymbolicRegressor(
        max_candidates=n, **est).fit(X, y), n)[2] for _ in range(rounds)]
    s, text = runs_text(shares, 4)
    print(f"island search on Feynman {eq_id} ({X.shape[1]} inputs, {y.size} training rows, {n} "
          f"candidates, {islands} islands, 2 worker processes): serial fraction {text}; Amdahl: "
          f"{amdahl(s, 16):.1f}x on 16 cores, {amdahl(s, 64):.1f}x on 64")


def islands_scaling(n, islands, rounds, dask):
    """An island search (damped, ``n`` candidates, ``islands`` islands, seed 0) on one worker
    process (an executor of one) and on 2 (``workers=2``, as a user runs it: the islands' Seens
    stay in their home processes), runs alternated: candidates/s, the same records both ways,
    and the serial fraction: the share of all the CPU (this process's and the workers') that
    the coordinating process spent on 2 workers (merging, migrating), which Amdahl's law
    projects to many cores, without a run folder and writing one (out=, as the CLI always
    does: the records' lines, made where the epochs ran, written by the coordinator); and this
    machine's own limit, the candidates/s of the same search run twice at once, each on one
    worker process of its own, over one alone (nothing shared but the machine: no island search
    on two processes can do better here). With ``dask``, also a LocalCluster of 1 against one
    of 2 worker processes."""

    run = dict(islands=islands, max_candidates=n, seed=0, budget=None, migration_every=256)
    one = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    twin = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    on = {1: dict(executor=one), 2: dict(workers=2)}
    for where in (*on.values(), dict(executor=twin)):  # (processes started, ndvm imported)
        ndvm.search("damped", **where, **dict(run, max_candidates=64 * islands))
    pids = {1: list(one._processes), 2: schedule.process_ids(2)}

    def two_searches():  # (the same search twice at once, each on a lone worker process)
        other = threading.Thread(target=lambda: ndvm.search("damped", executor=twin, **run))
        other.start()
        ndvm.search("damped", executor=one, **run)
        other.join()

    rates, serial, writing, reference, twins = {1: [], 2: []}, [], [], None, []
    for _ in range(rounds):
        for w, where in on.items():
            (got, *_), res, share = _coordinator_share(
                pids[w], lambda where=where: ndvm.search("damped", **where, **run), n)
            rows = [(r["id"], r["model"], r["params"]) for r in res.records]
            assert reference is None or rows == reference, "the island search depends on workers"
            reference = rows
            rates[w].append(got)
            if w == 2:
                serial.append(share)
        with tempfile.TemporaryDirectory() as d:  # (as the CLI runs it: writing a run folder)
            writing.append(_coordinator_share(pids[2], lambda: ndvm.search(
                "damped", workers=2, out=Path(d) / "run", **run), n)[2])
        twins.append(measure(two_searches, 2 * n)[0] / rates[1][-1])
    twin.shutdown()
    one.shutdown()
    ratio = np.array(rates[2]) / np.array(rates[1])
    s, s_runs = runs_text(serial, 4)
    print(f"island search (damped, {n} candidates, {islands} islands, epochs of 256): 1 process "
          f"median {np.median(rates[1]):.0f} cand/s, 2 processes {np.median(rates[2]):.0f} "
          f"cand/s; speed-up median {np.median(ratio):.2f}x over {len(ratio)} pairs "
          f"({' '.join(f'{q:.2f}' for q in ratio)}); the same records")
    print(f"  serial fraction (the coordinator's share of all CPU while the islands run, 2 "
          f"processes): {s_runs}; Amdahl: "
          f"{amdahl(s, 2):.2f}x on 2 cores, {amdahl(s, 16):.1f}x on 16, {amdahl(s, 64):.1f}x on "
          f"64 (the model selection after the search, serial too, is not in it: cand/s counts "
          f"it)")
    w, w_runs = runs_text(writing, 4)
    print(f"  serial fraction writing the run folder (out=, as the CLI always does): {w_runs}; "
          f"Amdahl: {amdahl(w, 16):.1f}x on 16, {amdahl(w, 64):.1f}x on 64")
    print(f"  this machine's own limit: the same search twice at once, each on one worker "
          f"process, median {np.median(twins):.2f}x the candidates/s of one alone "
          f"({' '.join(f'{q:.2f}' for q in twins)}); the island search reaches "
          f"{np.median(ratio) / np.median(twins):.0%} of it")
    if dask:
        dask_islands(run, n, rounds, reference)


@contextlib.contextmanager
def _warm_cluster(w, run, config=None):
    """Yields the executor of a LocalCluster of ``w`` worker processes (one thread each) made
    for one measurement and warmed with a short run of the island search ``run`` (Dask's
    configuration ``config`` set while it runs, which its worker processes inherit); closed
    after."""
    import dask
    from distributed import Client, LocalCluster

    with (dask.config.set(config or {}),
          LocalCluster(n_workers=w, threads_per_worker=1, processes=True,
                       dashboard_address=None) as cluster, Client(cluster) as client):
        ex = client.get_executor()
        ndvm.search("damped", executor=ex, **dict(run, max_candidates=64 * run["islands"]))
        yield ex


def _dask_run(w, run, n, reference, config=None):
    """One island search on a LocalCluster of ``w`` worker processes that runs alone
    (``_warm_cluster``): (candidates/s, the cores the cluster's worker processes and this
    process kept busy during the search, the cores they keep busy idle, before it)."""
    with _warm_cluster(w, run, config) as ex:
        pids = [os.getpid(), *_descendants(os.getpid())]
        _, idle = _cores(pids, lambda: time.sleep(2.0))
        ((got, *_), res), busy = _cores(pids, lambda: measure_result(
            lambda: ndvm.search("damped", executor=ex, **run), n))
    rows = [(r["id"], r["model"], r["params"]) for r in res.records]
    assert rows == reference, "the island search depends on the cluster"
    return got, busy, idle


def _dask_twin(run, n, config, barrier):
    """One of two one-worker LocalClusters searching at once (each in a process of its own, with
    its own scheduler, both started together by ``barrier``): when its search began and ended
    (time.time(): one clock for the processes of a machine)."""
    with _warm_cluster(1, run, config) as ex:
        barrier.wait()
        began = time.time()
        ndvm.search("damped", executor=ex, **run)
        return began, time.time()


def _dask_twins(run, n, config):
    """This machine's own limit for a search on Dask: the candidates/s of the same search on two
    one-worker LocalClusters at once, each with its own scheduler in its own process (both
    searches' candidates over the time from the first's start to the last's end, as the twins
    on worker processes of ours are measured)."""
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as m, ProcessPoolExecutor(2, mp_context=spawn) as pool:
        barrier = m.Barrier(2)
        spans = [f.result() for f in [pool.submit(_dask_twin, run, n, config, barrier)
                                      for _ in range(2)]]
    return 2 * n / (max(b for _, b in spans) - min(a for a, _ in spans))


def dask_islands(run, n, rounds, reference):
    """The island search ``run`` on a Dask LocalCluster of 1 against one of 2 worker processes
    (one thread each), alternated, each cluster alone on the machine while it runs (an idle
    cluster beside it would take CPU from the two-worker run only: the one-worker run has a
    core to spare): candidates/s, the same records as on our own pool, and the cores Dask's
    processes keep busy with no work (its scheduler, nannies and workers' own threads: on 2
    cores, CPU the islands do not get). Each pair twice: with Dask's default configuration, and
    with its own monitoring turned down (``ndvm.schedule.DASK_QUIET``), alternated. And this
    machine's own limit on Dask (``_dask_twins``): two one-worker clusters searching at once,
    each with its scheduler, as the two-worker cluster's one, taking its share of the cores."""
    rates, busy, idle, twins = {}, {}, {}, {}
    for _ in range(rounds):
        for label, config in (("defaults", None), ("quiet", schedule.DASK_QUIET)):
            for w in (1, 2):
                got, b, i = _dask_run(w, run, n, reference, config)
                rates.setdefault((label, w), []).append(got)
                busy.setdefault((label, w), []).append(b)
                idle.setdefault((label, w), []).append(i)
            twins.setdefault(label, []).append(_dask_twins(run, n, config)
                                               / rates[label, 1][-1])
    for label, what in (("defaults", "Dask's default configuration"),
                        ("quiet", "Dask's own monitoring turned down (DASK_QUIET)")):
        one, two = rates[label, 1], rates[label, 2]
        ratio = np.array(two) / np.array(one)
        print(f"island search on a Dask LocalCluster, {what} (each cluster alone on the "
              f"machine): 1 worker process median {np.median(one):.0f} cand/s, 2 worker "
              f"processes {np.median(two):.0f} cand/s; speed-up median {np.median(ratio):.2f}x "
              f"over {len(ratio)} pairs ({' '.join(f'{q:.2f}' for q in ratio)}); the same "
              f"records")
        print(f"  cores busy (this process and the cluster's): with 1 worker median "
              f"{np.median(busy[label, 1]):.2f} while searching, {np.median(idle[label, 1]):.3f} "
              f"idle; with 2 workers {np.median(busy[label, 2]):.2f} while searching, "
              f"{np.median(idle[label, 2]):.3f} idle")
        print(f"  this machine's own limit on Dask: the same search on two one-worker clusters "
              f"at once (each its own scheduler), median {np.median(twins[label]):.2f}x the "
              f"candidates/s of one alone ({' '.join(f'{q:.2f}' for q in twins[label])}); the "
              f"two-worker cluster reaches {np.median(ratio) / np.median(twins[label]):.0%} of "
              f"it")


def island_travel(epochs, every=256, at=(10, 50, 100, 200, 400)):
    """What an island costs to travel between epochs as it grows: one damped island run for
    ``epochs`` epochs of ``every`` candidates, packed after each as its worker packs it and
    unpacked as the next epoch's worker unpacks it (``islands._pack``, ``pickle.loads``); at
    the epochs ``at``, the packed size, the two times, the sources its Seen holds and the
    share of the epoch's own time the round trip adds. The Seen holds every source the island
    has met, so the cost grows with the search: it must stay a small share of an epoch. (On
    worker processes of ours and on a Dask cluster the Seen now stays in its island's home
    process and only what an epoch added travels: this is the cost on any other executor.)"""
    import pickle

    from ndvm.cosearch import islands as isl

    task = ndvm.get_task("damped")
    island = isl.Island(task, 0, 2, 1, task.search_grammar().check(), 16)
    key = "travel"
    isl._keep(key, task)
    print(f"an island's travel between epochs (damped, epochs of {every} candidates):")
    try:
        for e in range(1, epochs + 1):
            t = time.perf_counter()
            island, _ = isl.run_epoch(island, every, [])
            t1 = time.perf_counter()
            packed = isl._pack(island, key, task)
            t2 = time.perf_counter()
            island = pickle.loads(packed)
            t3 = time.perf_counter()
            if e in at or e == epochs:
                print(f"  after epoch {e:4d}: {len(island.state.seen):7d} sources met, packed "
                      f"{len(packed) / 1e6:6.2f} MB, pack {1e3 * (t2 - t1):6.1f} ms, unpack "
                      f"{1e3 * (t3 - t2):6.1f} ms: {(t3 - t1) / (t1 - t):.3f} of the epoch's "
                      f"{1e3 * (t1 - t):.0f} ms")
    finally:
        isl._forget(key)


def island_moves(seconds, counts=(3, 4, 8)):
    """How often an island moves to another worker process, and what its Seen then costs: for
    each number of islands in ``counts``, one damped search of ``seconds`` on 2 worker
    processes, counting the epochs sent every digest of their island's Seen (it goes where it
    never ran, or where its Seen is gone) and those sent only the digests of the epochs since it
    last ran there, with their bytes. (An epoch whose island's Seen is where it runs is sent no
    digest.)"""
    from ndvm.cosearch import islands as isl

    submit = schedule.Scheduler.submit

    def counting(self, fn, *args, **where):
        held = args[7] if fn is isl._epoch and len(args) > 7 else None
        if held is not None:
            seen["epochs"] += 1
            if held[1] is not None:
                kind = "all" if len(held) < 4 or held[3] is None else "since"
                seen[kind] += 1
                seen[kind + " bytes"] += len(held[1])
        return submit(self, fn, *args, **where)

    print(f"islands moving between 2 worker processes (damped, {seconds:.0f} s searches):")
    schedule.Scheduler.submit = counting
    try:
        for n in counts:
            seen = dict.fromkeys(("epochs", "all", "all bytes", "since", "since bytes"), 0)
            res = ndvm.search("damped", islands=n, workers=2, budget=seconds, seed=1)
            print(f"  {n} islands: {len(res.records)} candidates, {seen['epochs']} epochs sent; "
                  f"every digest {seen['all']} ({seen['all bytes'] / 1e6:.2f} MB), the digests "
                  f"since {seen['since']} ({seen['since bytes'] / 1e6:.2f} MB)")
    finally:
        schedule.Scheduler.submit = submit


def dask_growth(n=40000, islands=4, after=4.0):
    """An island search on a Dask LocalCluster that changes while it runs: one of 1 worker
    process grown to 2, and one of 2 with a worker retired, ``after`` seconds in (damped, ``n``
    candidates): the epochs each worker ran from ``2 * after`` seconds on, and whether the
    records are those of the same search run inline."""
    from collections import Counter

    from distributed import Client, LocalCluster, get_task_stream

    run = dict(islands=islands, max_candidates=n, migration_every=256, budget=None, seed=3)
    rows = [(r["id"], r["model"], r["params"]) for r in ndvm.search("damped", workers=1,
                                                                    **run).records]
    print(f"island search on a Dask cluster that changes {after:.0f} s in (damped, {n} "
          f"candidates, {islands} islands):")
    for start, to in ((1, 2), (2, 1)):
        with (LocalCluster(n_workers=start, threads_per_worker=1, processes=True,
                           dashboard_address=None) as cluster, Client(cluster) as client):
            client.submit(int).result()  # (the workers up)

            def change():
                time.sleep(after)
                if to > start:
                    cluster.scale(to)
                else:
                    client.retire_workers(workers=[sorted(client.nthreads())[0]])

            t = threading.Thread(target=change)
            t0 = time.time()
            t.start()
            with get_task_stream(client) as stream:
                res = ndvm.search("damped", executor=client.get_executor(), **run)
            t.join()
        late = Counter(x["worker"] for x in stream.data if str(x["key"]).startswith("_epoch")
                       and x["startstops"][0]["start"] > t0 + 2 * after)
        same = [(r["id"], r["model"], r["params"]) for r in res.records] == rows
        print(f"  {start} -> {to} workers: {time.time() - t0:.1f} s; epochs started after "
              f"{2 * after:.0f} s by worker: {sorted(late.values(), reverse=True)}; "
              f"{'the same records as inline' if same else 'RECORDS DIFFER from inline'}")


def coordinator_over_time(seconds, islands=4, windows=10):
    """The coordinating process's share of all the CPU (the serial fraction of an island search)
    window by window over one long search: damped, ``islands`` islands on 2 worker processes,
    ``seconds`` of budget, writing a run folder as the CLI does; in each of ``windows`` equal
    windows the candidates made, their rate, the share in that window, what Amdahl's law
    projects from it on 16 cores, the mean size of the islands' packed states the
    coordinator sent in it (with the digests of its Seen when it sent them: an island that
    moved to another process), and the coordinating process's resident memory at its end.
    Each island carries the digests of every source it has met (its Seen) between epochs, so
    what the coordinator moves per epoch grows with the search: the share measured over the
    first seconds is not the share an hour in."""
    from ndvm.cosearch import islands as isl

    sizes, made, period = [], [0], seconds / windows
    submit, add = schedule.Scheduler.submit, isl.Records.add

    def submitting(self, fn, *args, **where):
        if fn is isl._epoch and isinstance(args[1], bytes):  # (the island, and the digests of
            held = args[7] if len(args) > 7 else None  # its Seen when they are sent with it)
            sizes.append(len(args[1]) + len(held[1] if held and held[1] is not None else b""))
        return submit(self, fn, *args, **where)

    def adding(self, block):
        made[0] += len(block)
        return add(self, block)

    ndvm.search("damped", islands=islands, max_candidates=64 * islands, budget=None,
                workers=2, seed=0)  # (the workers started and warm)
    pids, stop, t0 = schedule.process_ids(2), threading.Event(), time.perf_counter()
    print(f"the coordinator's share over a {seconds:.0f} s island search (damped, {islands} "
          f"islands, 2 worker processes, a run folder), windows of {period:.0f} s:")

    def watch():
        last = (t0, time.process_time(), _proc_cpu(pids), 0, 0)
        while not stop.wait(period):
            now = (time.perf_counter(), time.process_time(), _proc_cpu(pids), made[0],
                   len(sizes))
            mine, theirs = now[1] - last[1], now[2] - last[2]
            share = mine / max(mine + theirs, 1e-9)
            sent = sizes[last[4]:now[4]] or [0]
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            print(f"  at {now[0] - t0:5.0f} s: {now[3]:9d} candidates, "
                  f"{(now[3] - last[3]) / (now[0] - last[0]):5.0f}/s, share {share:.4f} "
                  f"({amdahl(share, 16):.1f}x on 16 cores), an island sent "
                  f"{sum(sent) / len(sent) / 1e3:7.0f} kB, coordinator {rss / 1e6:5.0f} MB",
                  flush=True)
            last = now

    schedule.Scheduler.submit, isl.Records.add = submitting, adding
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with tempfile.TemporaryDirectory() as out:
            ndvm.search("damped", islands=islands, budget=seconds, workers=2, seed=1,
                        out=f"{out}/run", progress=False)
    finally:
        stop.set()
        schedule.Scheduler.submit, isl.Records.add = submit, add
        watcher.join()


def islands_part(args):
    """The island measurements the command line asks for (``--only-islands`` or ``--islands``)."""
    islands_scaling(args.island_candidates, args.islands, args.rounds, args.dask)
    one_island_share(args.island_candidates // 2, args.islands, max(1, args.rounds // 2))
    if args.large_data:
        one_island_share(args.island_candidates // 2, args.islands, max(1, args.rounds // 2),
                         args.large_data)
        islands_on_large_data(args.large_data, args.island_candidates // 2, args.islands,
                              max(1, args.rounds // 2))


def _missing(args):
    """(module, what to pip install) for each module this run needs that is not installed."""
    import importlib.util

    needs = []
    if args.dask or args.dask_growth:
        needs += [("distributed", "'dask[distributed]'"), ("psutil", "psutil")]
    if args.large_data and (args.only_islands or args.islands):
        needs.append(("sympy", "sympy"))  # (bench/feynman.py's data sets)
    return [(m, e) for m, e in needs if importlib.util.find_spec(m) is None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=32,
                    help="batches of the 247 per timed call (long enough calls that a scheduler "
                         "hiccup does not decide a pair)")
    ap.add_argument("--search-candidates", type=int, default=4000,
                    help="candidates per timed search (0: skip the search scaling)")
    ap.add_argument("--dask", action="store_true", help="also measure the Dask executor path")
    ap.add_argument("--islands", type=int, default=4,
                    help="islands of the island-search scaling (0: skip it) and of --over-time")
    ap.add_argument("--island-candidates", type=int, default=8192,
                    help="candidates per timed island search")
    ap.add_argument("--only-islands", action="store_true",
                    help="only the island-search scaling")
    ap.add_argument("--travel", type=int, default=0, metavar="EPOCHS",
                    help="only an island's travel cost between epochs, over this many epochs")
    ap.add_argument("--moves", type=float, default=0, metavar="SECONDS",
                    help="only how often islands move between 2 processes, searches of this "
                         "many seconds with 3, 4 and 8 islands")
    ap.add_argument("--dask-growth", action="store_true",
                    help="only an island search on a Dask cluster that grows and shrinks")
    ap.add_argument("--over-time", type=float, default=0, metavar="SECONDS",
                    help="only the coordinator's share window by window over one island search "
                         "of this many seconds")
    ap.add_argument("--round-costs", type=int, default=0, metavar="CANDIDATES",
                    help="only a round's fixed cost and a candidate's, step by step, from "
                         "island searches of this many candidates in rounds of 16 and of 64")
    ap.add_argument("--large-data", default="I.9.18", metavar="EQUATION",
                    help="the Feynman equation whose data set the islands' serial fraction is "
                         "also measured on ('': skip it)")
    args = ap.parse_args()
    missing = _missing(args)
    if missing:
        ap.exit(2, f"{ap.prog}: this run needs {', '.join(m for m, _ in missing)}: pip install "
                   f"{' '.join(sorted({e for _, e in missing}))} (or, in the checkout, pip install -c "
                   f"constraints.txt '.[bench]')\n")
    if args.round_costs:
        round_costs(args.round_costs)
        return
    if args.travel:
        island_travel(args.travel)
        return
    if args.over_time:
        coordinator_over_time(args.over_time, args.islands)
        return
    if args.moves:
        island_moves(args.moves)
        return
    if args.dask_growth:
        dask_growth()
        return
    if args.only_islands:
        islands_part(args)
        return
    if not CANDIDATES.is_file():
        print(f"(the paper's candidates are not at {CANDIDATES}: set NDVM_SHARED_DATA to the "
              f"folder that holds cosearch_candidates.jsonl; fit_many and search scaling skipped)")
        if args.islands:
            islands_part(args)
        return
    progs, data, target = protocol()
    print(f"{len(progs)} candidates, cores available: {schedule.default_workers()}, "
          f"load average: {os.getloadavg()[0]:.2f}")
    scaling(progs, data, target, args.rounds, args.repeat)
    if args.search_candidates:
        search_scaling(args.search_candidates, args.rounds)
    if args.dask:
        dask_overhead(progs, data, target)
        dask_search(max(args.search_candidates, 2000), max(2, args.rounds // 3))
    if args.islands:
        islands_part(args)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
