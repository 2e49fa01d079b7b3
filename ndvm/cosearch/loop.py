"""The co-search loop (``ndvm.search``): rounds of propose -> validate -> calibrate -> score, the
Pareto front, the model selection, the run folder.

One population runs here, its rounds pipelined over threads (``rounds.py`` holds a round's
steps, ``records.py`` the records and the run folder); ``islands > 1`` runs several populations
in worker processes or on an executor (``islands.py``). A resumed run replays its record file.
"""
import inspect
import json
import math
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import ndvm
from ndvm._core import Stop
from ndvm.cosearch import rounds
from ndvm.cosearch.islands import check_islands, island_workers, search_islands
from ndvm.cosearch.proposers import Proposer, Replay, check_options, make_proposer
from ndvm.cosearch.records import (RECORD_FILE, SUMMARY_FILE, ById, Records, RunExistsError,
                                   _existing, _good, _iter_records, _jsonable, _lines, _load,
                                   _open_run, holding, pareto_front, run_schema,
                                   uninterrupted)
from ndvm.cosearch.rounds import (ResumeMismatch, SearchState, _Batch, _fittest, _Rounds,
                                   lost_executor, show_warning)
from ndvm.cosearch.score import Scorer
from ndvm.cosearch.select import front_stderr, select
from ndvm.cosearch.sexpr import to_tree
from ndvm.cosearch.task import predict
from ndvm.cosearch.tasks import Task, get_task
from ndvm.fit_options import whole_number
from ndvm.parallel import collect_young, executor_round, gc_paused
from ndvm.schedule import ExecutorLost, Scheduler, check_workers, default_workers

__all__ = ["search", "SearchResult", "pareto_front", "RunExistsError", "ResumeMismatch",
           "RECORD_FILE", "SUMMARY_FILE", "run_schema"]

BATCH = 16  # candidates per round on local threads (on an executor: ndvm.parallel.executor_round)


@dataclass
class SearchResult:
    """The outcome of ``ndvm.search``.

    records: one dict per candidate, in the order proposed (``Records``: a read-only sequence,
        kept compressed, whose records are made as they are read; change a copy;
        ``list(result.records)`` is a plain list, ``pandas.DataFrame(result.records)`` a
        table): ``id``,
        ``proposer``, ``proposed`` (the program as the proposer wrote it), ``model`` (the
        program calibrated: ``proposed`` simplified, None when it never got that far),
        ``params`` (the fitted parameters of ``model``, name -> float: evaluate ``model`` with
        them to reproduce every number),
        ``status`` ("ok", "invalid", "failed", "duplicate"),
        ``train_error`` and ``heldout_error`` (mean squared error; the NLL for likelihood tasks),
        ``r2`` (held-out R^2, None for likelihood tasks), ``size`` (atoms), ``skeleton``,
        ``error`` (why it is invalid or failed) and ``time`` (seconds since the search began).
        A refit of an earlier record (``refits``) has proposer "refit" and ``refit_of`` its id.
    front: the ok records not dominated in (held-out error, size), by increasing size; for
        least-squares tasks copies of them, each with ``stderr``, its parameters' standard
        errors on the points its calibration used (``select.front_stderr``).
    best: the selected model (None when none was calibrated): for least-squares tasks the
        smallest front member within one standard error of the lowest cross-validated error
        (or within the search's optimism, when wider: ``select.search_optimism``), refitted on
        all the data (``ndvm.cosearch.select``): ``model`` and ``params`` (that
        refit), errors recomputed for that pair, ``mse_all``/``r2_all``, ``front_member`` (the
        front record it came from, its held-out scores) and ``selection`` (why); for likelihood
        tasks the front member of lowest NLL.
    first_good: the first record that is a good fit (held-out R^2 above ``task.threshold``;
        any finite NLL for likelihood tasks), or None.
    elapsed: seconds; proposer: its name; seed; stopped: why the search ended ("budget",
        "candidates", "exhausted", "success", "proposer failed", "interrupted", "executor
        lost": the executor stopped running the work, a Dask cluster whose scheduler was
        lost; the warnings say so).
    warnings: what the run met, in order: the proposer's (why an llm request failed), an
        island search's (a worker that died, islands a time budget left unrun, epochs given up),
        a note that one population's proposing thread held its workers back.
    settings: what, beside the task and the proposer, makes the run's candidates (seed, batch,
        refits, islands, migration_every, migrants, fit_options, proposer_options): a resumed
        run must give the same (``resume``).
    summary(): the JSON-ready digest written to ``summary.json``.
    """

    task: Task
    records: Records
    front: list
    best: dict
    first_good: dict
    elapsed: float
    proposer: str
    seed: int
    stopped: str
    warnings: list = field(default_factory=list)
    selection: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.records, Records):
            self.records = Records(self.records)

    @property
    def lowest_error(self):
        """The front member with the lowest held-out error (the front's last)."""
        return self.front[-1] if self.front else None

    def _record(self, which):
        """The best record (``which`` None), the front's ``which``-th, or the record given;
        ValueError without one."""
        if which is None:
            rec = self.best
        elif whole_number(which):
            if not -len(self.front) <= which < len(self.front):
                raise IndexError(f"which is an index into the front (0 to {len(self.front) - 1}: "
                                 f"smallest first), not a record id; got {which}")
            rec = self.front[which]
        elif isinstance(which, dict) and "model" in which:
            rec = which
        else:
            raise TypeError(f"which is None (the best), an index into the front or a record, "
                            f"got {which!r}")
        if rec is None:
            raise ValueError("the search found no model")
        return rec

    def tree(self, which=None):
        """The program tree of the best (or a front member: an index, or a record)."""
        rec = self._record(which)
        return to_tree(rec["model"])

    def predict(self, data, which=None):
        """The best model's (or a front member's) prediction at ``data`` (name -> [N])."""
        rec = self._record(which)
        prog = ndvm.parse(rec["model"])
        data = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in data.items()}
        missing = [n for n in prog.free_names if n not in data and n not in rec["params"]
                   and n not in self.task.consts]
        if missing:
            raise ValueError(f"predict needs the input(s) {', '.join(missing)}")
        return np.array(predict(ndvm.Evaluator(), prog, rec["params"], data, self.task.consts))

    def sympy(self, which=None, digits=None):
        """The best model (or a front member) as a SymPy expression, parameters substituted.
        ``which``: None (the selected model), an index into ``front`` (0: its smallest) or a
        record."""
        from ndvm.cosearch.export import to_sympy
        return to_sympy(self.tree(which), self._record(which)["params"], digits=digits)

    def latex(self, which=None, digits=6):
        """The best model (or a front member) as LaTeX."""
        from ndvm.cosearch.export import to_latex
        return to_latex(self.tree(which), self._record(which)["params"], digits=digits)

    @property
    def n_calibrated(self):
        """Candidates that were calibrated and scored."""
        return self.records.counts().get("ok", 0)

    def summary(self):
        """A JSON-ready summary of the run."""
        def slim(r):
            return None if r is None else {k: r[k] for k in _SUMMARY_FIELDS if k in r}
        n, counts = len(self.records), self.records.counts()
        return {
            "task": self.task.name, "proposer": self.proposer, "seed": self.seed,
            "objective": self.task.objective, "threshold_r2": self.task.threshold,
            "points": int(np.size(self.task.target)) if self.task.inputs else 0,
            "heldout_rows": [int(i) for i in np.sort(self.task.heldout)],
            "fit_rows": ([int(i) for i in np.sort(self.task.fit_rows)]
                         if self.task.objective == "mse" and self.task.inputs else []),
            "elapsed_seconds": round(self.elapsed, 3), "stopped": self.stopped,
            "candidates": n, "calibrated": self.n_calibrated,
            "invalid": counts.get("invalid", 0), "failed": counts.get("failed", 0),
            "candidates_per_second": round(n / self.elapsed, 2) if self.elapsed > 0 else None,
            "first_good": slim(self.first_good), "best": slim(self.best),
            "selection": (self.best or {}).get("selection", {}).get("explanation"),
            "front": [slim(r) for r in self.front], "front_scores": self.selection,
            "warnings": list(self.warnings), "settings": _jsonable(self.settings),
            **self.task.extra_summary(self),
        }


