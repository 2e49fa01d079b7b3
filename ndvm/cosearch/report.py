"""Readable results of a search: the front as a table, and PNG plots when matplotlib is installed.

``highlights`` picks the front members worth a look (the best, the simplest good one, the knee);
the table marks them and the fits plot draws them, numbered, with their sources in the caption.
The ``*_figure`` functions return matplotlib figures (tests inspect them); ``write_plots`` saves.
"""
import math
import textwrap
from pathlib import Path

import numpy as np

import ndvm
from ndvm.cosearch.task import predict, subset_rows

__all__ = ["front_table", "selection_text", "highlights", "write_plots", "front_figure", "fits_figure",
           "fit_figure"]


def _fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec)


def _is_good(task, r):
    if task.objective == "nll" or task.threshold is None:
        return math.isfinite(r["heldout_error"])
    return r.get("r2") is not None and r["r2"] > task.threshold


# the label of the front member of lowest held-out error (not "best": the model handed over is
# the one the selection chose, "chosen", which a reader of "best" took it for)
LOWEST = "lowest error"


def highlights(result):
    """{record id: [labels]} for the front's member of lowest held-out error (LOWEST), the one
    the model selection chose ("chosen", see ``ndvm.cosearch.select``), and its simplest good
    and knee members."""
    front = result.front
    marks = {}
    if not front:
        return marks
    best = min(front, key=lambda r: (r["heldout_error"], r["size"]))
    marks.setdefault(best["id"], []).append(LOWEST)
    if result.best is not None and result.best.get("selection", {}).get("explanation"):
        marks.setdefault(result.best["id"], []).append("chosen")  # the model selection's pick
    good = next((r for r in front if _is_good(result.task, r)), None)
    if good is not None and result.task.objective == "mse":
        marks.setdefault(good["id"], []).append("simplest good")
    if len(front) >= 3:  # the knee: farthest below the chord in (size, log error)
        xs = np.array([r["size"] for r in front], dtype=float)
        ys = np.log10(np.maximum([r["heldout_error"] for r in front], 1e-300))
        if result.task.objective == "nll":
            ys = np.array([r["heldout_error"] for r in front], dtype=float)
        xn = (xs - xs[0]) / max(xs[-1] - xs[0], 1e-12)
        yn = (ys - ys[-1]) / max(ys[0] - ys[-1], 1e-12)
        gap = 1.0 - xn - yn  # distance below the chord from (0, 1) to (1, 0)
        k = int(np.argmax(gap))
        if 0 < k < len(front) - 1 and gap[k] > 0:
            marks.setdefault(front[k]["id"], []).append("knee")
    return marks


