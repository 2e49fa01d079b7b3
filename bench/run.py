"""Run the benchmark suite and the report in one command.

    python -m bench.run [--out bench-results] [--max-time 0.25] [-k EXPR]

Writes OUT/results.json (pytest-benchmark), OUT/report.md (the tables) and OUT/*.png (charts).
"""
import argparse
import io
import subprocess
import sys
from pathlib import Path

from bench import report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-results", help="output directory")
    ap.add_argument("--max-time", default="0.25",
                    help="seconds per native/jax benchmark (the eager baselines use fixed rounds)")
    ap.add_argument("-k", dest="select", help="pytest -k expression (e.g. 'kalman or damped')")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    cmd = [sys.executable, "-m", "pytest", str(Path(__file__).resolve().parent / "test_speed.py"),
           "--benchmark-only",
           f"--benchmark-json={results}", f"--benchmark-max-time={args.max_time}", "-q",
           "--benchmark-columns=median,min,rounds", "--benchmark-sort=name"]
    if args.select:
        cmd += ["-k", args.select]
    rc = subprocess.call(cmd)
    if rc != 0 or not results.exists():
        print(f"benchmark run failed (exit {rc})", file=sys.stderr)
        return rc or 1
    text = io.StringIO()
    times, compile_s, meta = report.report(str(results), out=text)
    (out / "report.md").write_text(text.getvalue())
    print(text.getvalue())
    try:
        report.plots(times, compile_s, meta, str(out))
        print(f"charts: {out}/decomposition.png, per_lane.png, jax_crossover.png")
    except ImportError:
        print("(charts skipped: pip install ndvm[plot])")
    return 0


if __name__ == "__main__":
    sys.exit(main())