# a record's fields in summary.json (its best, first_good and front)
_SUMMARY_FIELDS = ("id", "proposer", "island", "proposed", "model", "params", "train_error",
                   "heldout_error", "r2", "size", "time", "refit_of", "mse_all", "r2_all",
                   "stderr", "front_member", "selection")


class _Progress:
    """A live status line on stderr (rewritten in place on a terminal)."""

    def __init__(self, enabled, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.last = 0.0
        self.shown = None
        self.tty = getattr(self.stream, "isatty", lambda: False)()

    def update(self, text, force=False, key=None):
        """Show ``text``; ``key`` identifies its content apart from times and rates."""
        now = time.perf_counter()
        if not self.enabled or (not force and now - self.last < (0.25 if self.tty else 5.0)):
            return
        self.last = now
        self.shown = key
        if self.tty:
            self.stream.write("\r" + text[:150].ljust(100))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, text, key=None):
        """The final line (not repeated when the last one shown said the same)."""
        if key is None or key != self.shown:
            self.update(text, force=True, key=key)
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def parse_budget(budget):
    """Seconds from a number or text like "60", "60s", "2m", "1.5h"; ValueError unless > 0."""
    if budget is None:
        return None
    text = str(budget).strip().lower()
    seconds = None
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        seconds = float(budget)
    else:
        for suffix, mult in (("ms", 1e-3), ("min", 60.0), ("s", 1.0), ("m", 60.0), ("h", 3600.0),
                             ("", 1.0)):
            if text.endswith(suffix):
                try:
                    seconds = float(text[:len(text) - len(suffix)]) * mult
                except ValueError:
                    continue
                break
    if seconds is None:
        raise ValueError(f"budget must be a time like 60, 60s, 2m or 1h; got {budget!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"budget must be a positive time like 60s or 2m; got {budget!r}")
    return seconds


_SAMPLE = 1000  # the records whose islands tell how many a run folder's search had


def check_run(task, proposer=None, out=None, resume=False, force=False, islands=1):
    """Raise ValueError (RunExistsError) for what ``search`` would refuse, before any work."""
    applicable = tuple(getattr(task, "proposers", ()) or ("mutate", "replay", "llm"))
    if isinstance(proposer, str) and proposer not in applicable:
        raise ValueError(f"the {proposer} proposer does not apply to task {task.name}; "
                         f"use {' or '.join(applicable)}")
    if resume and force:
        raise ValueError("resume continues the run in the out directory and force replaces it: "
                         "give one of them (--resume or --force)")
    if out is not None:
        _existing(Path(out), resume, force)
        if resume:
            _same_task(Path(out), task)
            _same_islands(Path(out), islands)
    elif resume:
        raise ValueError("resume needs the out directory of the earlier run")
    return applicable


def _same_islands(out, islands, most=_SAMPLE):
    """ResumeMismatch when the run in ``out`` is not a search of as many ``islands``, as its
    summary.json says, else as its first ``most`` records tell (``_earlier_session`` checks
    every record as it reads them)."""
    if not whole_number(islands) or islands < 1:
        return  # (check_islands says why)
    was = _summary_islands(out)
    if was is not None and was != islands:
        raise ResumeMismatch(_other_islands(out, None, islands))
    try:
        with open(out / RECORD_FILE, "rb") as f:
            first = [json.loads(line) for _, line in zip(range(most), f)]
    except (OSError, ValueError):
        first = []  # (a line cut short: the records are checked as they are read)
    if not all(isinstance(r, dict) and whole_number(r.get("id")) for r in first):
        return  # (not records of ours: said as they are read)
    seen = [(r["id"], r.get("island")) for r in first]
    for i, island in seen:
        if _not_of(islands, i, island):
            raise ResumeMismatch(_other_islands(out, island, islands, seen))


def _not_of(islands, rid, island):
    """Whether record ``rid`` of island ``island`` (None: one population's) is not one a
    search of ``islands`` makes (its ids are island + k islands)."""
    return (island is not None) if islands == 1 else island != rid % islands


# settings that choose among a run's records and do not make them (a resume may change them)
_CHOOSING = ("simple_constants",)


def _same_settings(out, settings):
    """ResumeMismatch when the run in ``out`` (its summary.json, when written: a run killed
    outright has none, and its replay finds the first candidate that differs) was searched
    with other ``settings`` (SearchResult.settings): a resumed run must make the same
    candidates. Another seed made the same first fifty (the grammar's small models), so a
    short resume of a run of another seed was taken for it."""
    was = _earlier_summary(out).get("settings")
    if not isinstance(was, dict):  # (no summary, or an older ndvm's)
        return
    now = json.loads(json.dumps(_jsonable(settings)))  # (as summary.json holds them)
    differ = [k for k in now if k in was and was[k] != now[k] and k not in _CHOOSING]
    if differ:
        raise ResumeMismatch(
            f"cannot resume: the run in {out} was searched with "
            f"{', '.join(f'{k}={was[k]!r}' for k in differ)}, and this session has "
            f"{', '.join(f'{k}={now[k]!r}' for k in differ)} (a resumed run makes the same "
            f"candidates as the earlier sessions: give the same settings, or a new --out "
            f"folder)")


def _earlier_summary(out):
    """The summary.json of the run in ``out`` as a dict, or {} (none written: a run killed
    before it; or not a summary of ours): what a resume checks before any work."""
    try:
        s = json.loads((Path(out) / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return s if isinstance(s, dict) else {}


def _same_task(out, task):
    """ValueError when the run in ``out`` (its summary.json, when written) searched another
    task than ``task``: its records would only be found to score otherwise, one by one."""
    was = _earlier_summary(out).get("task")  # (a run killed before its summary has none: its
    if was is not None and was != task.name:  # records are checked as they are replayed)
        from ndvm.cosearch.tasks import TASKS
        give = (f"--task {was}" if was in TASKS else
                f"the data it searched: a --csv file named {was}.csv, or a Task named {was!r}")
        raise ValueError(f"cannot resume: the run in {out} is a search of task {was!r}, not "
                         f"{task.name!r} (give {give}, or a new --out folder)")


def search(task="damped", proposer=None, budget=None, max_candidates=None, out=None,
           resume=False, seed=0, batch=None, workers=None, progress=False, stop_on_success=False,
           candidates=None, grammar=None, client="dmci", fit_options=None, force=False,
           executor=None, refits=0, islands=1, migration_every=256, migrants=4,
           simple_constants=True, **proposer_options):
    """Search program structures for ``task``; returns a SearchResult (see its docstring).

    task: a Task or a built-in name (``ndvm search --list``).
    proposer: "mutate", "replay", "llm" or a Proposer object; default the task's first
        (``task.proposers``: mutate for damped/recurrence, replay for kalman/nile). A named
        proposer the task does not list raises ValueError.
    budget: seconds of this session (a number or "60s", "2m"; must be positive); default the
        task's (``task.budget_seconds``). max_candidates: stop once the run has that many
        proposals, earlier sessions' included (a run of n candidates is the first n of a longer
        run of the same seed).
    out: a directory for candidates.jsonl (appended as it runs) and summary.json. A directory
        that already holds a search raises RunExistsError unless ``resume`` or ``force``
        (replace it). ``resume`` continues the run its candidates.jsonl records, even one
        killed mid-write: the search replays it (the same proposals, their recorded outcomes
        checked and reused instead of calibrated again; ResumeMismatch if they differ, e.g.
        another seed) and goes on exactly as the uninterrupted run would have, each candidate
        recorded once. Give the same task, proposer, seed and batch as the first session.
    seed: the proposer's seed. batch: candidates proposed and calibrated per round; default 16,
        or with an ``executor`` ndvm.parallel.EXECUTOR_BATCH per executor worker thread (so that
        each task it receives carries enough work to hide its scheduling cost; see
        ``ndvm.fit_many``).
    workers: the threads the search runs on (default: every core): the calling thread and the
        proposer thread calibrate too, each once it has nothing else to do; 1 runs everything on
        the calling thread, one step after the other (the same candidates, the same results).
        executor: a concurrent.futures.Executor
        that runs the calibrations instead (e.g. a Dask ``Client(...).get_executor()`` for a
        cluster; see ``ndvm.fit_many``); proposing and scoring stay in this process, and the
        result is the same as on local threads. progress: a live status line on stderr.
    stop_on_success: stop at the first good held-out fit. candidates: JSON-lines files (or one
        file) for the replay proposer, the proposer when none is named (another named is an
        error: it would not read them). grammar: a Grammar for mutate (default: the task's
        inputs and params).
    client: the evaluator client. fit_options: options for ndvm.fit overriding the task's
        (optimizer, steps, starts, lr). refits: per round, that many of the population's
        best members not yet refitted are fitted again by LM from REFIT_STARTS (16) starts (their
        fit and wider draws; least-squares tasks), recorded as proposer "refit" (records of
        their own, beside the proposals that max_candidates counts).
        proposer_options: passed to the proposer (llm: base_url,
        model, key_env, temperature, timeout, max_calls).
    islands: populations searched apart (the mutate proposer, each island seeded from ``seed``
        and its index), each passing its ``migrants`` best members to the next (a ring) every
        ``migration_every`` candidates it proposes; ``max_candidates`` is split evenly among
        them. With islands > 1, ``workers`` counts processes (default: one per core; never more
        than islands, and not given with ``executor``): each runs whole epochs of an island,
        proposing and scoring included, so no Python work is shared under one GIL;
        ``executor`` runs the epochs as its tasks (a Dask cluster's). The records (ids
        island + k x islands, ``island`` named) are the same for a seed and a number of islands
        whatever runs them (with a candidate budget; a time budget stops each island at the
        first round boundary after it, the islands fewest epochs along sent first, and the
        warnings say when some never ran, or when epochs out a minute past it were given up:
        their workers gone); a worker that dies costs only a rerun of its epoch. A resumed island
        search replays each island from its start (give the same islands, migration_every,
        migrants, seed and batch; any workers). With one population on 4 or more threads whose own
        proposing thread was the limit, the warnings say so (islands spread that work).

    Ctrl-C (KeyboardInterrupt) ends the search early: the result (``stopped="interrupted"``)
    and summary.json hold everything done so far; so does losing the executor (a Dask
    cluster's scheduler stopped: ``stopped="executor lost"``, and a warning).
    """
    task = get_task(task) if isinstance(task, str) else task
    if batch is None:  # (an island runs its rounds in one process: the local size)
        batch = BATCH if executor is None or islands != 1 else executor_round(executor)
    elif int(batch) < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if workers is not None:
        check_workers(workers, "threads" if islands == 1 else
                      "worker processes (one island each at a time)")
    budget_s = parse_budget(budget) if budget is not None else task.budget_seconds
    if max_candidates is not None and (not whole_number(max_candidates) or max_candidates <= 0):
        raise ValueError(f"max_candidates must be a positive count; got {max_candidates!r}")
    if not whole_number(seed) or seed < 0:
        raise ValueError(f"seed is a whole number >= 0, got {seed!r}")
    if not isinstance(simple_constants, (bool, np.bool_)):
        raise TypeError(f"simple_constants is True or False, got {simple_constants!r}")
    if not whole_number(refits) or refits < 0:
        raise ValueError(f"refits is a whole number >= 0 (the members refitted a round), got "
                         f"{refits!r}")
    max_candidates = max_candidates if max_candidates is not None else task.budget_candidates
    applicable = check_run(task, proposer, out, resume, force, islands)
    asked = proposer
    if proposer is None:  # (candidates are the replay proposer's: given, they name it)
        replays = candidates is not None and "replay" in applicable
        proposer = "replay" if replays else applicable[0]
    if candidates is not None and proposer != "replay" and not isinstance(proposer, Proposer):
        raise ValueError(f"candidates are read by the replay proposer, not {proposer!r}: name "
                         f"proposer='replay' (--proposer replay), or give no candidates"
                         if asked else f"candidates are read by the replay proposer, which task "
                         f"{task.name} does not use (its proposers: {', '.join(applicable)})")
    check_options(proposer, proposer_options, also=_SEARCH_KEYWORDS)
    g = (grammar or task.search_grammar()).check()
    islands, migration_every, migrants = check_islands(islands, migration_every, migrants)
    settings = {"seed": int(seed), "batch": int(batch), "refits": int(refits),
                "islands": islands, "migration_every": migration_every if islands > 1 else None,
                "migrants": migrants if islands > 1 else None,
                "fit_options": dict(fit_options or {}), "proposer_options": proposer_options,
                "simple_constants": bool(simple_constants)}
    if resume and out is not None:
        _same_settings(Path(out), settings)
    if islands > 1:
        if proposer != "mutate":
            raise ValueError(f"islands run the mutate proposer, not {proposer!r}" if asked else
                             f"islands run the mutate proposer, and task {task.name} does not "
                             f"use it (its proposers: {', '.join(applicable)})")
        return _search_islands(task, islands, seed, g, batch, migration_every, migrants,
                               max_candidates, budget_s, workers, executor, client,
                               fit_options, refits, proposer_options, out, force, progress,
                               stop_on_success, resume, settings)
    if isinstance(proposer, Proposer):
        prop = proposer
    elif proposer == "replay" and not candidates:
        prop = Replay(sources=task.seeds)
    else:
        prop = make_proposer(proposer, seed=seed, candidates=candidates, **proposer_options)
        prop = task.proposer(prop) if proposer == "mutate" else prop
    state = SearchState(task=task, grammar=g, echo=sys.stderr if progress else None)
    for w in task.size_warnings():
        state.warn(w)
    scorer = Scorer(task, client=client, workers=workers, fit_options=fit_options,
                    executor=executor)
    # a resumed run replays its earlier sessions: the same proposals in the same order, their
    # outcomes read back from the records instead of calibrated again (and checked to score the
    # same), so it goes on exactly as an uninterrupted run of the same seed would
    records = Records(spill=_spill_folder(out))
    # (the record file, locked while the search runs: closed, and so unlocked, at its end)
    sink, existed = _open_run(out, resume, force) if out is not None else (None, False)
    try:
        loaded, t_offset = _earlier_session(out, existed, resume, 1, state.warn)
        recorded = ById(loaded)  # (their lines are in the record file)
        bar = _Progress(progress)
        t0 = time.perf_counter() - t_offset
        session_start = time.perf_counter()
        n_new, stopped = 0, "budget"
        run = _Rounds(task, prop, state, scorer, t0, batch, max_candidates, refits=refits,
                      recorded=recorded)
        if budget_s is not None:  # (a round an executor never runs: a cluster without workers)
            run.deadline = session_start + budget_s + rounds.LATE
        pipe = None
        n_workers = default_workers() if workers is None else int(workers)  # (local threads)
        if getattr(prop, "pipelined", False):
            serial = executor is None and n_workers == 1
            pipe = _Pipeline(run, None if serial else Scheduler.threads(workers))
    except BaseException:
        if sink:
            sink.close()
        raise

    def succeeded():
        """A good fit found, with stop_on_success (a resumed run goes on past an earlier
        session's)."""
        return (stop_on_success and run.first_good is not None
                and run.first_good["id"] not in recorded)

    def keep(b):
        """Keep a scored batch (once): its records, and the lines of those new to the file."""
        nonlocal n_new
        with uninterrupted():  # (memory and file keep the same records, Ctrl-C or not)
            records.extend(b.records)
            b.emitted = True
            new = [r for r in b.records if r["id"] not in recorded]
            n_new += len(new)
            if sink and new:
                sink.write(_lines(new))
                sink.flush()

    def emit(b):
        """Keep a scored batch, then show the progress line."""
        if b is None or b.emitted:
            return
        keep(b)
        collect_young()
        best = _leader(run.front)
        el = time.perf_counter() - session_start
        bar.update(_status(len(records), n_new / el if el > 0 else 0.0, best, len(run.front),
                           el, budget_s, task), key=(len(records), id(best), len(run.front)))

    # Python's cyclic garbage collector is paused for the search (its full collections walked
    # the simplifier's memo and the records, under the GIL, a third of the proposer's time); the
    # search itself makes no reference cycles, and the young generation is collected once it is
    # large (collect_young: a custom proposer's cycles)
    paused = gc_paused(promote=True)
    paused.__enter__()
    held = holding()  # (uninterrupted()'s handlers installed once, not once a batch kept)
    held.__enter__()
    try:
        ready = run.next()  # the first batch is proposed before anything else can run
        if pipe is not None:
            pipe.start(ready)
        while True:
            if isinstance(ready, str):
                stopped = ready
                break
            if budget_s is not None and time.perf_counter() - session_start >= budget_s:
                stopped = "budget"
                break
            if pipe is not None:
                ready = pipe.step(ready, emit)
            else:  # the proposer sees every batch scored before it proposes the next
                run.calibrate(ready, run.begin(ready))
                run.finish(ready)
                emit(ready)
                ready = None if succeeded() else run.next()
            if succeeded():
                stopped = "success"
                break
        if pipe is not None:
            pipe.end(emit)
    except (KeyboardInterrupt, ExecutorLost) as e:
        stopped = "interrupted"  # keep what was done: the records are already written
        if isinstance(e, ExecutorLost):  # (the round being calibrated is not in the records)
            stopped = "executor lost"
            state.warn(lost_executor(e, resumable=out is not None))
        for b in pipe.interrupt() if pipe is not None else ():
            keep(b)  # (scored by the proposer thread, not yet kept)
        run.front = pareto_front(records)  # the front and best of every record kept
        scored = [r for r in records if r["status"] == "ok" and math.isfinite(r["heldout_error"])]
        state.population = _fittest(scored)
    finally:
        if pipe is not None:
            pipe.settle(check=False)  # (the proposer thread's job has ended)
        paused.__exit__(None, None, None)
        held.__exit__(None, None, None)
        if sink:
            sink.close()
    unreplayed = []  # (an earlier session's records this one stopped before replaying)
    if loaded:
        kept = np.isin(loaded.ids(), records.ids())
        unreplayed = [r for r, k in zip(loaded, kept.tolist()) if not k]
    if unreplayed:
        records.extend(unreplayed)
        run.front = pareto_front(records)
        if run.first_good is None:
            run.first_good = next((r for r in records if _good(task, r)), None)
    if (pipe is not None and pipe.threads is not None and executor is None
            and getattr(prop, "name", None) == "mutate"):
        hint = proposer_bound(run.own_seconds, time.perf_counter() - session_start, n_workers)
        if hint:
            state.warn(hint)
    idle = _replayed_only(len(loaded), n_new, stopped, budget_s)
    if idle:
        state.warn(idle)
    elapsed = time.perf_counter() - t0
    lowest = _leader(run.front)  # (what the progress line shows)
    bar.finish(_status(len(records), n_new / max(elapsed - t_offset, 1e-9), lowest,
                       len(run.front), elapsed - t_offset, budget_s, task),
               key=(len(records), id(lowest), len(run.front)))
    return conclude(task, records, run.front, run.first_good, scorer.ev, elapsed,
                    getattr(prop, "name", "custom"), seed, stopped, state.warnings, out,
                    settings)


# A search of one population on this many worker threads or more whose proposer thread was
# busy at least this share of a run of at least this many seconds is told that islands would
# use the machine better (proposer_bound)
BOUND_WORKERS, BOUND_BUSY, BOUND_SECONDS = 4, 0.9, 5.0


# search()'s own keywords (a misspelt one reaches the proposer's options: its "did you mean")
_SEARCH_KEYWORDS = tuple(p for p in inspect.signature(search).parameters
                         if p != "proposer_options")


def proposer_bound(own_seconds, seconds, workers):
    """The note for a search of one population on ``workers`` threads whose own Python steps
    (scoring, proposing, staging: one thread, under the GIL) took ``own_seconds`` of its
    ``seconds``: when they kept that thread busy most of the run, the calibrations were waiting
    on them, and more workers add nothing; islands spread that work over processes. None when
    not (or the run was too short or on too few workers to tell)."""
    if workers < BOUND_WORKERS or seconds < BOUND_SECONDS:
        return None
    busy = own_seconds / seconds
    if busy < BOUND_BUSY:
        return None
    return (f"the search's own Python (proposing, simplifying and scoring candidates, one "
            f"thread under the GIL) was busy {min(busy, 1.0):.0%} of the run, so its {workers} "
            f"worker threads mostly waited for it: a search of one population gains little "
            f"from more of them on this task; islands (islands=N, ndvm search --islands N, "
            f"N >= the cores) spread that work over processes (README, \"Using many cores\")")


class _Pipeline:
    """A single population's rounds pipelined over two threads (``threads``: the scheduler
    whose worker is the proposer thread; None runs the same steps one after the other on the
    calling thread, workers=1). While batch k calibrates on the calling thread, the proposer
    thread scores batch k-1, proposes batch k+1 from the state through batch k-1 (one batch of
    lag, the same for any worker count, so a seed proposes the same candidates) and begins it;
    then it calibrates batch k too, and then batch k+1 until the next round begins. The calling
    thread keeps (emits) batch k-2 once it has no fit of batch k left to start, then calibrates
    batch k+1's until batch k's last fits have ended."""

    def __init__(self, run, threads):
        self.run, self.threads = run, threads
        self.job = self.wake = None  # the proposer thread's current job and its stop sign
        self.done = self.scored = None  # the last batch calibrated; the last batch scored
        self.fits = None  # the ready batch's calibrations (begun)

    def start(self, ready):
        """Begin the first batch's calibrations."""
        if isinstance(ready, _Batch):
            self.fits = self.run.begin(ready)

    def step(self, ready, emit):
        """Calibrate ``ready`` (emitting the batch scored before it); the next batch, or why
        there is none."""
        run = self.run
        if self.threads is None:
            emit(self.scored)
            run.calibrate(ready, self.fits)
            following, self.fits = run.advance(self.done)
        else:
            if self.wake is not None:
                self.wake.set()  # (the last job lends itself to this batch no more)
            last, staged, self.wake = self.job, Future(), Stop()
            self.job = self.threads.submit(run.advance, self.done, self.fits, staged, self.wake)
            current = self.fits

            def meanwhile(b=self.scored):
                # (batch k-2 is kept, then batch k+1 calibrated, while the last fits of batch k
                # end on the other thread)
                emit(b)
                _help_next(current, staged)

            run.calibrate(ready, current, lent=1, meanwhile=meanwhile)
            following, self.fits = staged.result()
            if last is not None:
                last.result()  # (it ended before this one began: re-raises its own failure)
        self.scored, self.done = self.done, ready
        return following

    def settle(self, check=True):
        """End the proposer thread's job (it stops lending itself to the next batch; with
        ``check``, its failure is raised) and cancel the batch begun but never calibrated."""
        if self.wake is not None:
            self.wake.set()
        try:
            if self.job is not None:
                self.job.result()
        except BaseException:
            if check:
                raise
        finally:
            self.job = None
            if self.fits is not None:
                self.fits.cancel()
                self.fits = None

    def end(self, emit):
        """The search stops: the batches not yet kept are (the last one calibrated scored
        now; the batch proposed after it is dropped)."""
        self.settle()
        emit(self.scored)
        if self.done is not None:
            self.run.finish(self.done)
            emit(self.done)
            self.done = None

    def interrupt(self):
        """Ctrl-C: the batches scored (by the proposer thread's job or before) but not kept."""
        self.settle(check=False)  # (the proposer thread's job ends before anything is read)
        return [b for b in (self.scored, self.done)
                if b is not None and b.finished and not b.emitted]


def _help_next(current, staged):
    """The calling thread, none of the ``current`` batch's calibrations left to start, runs the
    next batch's (once ``staged`` holds it), one at a time, until the current batch's last ones
    have ended on the other thread: it does not wait idle for them (a batch's last fit is
    ~1/16 of a round). The proposer thread does the same the other way round."""
    while not current.finished() and staged.done() and staged.exception() is None:
        fits = staged.result()[1]
        if fits is None or not fits.drain(1):
            return


def _search_islands(task, islands, seed, grammar, batch, every, migrants, max_candidates,
                    budget_s, workers, executor, client, fit_options, refits, proposer_options,
                    out, force, progress, stop_on_success, resume, settings):
    """``search`` with islands > 1 (see there)."""
    if budget_s is None and max_candidates is None:
        raise ValueError("an island search needs a time budget or max_candidates")
    workers = island_workers(islands, workers, executor)  # (checked before the run folder)
    # (the record file, locked while the search runs: closed, and so unlocked, at its end)
    sink, existed = _open_run(out, resume, force) if out is not None else (None, False)
    said = []
    try:
        loaded, t_offset = _earlier_session(out, existed, resume, islands, said.append)
    except BaseException:
        if sink:
            sink.close()
        raise
    bar = _Progress(progress)
    t0 = time.perf_counter()

    def write(block):
        # (its lines as bytes, made in the process that ran the epoch: written to the text
        # file's byte stream, after whatever its text layer holds)
        sink.flush()
        sink.buffer.write(block.encoded())
        sink.buffer.flush()

    # (kept as the epochs' blocks arrive: the records are not unpacked; a resumed run's start
    # from the earlier sessions')
    front = pareto_front([r for r in loaded if r["status"] == "ok"])
    good = [r for r in (next((r for r in loaded if _good(task, r)), None),) if r is not None]
    n_loaded = len(loaded)  # (the search's records go on from these, in the same Records)

    def show(records, block):
        front[:] = pareto_front(front + block.front)  # (the front of their fronts is theirs)
        if block.good is not None and (not good or block.good["id"] < good[0]["id"]):
            good[:] = [block.good]
        el = time.perf_counter() - t0
        new = len(records) - n_loaded
        bar.update(_status(len(records), new / el if el > 0 else 0.0, _leader(front),
                           len(front), el, budget_s, task))

    try:
        records, stopped, warnings = search_islands(
            task, islands, seed, grammar, batch, every, migrants, max_candidates, budget_s,
            workers, executor, client, fit_options, refits, proposer_options,
            write if sink else None, show, stop_on_success, spill=_spill_folder(out),
            recorded=loaded, t_offset=t_offset, resumable=out is not None)
    finally:
        if sink:
            sink.close()
    elapsed = time.perf_counter() - t0
    bar.finish(_status(len(records), (len(records) - n_loaded) / max(elapsed, 1e-9),
                       _leader(front), len(front), elapsed, budget_s, task))
    idle = _replayed_only(n_loaded, len(records) - n_loaded, stopped, budget_s)
    warnings = said + task.size_warnings() + warnings + ([idle] if idle else [])
    if progress:  # (as a search of one population shows its own: SearchState.warn)
        for w in dict.fromkeys(warnings):
            show_warning(sys.stderr, w)
    return conclude(task, records, front, good[0] if good else None,
                    ndvm.Evaluator(client=client), elapsed, f"mutate x {islands} islands", seed,
                    stopped, warnings, out, settings)


def _earlier_session(out, existed, resume, islands, warn):
    """(the records of the run in ``out``, packed, and the time of its last) when ``resume``
    (else none, and 0): what a resumed run replays (``existed``: its record file was there
    before this session opened it). A folder holding no run is warned of (``warn(message)``).
    Raises ResumeMismatch for a run searched with another number of ``islands`` (1: one
    population), whose records would only be found to differ one by one, and ValueError for a
    record file that holds a record twice (each candidate is recorded once: an edited file)
    or none beside a summary of candidates (records removed: nothing to continue)."""
    loaded, t_offset = Records(spill=_spill_folder(out)), 0.0
    if not resume:
        return loaded, t_offset
    if not existed:  # (a mistyped folder: said, not silent)
        warn(f"resume: {out} holds no run to continue (no {RECORD_FILE}); a new run was started "
             f"there")
        return loaded, t_offset
    seen = []  # (id, island) of the first records, to tell how many islands the run had
    for r in _iter_records(Path(out) / RECORD_FILE, repair=True):  # (packed as they are read)
        r = _load(r)
        island = r.get("island")
        if len(seen) < _SAMPLE:
            seen.append((r.get("id"), island))
        if _not_of(islands, r["id"], island):
            raise ResumeMismatch(_other_islands(out, island, islands, seen + [(r["id"], island)]))
        t_offset = max(t_offset, r.get("time") or 0.0)
        loaded.extend((r,))
    ids = np.sort(loaded.ids())
    twice = ids[1:][ids[1:] == ids[:-1]]
    if twice.size:
        raise ValueError(f"cannot resume: {out}/{RECORD_FILE} holds the record of candidate "
                         f"{int(twice[0])} twice ({twice.size} record(s) in all are a second "
                         f"copy): a run records each candidate once (was the file edited, or "
                         f"written by two searches at once?)")
    if not len(loaded):
        had = _earlier_summary(out).get("candidates")
        if isinstance(had, int) and had > 0:
            raise ValueError(f"cannot resume: {out}/{RECORD_FILE} is empty, and its "
                             f"{SUMMARY_FILE} is of {had} candidates (its records removed?): "
                             f"there is nothing to continue; replace it with --force "
                             f"(force=True), or choose a new --out folder")
    return loaded, t_offset


def _as_islands(n):
    return "a search of one population" if n == 1 else f"an island search of {n} islands"


def _summary_islands(out):
    """The number of islands of the run in ``out`` as its summary.json says (its settings, or
    its proposer: "mutate x N islands"; 1 for any other), or None without one."""
    s = _earlier_summary(out)
    settings = s.get("settings")
    n = settings.get("islands") if isinstance(settings, dict) else None
    if isinstance(n, int) and n >= 1:
        return n
    proposer = s.get("proposer")
    if not isinstance(proposer, str):
        return None
    try:
        return int(proposer.split(" x ")[1].split()[0]) if " x " in proposer else 1
    except (IndexError, ValueError):
        return None


def _records_islands(seen):
    """How many islands the search of records ``seen`` ((id, island) pairs) had: (n, exact),
    n the least number of islands whose ids they fit (id % n = island), exact when records of
    every one of its islands are among them; None for one population's, or records that fit
    none up to 1024."""
    isl = [(i, k) for i, k in seen if isinstance(i, int) and isinstance(k, int) and k >= 0]
    if not isl or len(isl) < len(seen):
        return None
    least = max(k for _, k in isl) + 1
    for n in range(max(2, least), 1025):
        if all(i % n == k for i, k in isl):
            return n, len({k for _, k in isl}) == n
    return None


def _other_islands(out, island, islands, seen=()):
    """Why a run in ``out`` of which a record was of island ``island`` (None: one population)
    cannot be resumed with ``islands``: what it was, as its summary.json says or else as its
    records ``seen`` ((id, island) pairs) tell, and what to give."""
    was, exact = _summary_islands(out), True
    if was is None:
        if island is None:
            was = 1
        else:
            known = _records_islands(seen)
            was, exact = known if known is not None else (None, False)
    if was is None or was == islands:  # (a summary of another run than its records?)
        what, give = "an island search of another number of islands", "the --islands it had"
    elif not exact:
        what, give = f"an island search of at least {was} islands", "the --islands it had"
    else:
        what = _as_islands(was)
        give = f"--islands {was} (islands={was})" if was > 1 else "no --islands (islands=1)"
    return (f"cannot resume: the run in {out} is {what}, not {_as_islands(islands)} (give "
            f"{give}, or a new --out folder)")


def _replayed_only(n_loaded, n_new, stopped, budget_s):
    """The warning of a resumed session whose time budget ended before it made a candidate of
    its own (it replays the earlier sessions' first), else None."""
    if n_loaded and not n_new and stopped == "budget" and budget_s is not None:
        return (f"this session made no new candidate: its time budget ({budget_s:g} s) ended "
                f"while it replayed the earlier sessions' {n_loaded} candidates (checked, not "
                f"calibrated again); give a longer budget to go on")
    return None


def _spill_folder(out):
    """Where a search's records past SPILL_BYTES go (records.Records): its run folder, else the
    system's folder for temporary files."""
    return str(out) if out is not None else tempfile.gettempdir()


def conclude(task, records, front, first_good, ev, elapsed, proposer, seed, stopped, warnings,
             out, settings=None):
    """The SearchResult of a search's ``records`` (a Records; the front's model selected on
    ``ev``), its summary.json written into ``out`` (when given)."""
    structures = records.structures()  # (from the digests its blocks keep: none unpacked)
    best, scores = select(task, front, ev, structures=structures,
                          simple=(settings or {}).get("simple_constants", True))
    front = front_stderr(task, front, ev)
    result = SearchResult(task=task, records=records, front=front, best=best,
                          first_good=first_good, elapsed=elapsed, proposer=proposer, seed=seed,
                          stopped=stopped, warnings=list(warnings), selection=scores,
                          settings=dict(settings or {}))
    if out is not None:
        (Path(out) / SUMMARY_FILE).write_text(json.dumps(_jsonable(result.summary()), indent=2))
    return result


def _leader(front):
    """The record of lowest held-out error so far (the front's last), or None: what the
    progress line shows as the best (so it never gets worse as the search goes on)."""
    return front[-1] if front else None


def _status(n, rate, best, front_size, elapsed, budget_s, task):
    if best is None:
        b = "no fit yet"
    elif task.objective == "nll":
        b = f"best NLL {best['heldout_error']:.6g}"
    else:
        b = f"best held-out MSE {best['heldout_error']:.3g} (R2 {best['r2']:.3f})"
    budget = f"/{budget_s:.0f}s" if budget_s is not None else "s"
    return (f"{n} candidates  {rate:.0f}/s  {b}  front {front_size}  {elapsed:.1f}{budget}")
