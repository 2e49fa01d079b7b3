"""The ``ndvm`` command line: ``ndvm run FILE.scm --param a=1 --data x=0.5,1.0 [--grad]``,
``ndvm disasm FILE.scm``.

Errors in user input print one line (file:line:col: kind: message) and exit with status 2.
"""
import argparse
import sys
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = ["main"]


def _assignment(text):
    name, sep, values = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE[,VALUE...], got {text!r}")
    try:
        parsed = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"values of {name!r} must be numbers: {values!r}") from None
    if not parsed:
        raise argparse.ArgumentTypeError(f"{name!r} has no values")
    return name, parsed[0] if len(parsed) == 1 else np.array(parsed)


def example_path(name="damped_oscillator.scm"):
    """Path of an example program shipped with the package."""
    return Path(str(resources.files("ndvm") / "examples" / name))


def _read_program(path):
    import ndvm

    if path == "-":
        return ndvm.parse(sys.stdin.read(), name="<stdin>")
    if path.startswith("example:"):
        p = example_path(path.split(":", 1)[1])
    else:
        p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SystemExit(f"ndvm: cannot read {path}: {e.strerror}") from None
    return ndvm.parse(text, name=str(path))


def _format_row(cells, widths):
    return "  ".join(str(c).rjust(w) for c, w in zip(cells, widths))


def cmd_run(args):
    """Evaluate a program file and print its values (and gradients with --grad)."""
    import ndvm

    prog = _read_program(args.file)
    params = dict(args.param or [])
    data = dict(args.data or [])
    consts = dict(args.const or [])
    ev = ndvm.Evaluator(client=args.client, dtype=args.dtype, compat=args.compat)
    res = ev.evaluate(prog, params=params, data=data, consts=consts, grad=args.grad)
    S, N = res.value.shape
    jac = res.jacobian() if args.grad else {}
    header = ["start", "point", "value"] + [f"d/d{k}" for k in jac]
    rows = []
    for s in range(S):
        for n in range(N):
            row = [s, n, f"{res.value[s, n]:.10g}"] + [f"{jac[k][s, n]:.10g}" for k in jac]
            rows.append(row)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print(f"{prog.name}: free names {', '.join(prog.free_names) or '(none)'}; "
          f"{S} start(s) x {N} point(s); client {args.client}")
    print(_format_row(header, widths))
    for r in rows:
        print(_format_row(r, widths))
    if args.grad:
        g = res.grad
        print("gradient of the sum of values: " +
              ", ".join(f"{k}={np.array2string(v, precision=8)}" for k, v in g.items()))
    return 0


def cmd_disasm(args):
    """Compile a program to stack bytecode and print the listing."""
    from ndvm.clients import bytecode

    print(bytecode.disassemble(_read_program(args.file)), end="")
    return 0


def build_parser():
    p = argparse.ArgumentParser(prog="ndvm", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="evaluate a program file", description=cmd_run.__doc__)
    r.add_argument("file", help="program file (.scm), '-' for stdin, or example:NAME")
    r.add_argument("--param", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a parameter: one value, or one per start (differentiable)")
    r.add_argument("--data", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a data input: one value per data point")
    r.add_argument("--const", action="append", type=_assignment, metavar="NAME=V[,V...]",
                   help="a constant shared by all lanes (a number or a vector)")
    r.add_argument("--client", default="dmci", help="client (see ndvm.clients()); default dmci")
    r.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    r.add_argument("--compat", default=None, choices=["reference"],
                   help="reproduce the reference runtime's clamped sqrt/log")
    r.add_argument("--grad", action="store_true", help="also print gradients")
    r.set_defaults(func=cmd_run)
    d = sub.add_parser("disasm", help="show the bytecode a program compiles to",
                       description=cmd_disasm.__doc__)
    d.add_argument("file", help="program file (.scm), '-' for stdin, or example:NAME")
    d.set_defaults(func=cmd_disasm)
    return p


def main(argv=None):
    """Entry point of the ``ndvm`` command."""
    import ndvm

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ndvm.SchemeError as e:
        first = str(e).splitlines()
        print(f"ndvm: {first[0]}", file=sys.stderr)
        for line in first[1:]:
            print(f"  {line.strip()}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as e:
        print(f"ndvm: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
