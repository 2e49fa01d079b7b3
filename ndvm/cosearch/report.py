"""Readable results of a search: the front as a table, and PNG plots when matplotlib is installed."""
from pathlib import Path

import numpy as np

import ndvm

__all__ = ["front_table", "write_plots"]


def _fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec)


def front_table(result, limit=12):
    """The front (by size) as a text table with each member's fitted parameters."""
    nll = result.task.objective == "nll"
    head = ["size", "NLL" if nll else "held-out MSE", "" if nll else "R2", "found at", "program",
            "parameters"]
    rows = []
    for r in result.front[:limit]:
        ps = ", ".join(f"{k}={v:.5g}" for k, v in r["params"].items())
        rows.append([str(r["size"]), _fmt(r["heldout_error"], ".6g" if nll else ".4g"),
                     "" if nll else _fmt(r["r2"], ".4f"), f"{r['time']:.2f}s",
                     r.get("model") or r["src"], ps,
                     r["src"] if r.get("model") not in (None, r["src"]) else ""])
    widths = [max(len(x[i]) for x in rows + [head]) for i in range(4)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head[:4], widths)) + "  " + head[4]]
    for x in rows:
        lines.append("  ".join(c.rjust(w) for c, w in zip(x[:4], widths)) + "  " + x[4])
        if x[5]:
            lines.append(" " * (sum(widths) + 8) + "  with " + x[5])
        if x[6]:  # the simplified model differs from the proposal: show both
            lines.append(" " * (sum(widths) + 8) + "  proposed as " + x[6])
    return "\n".join(lines)


def write_plots(result, out):
    """Write fits.png (data and the best fits) and front.png (error vs size); the paths written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out = Path(out)
    task = result.task
    written = []
    ok = [r for r in result.records if r["status"] == "ok" and np.isfinite(r["heldout_error"])]
    fig, ax = plt.subplots(figsize=(6, 4))
    if task.objective == "mse":  # errors beyond 10x the held-out variance are drawn at the top
        var = float(np.var(task.split("heldout")[1]))
        top = 10 * var
        low = max(min([r["heldout_error"] for r in ok] + [var]) / 2, 1e-12)
    else:
        top = max([r["heldout_error"] for r in ok], default=1.0)
    if ok:
        ax.scatter([r["size"] for r in ok], [min(r["heldout_error"], top) for r in ok], s=6,
                   c="0.75", label=f"candidates ({len(ok)})")
    if result.front:
        ax.step([r["size"] for r in result.front],
                [min(r["heldout_error"], top) for r in result.front],
                where="post", c="C3", marker="o", label="Pareto front")
    ax.set_xlabel("program size (atoms)")
    ax.set_ylabel("NLL" if task.objective == "nll" else "held-out MSE")
    if task.objective == "mse":
        ax.set_yscale("log")
        ax.set_ylim(low, top * 1.5)
        if task.threshold is not None:
            ax.axhline((1 - task.threshold) * np.var(task.split("heldout")[1]), ls="--", c="0.4",
                       lw=1, label=f"R2 = {task.threshold}")
    ax.set_title(f"{task.name}: {result.proposer}, {len(result.records)} candidates")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "front.png", dpi=110)
    plt.close(fig)
    written.append(out / "front.png")
    if task.objective == "mse" and len(task.inputs) == 1 and result.front:
        (name, x), = task.inputs.items()
        grid = np.linspace(x.min(), x.max(), 300)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.scatter(x[task.train], task.target[task.train], s=12, c="k", label="train")
        ax.scatter(x[task.heldout], task.target[task.heldout], s=18, facecolors="none",
                   edgecolors="C0", label="held out")
        best = sorted(result.front, key=lambda r: r["heldout_error"])[:3]
        ev = ndvm.Evaluator()
        for i, r in enumerate(best):
            src = r.get("model") or r["src"]  # the simplified model its params belong to
            prog = ndvm.parse(src)
            data = {name: grid} if name in prog.free_names else {}
            with np.errstate(all="ignore"):
                y = ev.evaluate(prog, params=r["params"] or None, data=data).value[0]
            y = np.broadcast_to(y, grid.shape)
            label = src if len(src) < 60 else src[:57] + "..."
            ax.plot(grid, y, c=f"C{i + 1}", lw=2 if i == 0 else 1,
                    label=f"R2 {r['r2']:.3f}: {label}")
        ax.set_xlabel(name)
        ax.set_ylabel("y")
        lo, hi = task.target.min(), task.target.max()
        pad = 0.3 * (hi - lo)
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_title(f"{task.name}: the best fits")
        ax.legend(fontsize=6, loc="best")
        fig.tight_layout()
        fig.savefig(out / "fits.png", dpi=110)
        plt.close(fig)
        written.append(out / "fits.png")
    return written