def one_line(src, width=160):
    """A program's source on one line, comments dropped, cut at ``width`` characters."""
    text = " ".join(line.split(";", 1)[0] for line in src.splitlines())
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def front_table(result, limit=20):
    """The front (by size) as a text table with each member's fitted parameters.

    Fronts longer than ``limit`` rows are thinned, always keeping the highlighted members
    (``highlights``); a line says how many rows are left out.
    """
    nll = result.task.objective == "nll"
    marks = highlights(result)
    front = result.front
    if not front:
        return "(empty: no candidate was calibrated)"
    keep = set(range(len(front)))
    if limit is not None and len(front) > limit:
        must = {i for i, r in enumerate(front) if r["id"] in marks}
        rest = [i for i in range(len(front)) if i not in must]
        room = max(limit - len(must), 0)
        picked = [rest[int(j)] for j in np.linspace(0, len(rest) - 1, room)] if room else []
        keep = must | set(picked)
    head = ["size", "NLL" if nll else "held-out MSE", "" if nll else "R2", "found at", "note",
            "program"]
    rows, extra = [], []
    for i, r in enumerate(front):
        if i not in keep:
            continue
        se = r.get("stderr") or {}
        ps = ", ".join(f"{k}={v:.5g}" + (f" +- {se[k]:.2g}" if se.get(k) is not None else "")
                       for k, v in r["params"].items())
        rows.append([str(r["size"]), _fmt(r["heldout_error"], ".6g" if nll else ".4g"),
                     "" if nll else _fmt(r["r2"], ".4f"), f"{r['time']:.2f}s",
                     ", ".join(marks.get(r["id"], [])), one_line(r["model"])])
        proposed = r["proposed"] if r.get("proposed") not in (None, r["model"]) else ""
        extra.append((ps, one_line(proposed) if proposed else ""))
    refs = [(["ref", _fmt(ref["heldout_error"], ".6g" if nll else ".4g"),
              "" if nll else _fmt(ref["r2"], ".4f"), "-", "reference"],
             ref["label"] + (f"  (RMSE {ref['rmse']:.4g})" if "rmse" in ref else ""))
            for ref in result.task.references()]  # e.g. the statistician's model of a series
    widths = [max(len(x[i]) for x in rows + [head] + [c for c, _ in refs]) for i in range(5)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head[:5], widths)) + "  " + head[5]]
    for x, (ps, proposed) in zip(rows, extra):
        lines.append("  ".join(c.rjust(w) for c, w in zip(x[:5], widths)) + "  " + x[5])
        if ps:
            lines.append(" " * (sum(widths) + 10) + "  with " + ps)
        if proposed:  # the simplified model differs from the proposal: show both
            lines.append(" " * (sum(widths) + 10) + "  proposed as " + proposed)
    for cells, label in refs:
        lines.append("  ".join(c.rjust(w) for c, w in zip(cells, widths)) + "  " + label)
    omitted = len(front) - len(rows)
    if omitted:
        lines.append(f"({omitted} of {len(front)} front rows not shown; every row is in "
                     f"summary.json)")
    return "\n".join(lines)


def selection_text(result):
    """Why ``result.best`` was chosen, its model and its parameters refitted on all the data
    (a few lines; empty when the task has no model selection, e.g. a likelihood task)."""
    best = result.best
    sel = (best or {}).get("selection") or {}
    if not sel.get("explanation"):
        return ""
    lines = [f"chosen by the {sel['rule']}:", "  " + sel["explanation"],
             "  model: " + one_line(best["model"])]
    if best["params"]:
        se = best.get("stderr") or {}
        lines.append("  with " + ", ".join(
            f"{k}={v:.6g}" + ("" if k not in se else f" +- {se[k]:.2g}" if se[k] is not None
                              else " (undetermined)")
            for k, v in best["params"].items()) + (" (standard errors)" if se else ""))
    if best.get("r2_all") is not None:
        lines.append(f"  R2 on all {result.task.target.size} points: {best['r2_all']:.6f}")
    return "\n".join(lines)


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _calibrated(result):
    """(ids, sizes, held-out errors) of the calibrated records with a finite error, as arrays
    (read a block at a time: a long search's records are never all unpacked at once)."""
    rows = np.array([(r["id"], r["size"], r["heldout_error"]) for r in result.records
                     if r["status"] == "ok" and np.isfinite(r["heldout_error"])],
                    dtype=np.float64).reshape(-1, 3)
    return rows[:, 0], rows[:, 1], rows[:, 2]


