"""The co-search loop: propose -> validate -> calibrate -> score on held-out data -> Pareto front.

Every candidate becomes one record (a JSON line): id, source, proposer, status (ok, invalid,
failed, duplicate), parameters, train and held-out error, R^2, size, skeleton and the time since the
search began. A search resumes from its record file: seen sources are skipped and the front rebuilt.
"""
import gc
import json
import math
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path

import numpy as np

import ndvm
from ndvm.cosearch._calibrate import begin, minimize_value, succeeded
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.proposers import Proposer, Replay, make_proposer
from ndvm.cosearch.select import fitness, select, starts_around
from ndvm.cosearch.sexpr import size, skeleton, to_source, to_tree
from ndvm.cosearch.simplify import Simplifier, TooManyParameters
from ndvm.cosearch.tasks import Task, get_task
from ndvm.parallel import (EXECUTOR_TASK_SIZE, TASKS_PER_WORKER, default_workers, executor_round,
                           gc_paused)

__all__ = ["search", "SearchResult", "pareto_front", "RunExistsError", "RECORD_FILE",
           "SUMMARY_FILE"]

RECORD_FILE = "candidates.jsonl"
SUMMARY_FILE = "summary.json"
_PROBE_STEPS = 2_000_000
_DENSE_POINTS = 512  # the dense probe of the input box that catches poles between data points
_POPULATION = 64
REFIT_STARTS = 16  # LM starts when a leading population member is refitted (``refits``)
BATCH = 16  # candidates per round on local threads (on an executor: ndvm.parallel.executor_round)
EXECUTOR_BATCH = TASKS_PER_WORKER * EXECUTOR_TASK_SIZE  # per executor worker thread (see there)


def pareto_front(records):
    """The records not dominated in (held-out error, size), by increasing size."""
    ok = sorted((r for r in records if r.get("status") == "ok"
                 and math.isfinite(r["heldout_error"])),
                key=lambda r: (r["size"], r["heldout_error"], r["id"]))
    front, best = [], math.inf
    for r in ok:
        if r["heldout_error"] < best:
            front.append(r)
            best = r["heldout_error"]
    return front


class RunExistsError(ValueError):
    """The ``out`` directory already holds a search and neither resume nor force was given."""


@dataclass
class SearchState:
    """What proposers may look at: the task, the grammar, the front, the best so far."""

    task: Task
    grammar: Grammar
    front: list = field(default_factory=list)
    population: list = field(default_factory=list)
    seen: set = field(default_factory=set)
    rejected: int = 0
    warnings: list = field(default_factory=list)
    echo: object = None  # a stream that shows each new warning as it happens (progress=True)

    def warn(self, message):
        """Record a proposer's warning (kept in the result and summary.json)."""
        if self.echo is not None and message not in self.warnings:
            self.echo.write(f"\nndvm: warning: {message}\n")
            self.echo.flush()
        self.warnings.append(message)


