"""What a search hands back (``SearchResult``) and how it is concluded: the front's model
selected, the summary written to the run folder (``conclude``)."""
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import ndvm
from ndvm.cosearch.records import SUMMARY_FILE, Records, _jsonable
from ndvm.cosearch.select import front_stderr, select
from ndvm.cosearch.sexpr import to_tree
from ndvm.cosearch.task import predict
from ndvm.cosearch.tasks import Task
from ndvm.fit_options import whole_number

__all__ = ["SearchResult", "conclude"]


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
