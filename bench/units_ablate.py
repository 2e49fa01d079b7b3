"""What each units mechanism contributes on the Feynman quick subset: ndvm-units with one of them
switched off (``noseeds``: no Buckingham Pi models; ``nofilter``: inconsistent candidates are
proposed too), the same protocol and JSON-lines rows as bench/feynman.py (method
ndvm-units-noseeds / ndvm-units-nofilter), so ``feynman.py --report`` reads them beside the others.

    python bench/units_ablate.py --quick 5 --budget 10 --noise 0,0.01 --seeds 0 \\
        --variants noseeds,nofilter --out /tmp/units_ablate.jsonl
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import feynman as F  # noqa: E402  (imports sr_common first: one BLAS thread)

from ndvm.cosearch import units  # noqa: E402

VARIANTS = {"noseeds": ("seeds", lambda self: []),
            "nofilter": ("admits", lambda self, tree: True)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", type=int, default=5)
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--noise", default="0,0.01")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    eqs = F.quick_subset(F.load_equations(), args.quick)
    F.warm_up(["ndvm"])
    done = {(r["method"], r["equation"], r["seed"], float(r["noise"]))
            for r in F.read_rows(args.out)}
    sink = F.Sink(args.out)
    try:
        for eq in eqs:
            for seed in (int(s) for s in args.seeds.split(",")):
                for noise in (float(v) for v in args.noise.split(",")):
                    for variant in args.variants.split(","):
                        name = f"ndvm-units-{variant}"
                        if (name, eq.id, seed, noise) in done:
                            continue
                        attr, off = VARIANTS[variant]
                        plain = getattr(units.Dimensions, attr)
                        setattr(units.Dimensions, attr, off)
                        try:
                            row = F.run_one("ndvm-units", eq, seed, noise, args.budget)
                        finally:
                            setattr(units.Dimensions, attr, plain)
                        row["method"] = name
                        sink.write(row)
                        print(f"{name:20s} {eq.id:10s} noise {noise:g} R2 {row['test_r2']:.6f} "
                              f"symbolic {row['symbolic']} size {row['sympy_size']}",
                              file=sys.stderr, flush=True)
    finally:
        sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