@dataclass
class SearchResult:
    """The outcome of ``ndvm.search``.

    records: one dict per candidate, in the order proposed: ``id``, ``src``, ``proposer``,
        ``status`` ("ok", "invalid", "failed", "duplicate"), ``params`` (fitted, name -> float),
        ``train_error`` and ``heldout_error`` (mean squared error; the NLL for likelihood tasks),
        ``r2`` (held-out R^2, None for likelihood tasks), ``size`` (atoms), ``skeleton``,
        ``error`` (why it is invalid or failed) and ``time`` (seconds since the search began).
        A refit of an earlier record (``refits``) has proposer "refit" and ``refit_of`` its id.
    front: the ok records not dominated in (held-out error, size), by increasing size.
    best: the ok record with the lowest held-out error (None when none was calibrated).
    first_good: the first record that is a good fit (held-out R^2 above ``task.threshold``;
        any finite NLL for likelihood tasks), or None.
    elapsed: seconds; proposer: its name; seed; stopped: why the search ended ("budget",
        "candidates", "exhausted", "success", "proposer failed", "interrupted").
    warnings: messages from the proposer (e.g. why an llm request failed), in order.
    summary(): the JSON-ready digest written to ``summary.json``.
    """

    task: Task
    records: list
    front: list
    best: dict
    first_good: dict
    elapsed: float
    proposer: str
    seed: int
    stopped: str
    warnings: list = field(default_factory=list)
    selection: list = field(default_factory=list)

    @property
    def lowest_error(self):
        """The front member with the lowest held-out error (the front's last)."""
        return self.front[-1] if self.front else None

    def _record(self, which):
        if which is None:
            return self.best
        if isinstance(which, int):
            return self.front[which]
        return which

    def tree(self, which=None):
        """The program tree of the best (or a front member: an index, or a record)."""
        rec = self._record(which)
        return to_tree(rec.get("model") or rec["src"])

    def predict(self, data, which=None):
        """The best model's (or a front member's) prediction at ``data`` (name -> [N])."""
        rec = self._record(which)
        if rec is None:
            raise ValueError("the search found no model")
        prog = ndvm.parse(rec.get("model") or rec["src"])
        data = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in data.items()}
        missing = [n for n in prog.free_names if n not in data and n not in rec["params"]
                   and n not in self.task.consts]
        if missing:
            raise ValueError(f"predict needs the input(s) {', '.join(missing)}")
        n = next(iter(data.values())).size if data else 1
        consts = _used(self.task.consts, prog)
        v = ndvm.Evaluator().evaluate(prog, params=rec["params"], consts=consts,
                                      data=_used(data, prog)).value[0]
        return np.array(np.broadcast_to(v, (n,)) if v.size == 1 else v)

    def sympy(self, which=None, digits=None):
        """The best model (or a front member) as a SymPy expression, parameters substituted."""
        from ndvm.cosearch.export import to_sympy
        return to_sympy(self.tree(which), self._record(which)["params"], digits=digits)

    def latex(self, which=None, digits=6):
        """The best model (or a front member) as LaTeX."""
        from ndvm.cosearch.export import to_latex
        return to_latex(self.tree(which), self._record(which)["params"], digits=digits)

    @property
    def n_calibrated(self):
        """Candidates that were calibrated and scored."""
        return sum(r["status"] == "ok" for r in self.records)

    def summary(self):
        """A JSON-ready summary of the run."""
        def slim(r):
            return None if r is None else {k: r[k] for k in (
                "id", "src", "model", "params", "train_error", "heldout_error", "r2", "size",
                "time", "selection", "params_train", "mse_all", "r2_all") if k in r}
        n = len(self.records)
        return {
            "task": self.task.name, "proposer": self.proposer, "seed": self.seed,
            "objective": self.task.objective, "threshold_r2": self.task.threshold,
            "elapsed_seconds": round(self.elapsed, 3), "stopped": self.stopped,
            "candidates": n, "calibrated": self.n_calibrated,
            "invalid": sum(r["status"] == "invalid" for r in self.records),
            "failed": sum(r["status"] == "failed" for r in self.records),
            "candidates_per_second": round(n / self.elapsed, 2) if self.elapsed > 0 else None,
            "first_good": slim(self.first_good), "best": slim(self.best),
            "selection": (self.best or {}).get("selection", {}).get("explanation"),
            "front": [slim(r) for r in self.front], "front_scores": self.selection,
            "warnings": list(self.warnings),
            **self.task.extra_summary(self),
        }