def front_figure(result):
    """Held-out error vs size (mse tasks), or the NLL per candidate and the fitted series (nll)."""
    plt = _pyplot()
    task = result.task
    ids, sizes, errors = _calibrated(result)
    n = len(result.records)
    if task.objective == "nll":
        return _likelihood_figure(plt, result, ids, errors)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    var = float(np.var(task.split("heldout")[1]))
    # (a constant held-out target, one held-out point: the largest error sets the scale)
    scale = var if var > 0 else float(np.max(errors, initial=0.0)) or 1.0
    top = 10 * scale  # errors beyond 10x the held-out variance are drawn at the top edge
    positive = errors[errors > 0]
    low = max(min(positive.min(initial=scale), scale) / 2, 1e-16 * scale)
    clipped = int(np.sum(errors > top))
    exact = int(np.sum(errors < low))  # (0 on a log axis: drawn at the bottom edge)
    errors = np.maximum(errors, low)
    n_cal = result.n_calibrated
    if errors.size:
        label = f"calibrated candidates ({errors.size} of {n}"
        if n_cal > errors.size:
            label += f"; {n_cal - errors.size} with a non-finite error not drawn"
        label += ")"
        if clipped:
            label += f"\n{clipped} with MSE > {top:.3g} drawn at the top edge"
        if exact:
            label += f"\n{exact} with MSE < {low:.3g} (exact) drawn at the bottom edge"
        ax.scatter(sizes, np.minimum(errors, top), s=6, c="0.75", label=label)
    if result.front:
        ax.step([r["size"] for r in result.front],
                [min(max(r["heldout_error"], low), top) for r in result.front],
                where="post", c="C3", marker="o", label=f"Pareto front ({len(result.front)})")
    member = (result.best or {}).get("front_member")
    if member is not None and np.isfinite(member.get("heldout_error", np.inf)):
        ax.scatter([member["size"]], [min(max(member["heldout_error"], low), top)], s=180,
                   marker="*", c="gold", edgecolors="k", linewidths=0.8, zorder=4,
                   label=f"chosen by cross-validation (size {member['size']})")
    for i, ref in enumerate(task.references()):
        ax.axhline(min(max(ref["heldout_error"], low), top), ls=":", c=f"C{i}", lw=1.2,
                   label=ref["label"])
    ax.set_xlabel("program size (atoms)")
    ax.set_ylabel("held-out MSE")
    ax.set_yscale("log")
    ax.set_ylim(low, top * 1.5)
    if task.threshold is not None and var > 0:
        ax.axhline((1 - task.threshold) * var, ls="--", c="0.4", lw=1,
                   label=f"R² = {task.threshold:.4g} (a good fit is below)")
    ax.set_title(f"{task.name}: {result.proposer}, {n} candidates, {n_cal} calibrated")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.tight_layout()
    return fig


def _likelihood_figure(plt, result, ids, errors):
    task = result.task
    series = task.series(result.best["params"]) if (result.best is not None
                                                    and task.series is not None) else None
    fig, axes = plt.subplots(1, 2 if series else 1, figsize=(11 if series else 6, 4.2),
                             squeeze=False)
    ax = axes[0][0]
    if errors.size:
        ax.scatter(ids, errors, s=14, c="0.5",
                   label=f"calibrated candidates ({errors.size} of {len(result.records)})")
    if result.best is not None:
        b = result.best
        ax.scatter([b["id"]], [b["heldout_error"]], s=60, c="C3", marker="*", zorder=3,
                   label="best: " + ", ".join(f"{k}={v:.4g}" for k, v in b["params"].items()))
    ax.set_xlabel("candidate id")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("negative log-likelihood")
    ax.set_title(f"{task.name}: NLL per candidate")
    ax.legend(fontsize=8)
    if series:
        ax = axes[0][1]
        ax.plot(series["x"], series["data"], "k.", ms=4, label=series.get("data_label", "data"))
        ax.plot(series["x"], series["fitted"], c="C3", lw=2, label=series["label"])
        ax.set_xlabel(series["xlabel"])
        ax.set_ylabel(series["ylabel"])
        ax.set_title(series.get("title", f"{task.name}: the best candidate's fit"))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# Data rows a plot draws at most: a seeded sample of larger data (10,000 points already fill a
# plot; a million took fits.png 15 to 20 s to draw and save; the title says what is drawn)
PLOT_ROWS = 10_000


