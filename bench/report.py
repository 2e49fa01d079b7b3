"""Turn pytest-benchmark JSON from bench/test_speed.py into the decomposition tables and charts.

    python -m bench.report RESULTS.json [--plots DIR] [--stat median]

(a) decomposition tagged -> split -> native per program (ratios), (b) per-lane cost versus lanes
(per-lane gain 1 -> 256), (c) the JAX crossover: gradient steps before jit compile time is repaid
against ndvm's fastest native client. Charts (matplotlib, optional) are written to DIR.
"""
import argparse
import json
import math
import sys
from collections import defaultdict

BASELINES = ("tagged", "split")


def load(path, stat="median"):
    """{program: {impl: {lanes: seconds}}}, {(program, lanes): jax compile seconds}, metadata."""
    doc = json.loads(open(path).read())
    times = defaultdict(lambda: defaultdict(dict))
    compile_s = {}
    order = []
    for b in doc["benchmarks"]:
        info = b.get("extra_info", {})
        prog, impl, lanes = info.get("program"), info.get("impl"), info.get("lanes")
        if prog is None:
            continue
        if prog not in order:
            order.append(prog)
        times[prog][impl][int(lanes)] = b["stats"][stat]
        if "compile_s" in info:
            compile_s[(prog, int(lanes))] = info["compile_s"]
    meta = {"datetime": doc.get("datetime", "?"), "machine": doc.get("machine_info", {})}
    return {p: times[p] for p in order}, compile_s, meta


def natives(times):
    """Names of the native clients present (everything but the baselines and jax)."""
    names = set()
    for impls in times.values():
        names.update(i for i in impls if i not in BASELINES and i != "jax")
    return sorted(names)


def fmt_time(s):
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    if s >= 1.0:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.1f} µs"


def fmt_ratio(x):
    if x is None:
        return "-"
    return f"{x:,.0f}x" if x >= 100 else f"{x:.1f}x"


def best_native(impls, clients, lanes):
    cands = [(impls[c][lanes], c) for c in clients if lanes in impls.get(c, {})]
    return min(cands) if cands else (None, None)