class _Scorer:
    """Validation, calibration and scoring of batches of sources against one task."""

    def __init__(self, task, client="dmci", workers=None, fit_options=None, executor=None):
        self.task = task
        self.workers = workers
        self.executor = executor
        # start_scales: the starts of each candidate drawn from normal(0, s) with s cycling
        # through these scales (ndvm.fit's own draws are all normal(0, 0.3)): one start near
        # zero and others far enough to reach a frequency of 2 or a shift of -3
        self.fit, scales = task.fit_options(fit_options, client)  # (a FitOptions)
        self.start_scales = np.resize(np.asarray(scales, dtype=np.float64),
                                      self.fit.starts) if scales else None
        self.draws = np.random.default_rng(0)  # (the same calls in the same order: same draws)
        # validation and scoring run on the proposer thread while the calibrations run:
        # each side has its own evaluators
        self.probe_ev = ndvm.Evaluator(client=client, max_steps=_PROBE_STEPS)
        self.ev = ndvm.Evaluator(client=client)
        self.fit_ev = ndvm.Evaluator(client=client)
        self.allowed = task.allowed_names  # (a set built anew on every access)
        self.refit_ev = ndvm.Evaluator(client=client)
        self.train = task.split("train")
        self.held = task.split("heldout")
        self.held_var = float(np.var(self.held[1])) if task.objective == "mse" else None
        self.dense = self._dense_probe() if task.objective == "mse" and task.inputs else None
        self.joint = self.cuts = None  # the probe, training and held-out points, end to end
        if self.dense is not None and set(self.train[0]) == set(self.dense) == set(self.held[0]):
            parts = (self.dense, self.train[0], self.held[0])
            sizes = [next(iter(d.values())).size for d in parts]
            if all(np.size(d[k]) == n for d, n in zip(parts, sizes) for k in d):
                self.joint = {k: np.concatenate([d[k] for d in parts]) for k in self.dense}
                self.cuts = (sizes[0], sizes[0] + sizes[1])

    def _dense_probe(self):
        """Points filling the data's input box (a grid in 1-D, seeded uniform draws otherwise)."""
        lo = {k: float(np.min(v)) for k, v in self.task.inputs.items()}
        hi = {k: float(np.max(v)) for k, v in self.task.inputs.items()}
        if len(lo) == 1:
            return {k: np.linspace(lo[k], hi[k], _DENSE_POINTS) for k in lo}
        rng = np.random.default_rng(0)
        return {k: rng.uniform(lo[k], hi[k], _DENSE_POINTS) for k in lo}

    def values(self, prog, params):
        """The fitted model's values at the probe points between the data, the training points
        and the held-out points, in one evaluation (lanes are independent: the same numbers as
        three), as a tuple of three arrays; the exception when it raises; None without a probe."""
        if self.joint is None:
            return None
        try:
            with np.errstate(all="ignore"):
                v = self.predict(prog, params, self.joint)
        except Exception as e:  # noqa: BLE001 - reported by off_domain
            return e
        a, b = self.cuts
        return v[:a], v[a:b], v[b:]

    def off_domain(self, prog, params, values=None):
        """Why the fitted model is unusable between the data points (a non-finite value or a
        pole: more than 10x the target's spread from its mean), or None. ``values``: what
        ``values`` gave, when the caller has it."""
        if self.dense is None:
            return None
        if values is None:
            values = self.values(prog, params)
        if isinstance(values, Exception):
            try:  # (the same evaluation on the probe points alone: did they raise, or the data?)
                with np.errstate(all="ignore"):
                    v = self.predict(prog, params, self.dense)
            except Exception as e:  # noqa: BLE001 - a model that cannot run there is off-domain
                return f"fails between the data points: {str(e).splitlines()[0] if str(e) else e}"
        else:
            v = values[0]
        if not np.all(np.isfinite(v)):
            return "not finite between the data points (a pole or a domain edge)"
        y = self.task.target
        spread = float(np.max(np.abs(y - y.mean()))) or 1.0
        if float(np.max(np.abs(v - y.mean()))) > 10.0 * spread:
            return "a pole between the data points (value beyond 10x the target's spread)"
        return None

    def assess(self, prog, params):
        """(why it is off-domain, None) or (None, ``score``) of fitted ``params``."""
        values = self.values(prog, params)
        why = self.off_domain(prog, params, values)
        return (why, None) if why is not None else (None, self.score(prog, params, values))

    def validate(self, src):
        """(program, params) or raises: parse, allowed free names, a probe evaluation."""
        prog = ndvm.parse(src, name="<candidate>")
        bad = [n for n in prog.free_names if n not in self.allowed]
        if bad:
            raise ValueError(f"free name(s) not allowed by the task: {', '.join(bad)}")
        params = tuple(n for n in prog.free_names if n in self.task.params)
        data = _used(self.train[0], prog)
        consts = _used(self.task.consts, prog)
        probe = {n: (self.task.init or {}).get(n, 0.5) for n in params}
        self.probe_ev.evaluate(prog, params=probe, data=data, consts=consts)
        return prog, params

    def predict(self, prog, params, inputs):
        data = _used(inputs, prog)
        consts = _used(self.task.consts, prog)
        n = next(iter(inputs.values())).size if inputs else 1
        v = self.ev.evaluate(prog, params=params, data=data, consts=consts).value[0]
        return np.broadcast_to(v, (n,)) if v.size == 1 else v

    def score(self, prog, params, values=None):
        """(train error, held-out error, R^2) of fitted params (mse), or (nll, nll, None).
        ``values``: what ``values`` gave, when the caller has it."""
        if self.task.objective == "nll":
            consts = _used(self.task.consts, prog)
            v = float(self.ev.evaluate(prog, params=params, consts=consts).value.sum())
            return v, v, None
        with np.errstate(all="ignore"):
            if isinstance(values, tuple):
                fit, held = values[1], values[2]
            else:
                fit = self.predict(prog, params, self.train[0])
                held = self.predict(prog, params, self.held[0])
            tr = float(np.mean((fit - self.train[1]) ** 2))
            ho = float(np.mean((held - self.held[1]) ** 2))
        tr = tr if math.isfinite(tr) else math.inf
        ho = ho if math.isfinite(ho) else math.inf
        return tr, ho, 1.0 - ho / self.held_var if math.isfinite(ho) else -math.inf

    def refit(self, prog, names, params, seed, starts=REFIT_STARTS):
        """Parameters of ``prog`` refitted by LM from ``starts`` starts: its current fit and
        draws at three scales (normal with sd 0.3, 1 and 3), so that shifts and rates far from
        the default start's reach are found; a failed fit gives an exception."""
        init = starts_around(params, names, starts, seed)
        try:
            r = ndvm.fit(prog, data=_used(self.train[0], prog),
                         target=self.train[1], params=names, init=init, starts=starts,
                         optimizer="lm", steps=self.fit.steps, evaluator=self.refit_ev,
                         scaling=self.fit.scaling,
                         consts=_used(self.task.consts, prog) or None)
        except Exception as e:  # noqa: BLE001 - a failed refit is recorded as failed
            return e
        return dict(r.params) if math.isfinite(r.loss) else ValueError("no finite refit")

    def begin(self, items):
        """The calibration of the (prog, params) ``items``, begun (their starts drawn, in the
        order batches are begun): ``drain()`` lends a thread to it, ``finish(lent)`` runs it on
        the calling thread too and returns the fitted params (or the error) of each item."""
        return _Calibration(self, items)