def _drawn(n):
    """(the rows of n that a plot draws, ``PLOT_ROWS`` at most: ``subset_rows``; the line its
    title adds to say so, "" when it draws them all)."""
    rows = subset_rows(n, PLOT_ROWS, 0)
    return rows, ("" if rows.size == n else f"\n{rows.size:,} of the {n:,} rows drawn (a "
                                             f"seeded sample)")


def _predicted(r, inputs, consts):
    """Record ``r``'s model at its params on the rows of ``inputs``."""
    prog = ndvm.parse(r["model"])  # (the simplified model its params belong to)
    with np.errstate(all="ignore"):
        return predict(ndvm.Evaluator(), prog, r["params"], inputs, consts)


def fits_figure(result):
    """The data with the highlighted front members (numbered; sources in the caption), or None
    (a likelihood task, a task without inputs or an empty front): with one input, the data and
    each member's curve over it; with more, each member's prediction against the observed
    target at every row (train filled, held out hollow) and its residuals. The chosen one is
    drawn as the search hands it over (``result.best``: its model as simplified after selection
    and its parameters refitted on every point), not as the search's training split fitted it."""
    task = result.task
    if task.objective != "mse" or not task.inputs or not result.front:
        return None
    plt = _pyplot()
    marks = highlights(result)
    chosen = [result.best if "chosen" in marks[r["id"]] else r
              for r in result.front if r["id"] in marks]
    chosen.sort(key=lambda r: r["size"])
    caption = [f"[{i}] {', '.join(marks[r['id']])}: {one_line(r['model'], 600)}"
               for i, r in enumerate(chosen, 1)]
    wrapped = [textwrap.fill(c, 110, subsequent_indent="      ") for c in caption]
    n_lines = sum(w.count("\n") + 1 for w in wrapped)
    target = task.target_name or "y"

    def label(i, r):
        return (f"[{i}] {', '.join(marks[r['id']])}: size {r['size']}, R² {r['r2']:.3f}"
                + (" (refitted)" if r is result.best else ""))

    if len(task.inputs) == 1:
        height = 4.2 + 0.17 * n_lines
        fig, ax = plt.subplots(figsize=(7.5, height))
        (name, x), = task.inputs.items()
        grid = np.linspace(x.min(), x.max(), 400)
        rows, note = _drawn(x.size)
        train, held = (np.intersect1d(rows, which) for which in (task.train, task.heldout))
        ax.scatter(x[train], task.target[train], s=12, c="k", label="train")
        ax.scatter(x[held], task.target[held], s=18, facecolors="none",
                   edgecolors="C0", label="held out")
        for i, r in enumerate(chosen, 1):
            ax.plot(grid, _predicted(r, {name: grid}, task.consts), c=f"C{i}",
                    lw=2.2 if "chosen" in marks[r["id"]] else 1.4,
                    ls="-" if i == 1 else ("--" if i == 2 else ":"), label=label(i, r))
        ax.set_xlabel(name)
        ax.set_ylabel(target)
        lo, hi = task.target.min(), task.target.max()
        pad = 0.3 * (hi - lo)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_title(f"{task.name}: the chosen model and the front's highlights{note}")
        ax.legend(fontsize=9, loc="best")
    else:  # (several inputs: no curve to draw; each row's prediction against its data)
        height = 6.0 + 0.17 * n_lines
        fig, (ax, res_ax) = plt.subplots(2, 1, figsize=(7.5, height), sharex=True,
                                         gridspec_kw={"height_ratios": [3, 1]})
        lo, hi = float(task.target.min()), float(task.target.max())
        rows, note = _drawn(task.target.size)
        y = task.target[rows]
        train = np.isin(rows, task.train)  # (the drawn rows' split: filled, else hollow)
        ax.plot([lo, hi], [lo, hi], c="0.4", lw=1, label="predicted = observed")
        for i, r in enumerate(chosen, 1):
            pred = _predicted(r, {k: v[rows] for k, v in task.inputs.items()}, task.consts)
            c = f"C{i}"
            ax.scatter(y[train], pred[train], s=10, color=c, alpha=0.7, label=label(i, r))
            ax.scatter(y[~train], pred[~train], s=22, facecolors="none", edgecolors=c)
            res_ax.scatter(y, y - pred, s=8, color=c, alpha=0.7)
        ax.scatter([], [], s=22, facecolors="none", edgecolors="k", label="hollow: held out")
        ax.set_ylabel(f"predicted {target}")
        ax.set_title(f"{task.name}: the chosen model and the front's highlights, on "
                     f"{task.target.size:,} rows of {len(task.inputs)} inputs{note}")
        ax.legend(fontsize=8, loc="upper left")
        res_ax.axhline(0.0, c="0.4", lw=1)
        res_ax.set_xlabel(f"observed {target}")
        res_ax.set_ylabel("residual")
    bottom = (0.17 * n_lines + 0.25) / height
    fig.text(0.01, 0.01, "\n".join(wrapped), fontsize=8, family="monospace", va="bottom")
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def fit_figure(prog, params, data, y, target, r2, stderr=None, client="dmci"):
    """``ndvm fit``'s plot: the model on a fine grid over the data, R², parameters, residuals."""
    plt = _pyplot()
    ev = ndvm.Evaluator(client=client)
    pred = np.broadcast_to(ev.evaluate(prog, params=params, data=data).value[0], y.shape)
    fig, (ax, res_ax) = plt.subplots(2, 1, figsize=(8.4, 5.6), sharex=len(data) == 1,
                                     gridspec_kw={"height_ratios": [3, 1]})
    rows, note = _drawn(y.size)
    if len(data) == 1:
        (name, x), = data.items()
        grid = np.linspace(x.min(), x.max(), 400)
        with np.errstate(all="ignore"):
            line = np.broadcast_to(ev.evaluate(prog, params=params, data={name: grid}).value[0],
                                   grid.shape)
        x = np.broadcast_to(x, y.shape)[rows]
        ax.scatter(x, y[rows], s=12, c="k", label=f"data ({y.size:,} rows)")
        ax.plot(grid, line, c="C3", lw=2, label="model")
        ax.set_ylabel(target)
        res_ax.scatter(x, y[rows] - pred[rows], s=10, c="k")
        res_ax.set_xlabel(name)
    else:
        ax.scatter(y[rows], pred[rows], s=12, c="k", label="rows")
        lo, hi = float(np.min(y)), float(np.max(y))
        ax.plot([lo, hi], [lo, hi], c="C3", lw=1, label="prediction = data")
        ax.set_xlabel(target)
        ax.set_ylabel(f"predicted {target}")
        res_ax.scatter(y[rows], y[rows] - pred[rows], s=10, c="k")
        res_ax.set_xlabel(target)
    res_ax.axhline(0.0, c="C3", lw=1)
    res_ax.set_ylabel("residual")
    lines = [f"R² = {r2:.4f}"]
    for k, v in params.items():
        se = None if stderr is None else stderr.get(k)
        lines.append(f"{k} = {v:.5g}" + (f" ± {se:.2g}" if se is not None and np.isfinite(se)
                                         else ""))
    ax.set_title(f"{prog.name}: fit to {target}{note}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    # R² and the parameters beside the plot, under the legend, never over the data
    ax.text(1.03, 0.72, "\n".join(lines), transform=ax.transAxes, va="top", fontsize=9,
            family="monospace")
    fig.tight_layout()
    return fig


def write_plots(result, out):
    """Write front.png and (mse tasks with inputs) fits.png into ``out``; the paths written."""
    plt = _pyplot()
    if plt is None:
        return []
    out = Path(out)
    written = []
    for name, make in (("front.png", front_figure), ("fits.png", fits_figure)):
        fig = make(result)
        if fig is None:
            continue
        fig.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(out / name)
    written += result.task.extra_plots(result, out)
    return written