def table(headers, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(  # noqa: E731
        str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
    ) + " |"
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def decomposition(times, lanes):
    """Rows: program, tagged, split, each native, representation, native execution, total."""
    clients = natives(times)
    rows = []
    for prog, impls in times.items():
        tg, sp = impls.get("tagged", {}).get(lanes), impls.get("split", {}).get(lanes)
        nat, _ = best_native(impls, clients, lanes)
        rows.append([prog, fmt_time(tg), fmt_time(sp)]
                    + [fmt_time(impls.get(c, {}).get(lanes)) for c in clients]
                    + [fmt_ratio(tg / sp if tg and sp else None),
                       fmt_ratio(sp / nat if sp and nat else None),
                       fmt_ratio(tg / nat if tg and nat else None)])
    headers = (["program", "tagged", "split"] + clients
               + ["tagged/split", "split/native", "tagged/native"])
    return headers, rows


def per_lane(times):
    """Rows: program, impl, µs per lane at each lane count, gain from the first to the last."""
    all_lanes = sorted({n for impls in times.values() for t in impls.values() for n in t})
    rows = []
    for prog, impls in times.items():
        for impl in sorted(impls, key=_impl_order):
            t = impls[impl]
            cells = [fmt_time(t[n] / n) if n in t else "-" for n in all_lanes]
            lo, hi = all_lanes[0], all_lanes[-1]
            gain = (t[lo] / lo) / (t[hi] / hi) if lo in t and hi in t else None
            rows.append([prog, impl] + cells + [fmt_ratio(gain)])
    headers = (["program", "impl"] + [f"L={n} /lane" for n in all_lanes]
               + [f"gain {all_lanes[0]}->{all_lanes[-1]}"])
    return headers, rows


def _impl_order(name):
    order = {"tagged": 0, "split": 1, "jax": 9}
    return (order.get(name, 5), name)


def crossover(times, compile_s):
    """[(program, lanes, compile, jax step, ndvm step, ndvm client, steps or None)]."""
    clients = natives(times)
    out = []
    for prog, impls in times.items():
        for lanes in sorted(impls.get("jax", {})):
            tj = impls["jax"][lanes]
            tn, client = best_native(impls, clients, lanes)
            c = compile_s.get((prog, lanes))
            if tn is None or c is None:
                continue
            steps = c / (tn - tj) if tj < tn else None
            out.append((prog, lanes, c, tj, tn, client, steps))
    return out


def crossover_table(rows):
    body = []
    for prog, lanes, c, tj, tn, client, steps in rows:
        if steps is None:
            verdict = "never (ndvm is faster per step)"
        else:
            verdict = f"{math.ceil(steps):,}"
        body.append([prog, lanes, fmt_time(c), fmt_time(tj), f"{fmt_time(tn)} ({client})", verdict])
    return ["program", "lanes", "jax compile", "jax step", "ndvm step", "steps to repay compile"], body


def report(path, stat="median", out=sys.stdout):
    times, compile_s, meta = load(path, stat)
    m = meta["machine"]
    cpu = m.get("cpu", {}).get("brand_raw", m.get("processor", "?"))
    print(f"# ndvm benchmark report ({stat} fwd+grad time per call)\n", file=out)
    print(f"machine: {m.get('node', '?')}, {cpu}, {m.get('cpu', {}).get('count', '?')} cores; "
          f"run: {meta['datetime']}\n", file=out)
    all_lanes = sorted({n for impls in times.values() for t in impls.values() for n in t})
    for lanes in (all_lanes[0], all_lanes[-1]) if len(all_lanes) > 1 else all_lanes:
        print(f"## (a) decomposition tagged -> split -> native, lanes = {lanes}\n", file=out)
        print(table(*decomposition(times, lanes)) + "\n", file=out)
    print("## (b) cost per lane vs lanes\n", file=out)
    print(table(*per_lane(times)) + "\n", file=out)
    rows = crossover(times, compile_s)
    print("## (c) JAX crossover: gradient steps before jit compile time is repaid\n", file=out)
    if rows:
        print(table(*crossover_table(rows)) + "\n", file=out)
    else:
        print("(no jax results: pip install jax jaxlib)\n", file=out)
    return times, compile_s, meta


def plots(times, compile_s, meta, outdir):
    """Write decomposition.png, per_lane.png and jax_crossover.png to ``outdir``."""
    import os

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    clients = natives(times)
    impls = ["tagged", "split"] + clients + ["jax"]
    colors = {"tagged": "#d62728", "split": "#ff7f0e", "jax": "#7f7f7f"}
    palette = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf"]
    for i, c in enumerate(clients):
        colors[c] = palette[i % len(palette)]
    progs = list(times)
    stamp = f"{meta['machine'].get('node', '')} · {meta['datetime'][:16]}"
    all_lanes = sorted({n for t in times.values() for i in t.values() for n in i})
    show_lanes = (all_lanes[0], all_lanes[-1]) if len(all_lanes) > 1 else tuple(all_lanes)

    # (a) decomposition: horizontal grouped bars, log time axis, one panel per lane count
    fig, axes = plt.subplots(1, len(show_lanes), figsize=(7 * len(show_lanes), 0.9 * len(progs) + 2),
                             sharey=True, squeeze=False)
    for ax, lanes in zip(axes[0], show_lanes):
        h = 0.8 / len(impls)
        for j, impl in enumerate(impls):
            ys, xs = [], []
            for i, p in enumerate(progs):
                t = times[p].get(impl, {}).get(lanes)
                if t:
                    ys.append(i + (j - (len(impls) - 1) / 2) * h)
                    xs.append(t * 1e6)
            ax.barh(ys, xs, height=h, color=colors[impl], label=impl)
        for i, p in enumerate(progs):
            tg = times[p].get("tagged", {}).get(lanes)
            nat, _ = best_native(times[p], clients, lanes)
            if tg and nat:
                ax.text(tg * 1e6 * 1.3, i, f"{tg / nat:,.0f}x", va="center", fontsize=9,
                        color="#d62728")
        ax.set_xscale("log")
        ax.set_yticks(range(len(progs)))
        ax.set_yticklabels(progs)
        ax.set_xlabel("fwd+grad time per call (µs, log scale)")
        ax.set_title(f"lanes = {lanes}  (red: tagged / fastest native)")
        ax.grid(axis="x", which="major", alpha=0.3)
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi * 8)
    axes[0][0].invert_yaxis()  # (once: the y axis is shared) programs and bars read top-down
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(impls), fontsize=9)
    fig.suptitle(f"Where the time goes: tagged -> split -> native ({stamp})")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(os.path.join(outdir, "decomposition.png"), dpi=110)
    plt.close(fig)

    # (b) per-lane cost vs lanes: small multiples, log-log
    ncol = min(4, len(progs))
    nrow = math.ceil(len(progs) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.3 * nrow + 0.6), squeeze=False)
    for k, p in enumerate(progs):
        ax = axes[k // ncol][k % ncol]
        for impl in impls:
            t = times[p].get(impl)
            if not t:
                continue
            ns = sorted(t)
            ax.plot(ns, [t[n] / n * 1e6 for n in ns], "o-", color=colors[impl], label=impl, ms=4)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(all_lanes)
        ax.set_xticklabels([str(n) for n in all_lanes])
        ax.set_title(p, fontsize=10)
        ax.set_xlabel("lanes")
        ax.set_ylabel("µs per lane")
        ax.grid(alpha=0.3, which="major")
    for k in range(len(progs), nrow * ncol):
        axes[k // ncol][k % ncol].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(impls), fontsize=9)
    fig.suptitle(f"Cost per lane vs lanes (lower is better; {stamp})")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(os.path.join(outdir, "per_lane.png"), dpi=110)
    plt.close(fig)

    # (c) JAX crossover: total time for n gradient steps, staged JAX (compile + n steps) vs ndvm
    rows = crossover(times, compile_s)
    if rows:
        lanes = max(r[1] for r in rows)
        sel = [r for r in rows if r[1] == lanes]
        ncol = min(4, len(sel))
        nrow = math.ceil(len(sel) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.4 * nrow), squeeze=False)
        steps = [10 ** (k / 4) for k in range(0, 29)]  # 1 .. 10^7 gradient steps
        for k, (prog, _, c, tj, tn, client, n_star) in enumerate(sel):
            ax = axes[k // ncol][k % ncol]
            ax.plot(steps, [c + n * tj for n in steps], color=colors["jax"], label="jax: compile + n steps")
            ax.plot(steps, [n * tn for n in steps], color=colors[client], label=f"ndvm {client}: n steps")
            if n_star is not None and n_star <= steps[-1]:
                ax.axvline(n_star, color="k", ls=":", lw=1)
                verdict = f"JAX repaid after {math.ceil(n_star):,} steps"
            elif n_star is not None:
                verdict = f"JAX repaid after {n_star:.1e} steps"
            else:
                verdict = "JAX never catches up"
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{prog}\n{verdict}", fontsize=9)
            ax.set_xlabel("gradient steps")
            ax.set_ylabel("total seconds")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left")
        for k in range(len(sel), nrow * ncol):
            axes[k // ncol][k % ncol].axis("off")
        fig.suptitle(f"JAX crossover at lanes = {lanes}: time for n fwd+grad steps ({stamp})")
        fig.tight_layout(rect=(0, 0, 1, 0.95))
        fig.savefig(os.path.join(outdir, "jax_crossover.png"), dpi=110)
        plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="pytest-benchmark --benchmark-json output")
    ap.add_argument("--plots", metavar="DIR", help="write PNG charts to DIR (needs matplotlib)")
    ap.add_argument("--stat", default="median", choices=("median", "min", "mean"))
    args = ap.parse_args(argv)
    times, compile_s, meta = report(args.results, args.stat)
    if args.plots:
        try:
            plots(times, compile_s, meta, args.plots)
        except ImportError:
            print("charts need matplotlib: pip install ndvm[plot]", file=sys.stderr)
            return 1
        print(f"charts: {args.plots}/decomposition.png, per_lane.png, jax_crossover.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