class _Calibration:
    """A batch's calibrations (``_Scorer.begin``). Likelihood tasks' run in ``finish`` alone."""

    def __init__(self, scorer, items):
        self.scorer, self.items = scorer, items
        self.todo = [i for i, (_, ps) in enumerate(items) if ps]
        self.fits = None
        if scorer.task.objective == "nll" or not self.todo:
            return
        where = {}
        if scorer.start_scales is not None:  # (drawn here, in batch order, on the caller)
            where["per_candidate"] = [
                {"init": {n: scorer.draws.normal(0.0, scorer.start_scales) for n in items[i][1]}}
                for i in self.todo]
        self.fits = begin([items[i][0] for i in self.todo], scorer.train[0], scorer.train[1],
                          workers=scorer.workers, executor=scorer.executor, options=scorer.fit,
                          **where)

    def drain(self, limit=None):
        """Lend the calling thread to the calibrations until none is left to start (or ``limit``
        are run); how many it ran."""
        return self.fits.drain(limit) if self.fits is not None else 0

    def cancel(self):
        """Calibrations begun but not to be finished (the search stopped): none starts any more."""
        if self.fits is not None:
            self.fits.cancel()

    def finish(self, lent=0, meanwhile=None):
        """Fitted params (or an error) for each item, once all are done (``meanwhile()`` is
        called once this thread has none left to start)."""
        scorer, items, todo = self.scorer, self.items, self.todo
        out = [None if ps else {} for _, ps in items]
        if self.fits is not None:
            for i, r in zip(todo, self.fits.finish(lent, meanwhile)):
                out[i] = dict(r.params) if succeeded(r) else getattr(r, "error", r)
            return out
        if meanwhile is not None:
            meanwhile()
        for i in todo:  # a likelihood: the program's value minimized, one candidate at a time
            prog, ps = items[i]
            init = {n: (scorer.task.init or {}).get(n, 1.0) for n in ps}
            try:
                out[i] = minimize_value(prog, ps, init, consts=_used(scorer.task.consts, prog),
                                        positive=[n for n in ps if n in scorer.task.positive],
                                        evaluator=scorer.fit_ev).params
            except Exception as e:  # noqa: BLE001 - a failed candidate is recorded
                out[i] = e.with_traceback(None)  # (its frames would hold ``out``: a cycle)
        return out


@dataclass
class _Batch:
    """One round's candidates: their records (in proposal order), the programs to calibrate
    and the records they belong to; then the fitted parameters."""

    records: list
    items: list
    slots: list
    fitted: list = None
    fit_each: float = 0.0
    finished: bool = False
    refits: list = field(default_factory=list)  # (record to refit, its prog, param names)
    refitted: list = None
    emitted: bool = False  # its records kept (search's emit)


class _Rounds:
    """The steps of the search loop. ``next`` (propose and validate a batch), ``finish`` (score
    a calibrated batch, update the front and population) and ``advance`` (both) run on the
    proposer thread and alone touch the search state; ``calibrate`` runs on the caller's."""

    def __init__(self, task, prop, state, scorer, t0, n_records, batch, max_candidates,
                 refits=0):
        self.task, self.prop, self.state, self.scorer = task, prop, state, scorer
        self.refits = refits if task.objective == "mse" else 0
        self.refitted = set()  # models already refitted from many starts
        self.t0, self.batch, self.max_candidates = t0, batch, max_candidates
        self.next_id = n_records
        self.n_proposed = 0
        self.simplifier = Simplifier(task.params)  # its memo serves every candidate of the run
        self.first_good = None
        self.front = []

    def advance(self, done, current=None, staged=None, wake=None):
        """Score the batch ``done`` (when there is one), propose the next and begin its
        calibrations: (the next _Batch or why there is none, its calibrations or None). With
        ``staged`` (a Future given that pair as soon as it exists), this thread is then lent to
        the ``current`` batch's calibrations until none is left to start, and then to the next
        batch's, one fit at a time, until ``wake`` is set (the caller's thread, done with the
        current batch, hands this thread its next job): no thread idles while the current
        batch's last fits end."""
        try:
            if done is not None:
                self.finish(done)
            following = self.next()
            fits = self.begin(following) if isinstance(following, _Batch) else None
        except BaseException as e:
            if staged is not None:
                staged.set_exception(e.with_traceback(None))
            raise
        if staged is None:
            return following, fits
        staged.set_result((following, fits))
        if current is not None:
            current.drain()
        while fits is not None and not wake.is_set() and fits.drain(1):
            pass
        return following, fits

    def next(self):
        """The next _Batch, or why there is none ("candidates", "exhausted", "proposer
        failed")."""
        if self.max_candidates is not None and self.n_proposed >= self.max_candidates:
            return "candidates"
        want = self.batch if self.max_candidates is None else min(
            self.batch, self.max_candidates - self.n_proposed)
        for _ in range(3):  # a proposer's transient failure (None) is retried twice
            srcs = self.prop.propose(want, self.state)
            if srcs is not None:
                break
        else:
            return "proposer failed"
        if not srcs:
            return "exhausted"
        self.n_proposed += len(srcs)
        b = self.prepare(srcs)
        b.refits = self.leaders()
        return b

    def leaders(self):
        """Up to ``refits`` population members, lowest held-out error first, not yet refitted
        from many starts: a right structure stuck in a poor local optimum of its few default
        starts gets a second, wider calibration (``_Scorer.refit``)."""
        out = []
        for rec in self.state.population:
            if len(out) >= self.refits:
                break
            model = rec.get("model") or rec["src"]
            if model in self.refitted or not rec["params"]:
                continue
            self.refitted.add(model)
            try:
                prog = ndvm.parse(model)
            except Exception:  # noqa: BLE001 - (it parsed when it was scored)
                continue
            out.append((rec, prog, tuple(rec["params"])))
        return out

    def prepare(self, srcs):
        """Records for ``srcs``: duplicates and invalid candidates are final; the others are
        simplified (unless the proposer did), validated and queued for calibration."""
        task, state, scorer, prop = self.task, self.state, self.scorer, self.prop
        records, items, slots = [], [], []
        made = getattr(prop, "made", None) or {}  # (tree, source, size, skeleton) it built
        for src in srcs:
            rec = {"id": self.next_id, "src": src, "proposer": getattr(prop, "name", "custom"),
                   "status": "invalid", "params": {}, "train_error": math.inf,
                   "heldout_error": math.inf, "r2": None, "size": None, "skeleton": None,
                   "error": None}
            self.next_id += 1
            records.append(rec)
            if src in state.seen:
                rec["status"] = "duplicate"
                continue
            state.seen.add(src)
            try:
                canon = made.get(src)
                tree = to_tree(src) if canon is None else canon[0]
                if task.objective == "mse" and not getattr(prop, "canonical", False):
                    # (likelihood programs' literals are constants, never fitted)
                    try:
                        tree = self.simplifier.canonicalize(tree)
                    except TooManyParameters:
                        raise
                    except Exception:  # noqa: BLE001 - an unusual form is calibrated as is
                        pass
                model = to_source(tree) if canon is None else src
                rec["model"] = model
                if model != src and model in state.seen:
                    rec["status"] = "duplicate"
                    continue
                state.seen.add(model)
                rec["size"] = size(tree) if canon is None else canon[2]
                rec["skeleton"] = skeleton(tree, task.params) if canon is None else canon[3]
                prog, params = scorer.validate(model)
            except Exception as e:  # noqa: BLE001 - an invalid candidate is a record
                rec["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
                continue
            items.append((prog, params))
            slots.append(rec)
        return _Batch(records, items, slots)

    def begin(self, b):
        """Begin the batch's calibrations (their starts are drawn here, one batch after the
        other); what ``calibrate`` and ``advance`` take."""
        return self.scorer.begin(b.items)

    def calibrate(self, b, fits, lent=0, meanwhile=None):
        """Fit the batch's programs on the caller's thread, the pool's and ``lent`` more (the
        proposer thread, once it has proposed; ``meanwhile()`` runs on the caller's once it has
        none left to start); then the batch's refits."""
        began = time.perf_counter()
        b.fitted = fits.finish(lent, meanwhile)
        b.fit_each = (time.perf_counter() - began) / max(1, len(b.items))
        b.refitted = [self.scorer.refit(prog, names, rec["params"], seed=rec["id"])
                      for rec, prog, names in b.refits]

    def finish(self, b):
        """Score the calibrated batch and fold its records into the front and population."""
        task, state, scorer = self.task, self.state, self.scorer
        for (prog, _), rec, p in zip(b.items, b.slots, b.fitted):
            rec["fit_seconds"] = round(b.fit_each, 6)
            why, scores = scorer.assess(prog, p) if isinstance(p, dict) else (None, None)
            if why is not None:
                rec.update(status="failed", params=p, error=why)
            elif isinstance(p, dict):
                tr, ho, r2 = scores
                rec.update(status="ok", params=p, train_error=tr, heldout_error=ho, r2=r2)
            else:
                rec["status"] = "failed"
                rec["error"] = str(p).splitlines()[0] if str(p) else type(p).__name__
            rec["time"] = round(time.perf_counter() - self.t0, 4)
            if self.first_good is None and _good(task, rec):
                self.first_good = rec
        for (old, prog, _), p in zip(b.refits, b.refitted or []):
            b.records.append(self.refit_record(old, prog, p))
        stamp = round(time.perf_counter() - self.t0, 4)
        for rec in b.records:
            rec.setdefault("time", stamp)
        ok = [r for r in b.records if r["status"] == "ok"]
        self.front = pareto_front(self.front + ok)
        pool = state.population + [r for r in ok if math.isfinite(r["heldout_error"])]
        state.population = _fittest(pool)
        state.front = self.front
        b.finished = True

    def refit_record(self, old, prog, p):
        """The record of a refit of ``old`` (proposer "refit"): ok when it scores, else
        failed."""
        model = old.get("model") or old["src"]
        rec = {"id": self.next_id, "src": model, "model": model, "proposer": "refit",
               "refit_of": old["id"], "status": "failed", "params": {},
               "train_error": math.inf, "heldout_error": math.inf, "r2": None,
               "size": old["size"], "skeleton": old.get("skeleton"), "error": None,
               "time": round(time.perf_counter() - self.t0, 4)}
        self.next_id += 1
        why, scores = self.scorer.assess(prog, p) if isinstance(p, dict) else (None, None)
        if isinstance(p, dict) and why is None:
            tr, ho, r2 = scores
            rec.update(status="ok", params=p, train_error=tr, heldout_error=ho, r2=r2)
        else:
            rec["error"] = why or (str(p).splitlines()[0] if str(p) else type(p).__name__)
        if self.first_good is None and _good(self.task, rec):
            self.first_good = rec
        return rec


def _fittest(pool):
    """The _POPULATION records of lowest ``fitness``, one per model (its best fit)."""
    out, models = [], set()
    for r in sorted(pool, key=fitness):
        model = r.get("model") or r["src"]
        if model not in models:
            models.add(model)
            out.append(r)
            if len(out) == _POPULATION:
                break
    return out


def _used(values, prog):
    """The entries of ``values`` (inputs or constants) that ``prog`` names."""
    return {k: v for k, v in values.items() if k in prog.free_names}


def _good(task, record):
    if record["status"] != "ok":
        return False
    if task.objective == "nll" or task.threshold is None:
        return math.isfinite(record["heldout_error"])
    return record["r2"] is not None and record["r2"] > task.threshold


def _read_records(path):
    records = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            records.append(json.loads(line))
    return records


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _dump(record):
    return json.dumps({k: ({n: _clean(x) for n, x in v.items()} if isinstance(v, dict)
                           else _clean(v)) for k, v in record.items()})


def _load(record):
    for k in ("train_error", "heldout_error"):
        if k in record and record[k] is None:
            record[k] = math.inf
    return record


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


def _parse_budget(budget):
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


def check_run(task, proposer=None, out=None, resume=False, force=False):
    """Raise ValueError (RunExistsError) for what ``search`` would refuse, before any work."""
    applicable = tuple(getattr(task, "proposers", ()) or ("mutate", "replay", "llm"))
    if isinstance(proposer, str) and proposer not in applicable:
        raise ValueError(f"the {proposer} proposer does not apply to task {task.name}; "
                         f"use {' or '.join(applicable)}")
    if out is not None:
        _existing(Path(out), resume, force)
    elif resume:
        raise ValueError("resume needs the out directory of the earlier run")
    return applicable


def _existing(out, resume, force):
    record_path = out / RECORD_FILE
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory; choose another out folder")
    held = [p for p in (record_path, out / SUMMARY_FILE) if p.exists()]
    if held and not resume and not force:
        n = 0
        if record_path.exists():
            with open(record_path, encoding="utf-8") as f:
                n = sum(1 for line in f if line.strip())
        raise RunExistsError(
            f"{out} already holds a search ({n} candidates in {RECORD_FILE}); continue it with "
            f"--resume (resume=True), replace it with --force (force=True), or choose a new "
            f"--out folder")
    return held


def _open_run(out, resume, force):
    """The record file of the run directory ``out``, after checking resume/force."""
    out = Path(out)
    record_path = out / RECORD_FILE
    held = _existing(out, resume, force)
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for p in held:
            p.unlink()
    return record_path


def search(task="damped", proposer=None, budget=None, max_candidates=None, out=None,
           resume=False, seed=0, batch=None, workers=None, progress=False, stop_on_success=False,
           candidates=None, grammar=None, client="dmci", fit_options=None, force=False,
           executor=None, refits=0, **proposer_options):
    """Search program structures for ``task``; returns a SearchResult (see its docstring).

    task: a Task or a built-in name (``ndvm search --list``).
    proposer: "mutate", "replay", "llm" or a Proposer object; default the task's first
        (``task.proposers``: mutate for damped/recurrence, replay for kalman/nile). A named
        proposer the task does not list raises ValueError.
    budget: seconds (a number or "60s", "2m"; must be positive); default the task's
        (``task.budget_seconds``). max_candidates: stop after that many proposals.
    out: a directory for candidates.jsonl (appended as it runs) and summary.json. A directory
        that already holds a search raises RunExistsError unless ``resume`` (continue from its
        candidates.jsonl: seen sources are skipped, the front is rebuilt) or ``force``
        (replace it).
    seed: the proposer's seed. batch: candidates proposed and calibrated per round; default 16,
        or with an ``executor`` EXECUTOR_BATCH per executor worker thread (so that each task it
        receives carries enough work to hide its scheduling cost; see ``ndvm.fit_many``).
    workers: the threads the search runs on (default: every core): the calling thread and the
        proposer thread calibrate too, each once it has nothing else to do; 1 runs everything on
        the calling thread, one step after the other (the same candidates, the same results).
        executor: a concurrent.futures.Executor
        that runs the calibrations instead (e.g. a Dask ``Client(...).get_executor()`` for a
        cluster; see ``ndvm.fit_many``); proposing and scoring stay in this process, and the
        result is the same as on local threads. progress: a live status line on stderr.
    stop_on_success: stop at the first good held-out fit. candidates: JSON-lines files for the
        replay proposer. grammar: a Grammar for mutate (default: the task's inputs and params).
    client: the evaluator client. fit_options: options for ndvm.fit overriding the task's
        (optimizer, steps, starts, lr). refits: per round, that many of the population's
        best members not yet refitted are fitted again by LM from REFIT_STARTS starts (their
        fit and wider draws; least-squares tasks), recorded as proposer "refit".
        proposer_options: passed to the proposer (llm: base_url,
        model, key_env, temperature, timeout, max_calls).

    Ctrl-C (KeyboardInterrupt) ends the search early: the result (``stopped="interrupted"``)
    and summary.json hold everything done so far.
    """
    task = get_task(task) if isinstance(task, str) else task
    if batch is None:
        batch = BATCH if executor is None else executor_round(executor)
    elif int(batch) < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, Integral)
                                or workers < 1):
        raise ValueError(f"workers must be a whole number of threads, at least 1 (or None: "
                         f"every core), got {workers!r}")
    budget_s = _parse_budget(budget) if budget is not None else task.budget_seconds
    if max_candidates is not None and max_candidates <= 0:
        raise ValueError(f"max_candidates must be a positive count; got {max_candidates}")
    max_candidates = max_candidates if max_candidates is not None else task.budget_candidates
    applicable = check_run(task, proposer, out, resume, force)
    if proposer is None:
        proposer = applicable[0]
    g = grammar or task.grammar or Grammar(inputs=tuple(task.inputs), params=tuple(task.params),
                                           loop=task.loops)
    if isinstance(proposer, Proposer):
        prop = proposer
    elif proposer == "replay" and not candidates:
        prop = Replay(sources=task.seeds)
    else:
        prop = make_proposer(proposer, seed=seed, candidates=candidates, **proposer_options)
        prop = task.proposer(prop) if proposer == "mutate" else prop
    state = SearchState(task=task, grammar=g, echo=sys.stderr if progress else None)
    scorer = _Scorer(task, client=client, workers=workers, fit_options=fit_options,
                     executor=executor)
    records, t_offset = [], 0.0
    record_path = None
    if out is not None:
        record_path = _open_run(out, resume, force)
        if resume and record_path.exists():
            records = [_load(r) for r in _read_records(record_path)]
            t_offset = max((r.get("time", 0.0) for r in records), default=0.0)
    for r in records:
        state.seen.add(r["src"])
        if r.get("model"):
            state.seen.add(r["model"])
    first_good = next((r for r in records if _good(task, r)), None)
    front = pareto_front(records)
    ok = [r for r in records if r["status"] == "ok" and math.isfinite(r["heldout_error"])]
    state.front, state.population = front, _fittest(ok)
    bar = _Progress(progress)
    sink = open(record_path, "a", encoding="utf-8") if record_path else None
    t0 = time.perf_counter() - t_offset
    session_start = time.perf_counter()
    n_new, stopped = 0, "budget"
    run = _Rounds(task, prop, state, scorer, t0, len(records), batch, max_candidates,
                  refits=refits)
    run.first_good = first_good
    run.front = front
    pipelined = bool(getattr(prop, "pipelined", False))
    serial = executor is None and (default_workers() if workers is None else int(workers)) == 1
    helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ndvm-propose")
    # the proposer thread's current job and its stop sign; the last batch calibrated; the last
    # batch scored; the ready batch's calibrations (begun)
    job, wake, done, scored, fits = None, None, None, None, None

    def settle(check=True):
        """End the proposer thread's job (it stops lending itself to the next batch; with
        ``check``, its failure is raised) and cancel the batch begun but never calibrated."""
        nonlocal job, fits
        if wake is not None:
            wake.set()
        try:
            if job is not None:
                job.result()
        except BaseException:
            if check:
                raise
        finally:
            job = None
            if fits is not None:
                fits.cancel()
                fits = None

    def emit(b):
        """Keep a scored batch: its records, their file lines, the progress line."""
        nonlocal n_new
        if b is None or b.emitted:
            return
        records.extend(b.records)
        b.emitted = True
        n_new += len(b.records)
        if sink:
            sink.write("".join(_dump(r) + "\n" for r in b.records))
            sink.flush()
        gc.collect(0)
        best = _leader(run.front)
        el = time.perf_counter() - session_start
        bar.update(_status(len(records), n_new / el if el > 0 else 0.0, best, len(run.front),
                           el, budget_s, task), key=(len(records), id(best), len(run.front)))

    # Python's cyclic garbage collector is paused for the search (its full collections walked
    # the simplifier's memo and the records, under the GIL, a third of the proposer's time); the
    # search itself makes no reference cycles, and the young generation is collected after
    # every batch (a custom proposer's cycles)
    paused = gc_paused()
    paused.__enter__()
    try:
        ready = run.next()  # the first batch is proposed before anything else can run
        if pipelined and isinstance(ready, _Batch):
            fits = run.begin(ready)
        while True:
            if isinstance(ready, str):
                stopped = ready
                break
            if budget_s is not None and time.perf_counter() - session_start >= budget_s:
                stopped = "budget"
                break
            if pipelined:
                # while batch k calibrates here, the proposer thread scores batch k-1, proposes
                # batch k+1 from the state through batch k-1 (one batch of lag, the same for any
                # worker count, so a seed proposes the same candidates) and begins it; then it
                # calibrates batch k too, and then batch k+1 until the next round begins. This
                # thread keeps (emits) batch k-2 once it has no fit of batch k left to start.
                # On one core (workers=1), the same steps one after the other
                if serial:
                    emit(scored)
                    run.calibrate(ready, fits)
                    following, fits = run.advance(done)
                else:
                    if wake is not None:
                        wake.set()  # (the last job lends itself to this batch no more)
                    last, staged, wake = job, Future(), threading.Event()
                    job = helper.submit(run.advance, done, fits, staged, wake)
                    # (batch k-2 is kept while the last fits of batch k end on the other thread)
                    run.calibrate(ready, fits, lent=1, meanwhile=lambda b=scored: emit(b))
                    following, fits = staged.result()
                    if last is not None:
                        last.result()  # (it ended before this one began: re-raises its own failure)
                scored, done, ready = done, ready, following
            else:  # the proposer sees every batch scored before it proposes the next
                run.calibrate(ready, run.begin(ready))
                run.finish(ready)
                emit(ready)
                ready = None if stop_on_success and run.first_good is not None else run.next()
            if stop_on_success and run.first_good is not None:
                stopped = "success"
                break
        settle()  # (the batch proposed after the last one calibrated is dropped)
        emit(scored)
        if done is not None:
            run.finish(done)
            emit(done)
            done = None
    except KeyboardInterrupt:
        stopped = "interrupted"  # keep what was done: the records are already written
        settle(check=False)  # (the proposer thread's job ends before anything is read)
        for b in (scored, done):  # scored (by that job or before) but not yet kept
            if b is not None and b.finished and not b.emitted:
                records.extend(b.records)
        if sink:  # unless Ctrl-C came between a batch's records and their writing
            sink.flush()
            with open(record_path, encoding="utf-8") as f:
                n_file = sum(1 for line in f if line.strip())
            sink.write("".join(_dump(r) + "\n" for r in records[n_file:]))
        run.front = pareto_front(records)  # the front and best of every record kept
        scored = [r for r in records if r["status"] == "ok" and math.isfinite(r["heldout_error"])]
        state.population = _fittest(scored)
    finally:
        settle(check=False)
        helper.shutdown(wait=True)
        paused.__exit__(None, None, None)
        if sink:
            sink.close()
    front, first_good = run.front, run.first_good
    best, scores = select(task, front, scorer.ev)
    elapsed = time.perf_counter() - t0
    lowest = _leader(front)  # (what the progress line shows)
    bar.finish(_status(len(records), n_new / max(elapsed - t_offset, 1e-9), lowest, len(front),
                       elapsed - t_offset, budget_s, task),
               key=(len(records), id(lowest), len(front)))
    result = SearchResult(task=task, records=records, front=front, best=best,
                          first_good=first_good, elapsed=elapsed,
                          proposer=getattr(prop, "name", "custom"), seed=seed, stopped=stopped,
                          warnings=list(state.warnings), selection=scores)
    if out is not None:
        (Path(out) / SUMMARY_FILE).write_text(json.dumps(_jsonable(result.summary()), indent=2))
    return result


def _jsonable(obj):
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_jsonable(v) for v in obj]
    return _clean(obj)


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
