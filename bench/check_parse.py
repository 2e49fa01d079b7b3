"""The parser's checker: an old and a new build must read and expand every text the same way
(the same Expanded: datums, nodes, their kinds, order, constants bit for bit, symbols and
positions; the same free names; the same Program attributes; every bad text the same error
with the same kind, message, position and form).

    python bench/check_parse.py sources OUT.json          # a search's candidates (any venv)
    python bench/check_parse.py texts OUT.json [SOURCES.json ...]
    python bench/check_parse.py native SRCDIR TEXTS.json OUT   # in any venv, per source tree
    python bench/check_parse.py python TEXTS.json OUT          # in each venv (old, new)
    python bench/check_parse.py compare A B

``sources``: the candidate sources Scorer.validate_round sees in three searches (damped, 4,096
candidates, 4 islands; recurrence, 2,048; a SymbolicRegressor on Feynman I.9.18's data,
bench/feynman.py's, 2,048). ``texts``: the checked texts, made the same from the same inputs: the
programs under the shared data folder (NDVM_SHARED_DATA, default /work/shared/data; none when it
is absent), bench/programs' and the examples' files, the prelude, the given sources, and 60,000
random, mutated and truncated texts (seeded: bad ones included, unbalanced, odd numbers, '#'
syntax, strings, Unicode, control characters, comments). ``native``: compiles
bench/native/check_parse_dump.cpp against SRCDIR's reader and expander and writes its dump of
each text (the whole Expanded, or the error). ``python``: each text through ndvm._core.parse
in the running venv: the Program's source, name, free_names, free_positions, result_position
and _bounded, or the exception's type, message, line, col, form and file. ``compare``: the
differing lines of two dumps (0 is the bar).
"""
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sources(out):
    """Writes the candidate sources of three searches (run in the current venv) to ``out``."""
    import ndvm
    from ndvm.cosearch import score

    got = []
    validate = score.Scorer.validate_round

    def kept(self, srcs, *args, **kwargs):
        got.extend(srcs)
        return validate(self, srcs, *args, **kwargs)

    score.Scorer.validate_round = kept
    try:
        ndvm.search("damped", max_candidates=4096, seed=1, islands=4, budget=3600,
                    migration_every=256, workers=1)
        ndvm.search("recurrence", max_candidates=2048, seed=1, islands=4, budget=3600,
                    migration_every=256, workers=1)
        sys.path.insert(0, str(HERE))
        import feynman

        eq = next(e for e in feynman.load_equations() if e.id == "I.9.18")
        X, y, _, _ = feynman.make_data(eq, 0)
        ndvm.SymbolicRegressor(max_candidates=2048, islands=2, workers=1, budget=None,
                               random_state=0).fit(X, y)
    finally:
        score.Scorer.validate_round = validate
    Path(out).write_text(json.dumps(got))
    print(f"{len(got)} sources -> {out}")


def _strings(value):
    """Every str inside a JSON value (keys and values, nested)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list):
        yield from _strings_of_list(value)


def _strings_of_list(items):
    for v in items:
        yield from _strings(v)


def _shared_programs():
    """The program texts of the shared data folder's JSON files (strings with a '('), or none
    when the folder is absent."""
    folder = Path(os.environ.get("NDVM_SHARED_DATA", "/work/shared/data"))
    if not folder.is_dir():
        print(f"(no shared data folder at {folder}: its programs skipped)")
        return []
    found = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".json":
            docs = [json.loads(path.read_text())]
        elif path.suffix == ".jsonl":
            docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        else:
            continue
        for doc in docs:
            found.extend(s for s in _strings(doc) if "(" in s)
    return found


def _files():
    """bench/programs' and ndvm/examples' program files, and the prelude."""
    from ndvm._core import _core

    found = [_core.prelude()]
    for folder in (HERE / "programs", HERE.parent / "ndvm" / "examples"):
        if folder.is_dir():
            found.extend(p.read_text() for p in sorted(folder.rglob("*.scm")))
    return found


# The random texts' parts: names (plain, Unicode, with control or invisible characters), numbers
# in every shape the reader takes or refuses, '#' syntax, strings, forms' names and punctuation.
_ATOMS = [
    "x", "a", "b", "c", "k", "s", "t", "y", "foo", "f", "g", "n", "i", "acc", "xs", "vec",
    "+", "-", "*", "/", "=", "<", "<=", ">", ">=", "square", "sqrt", "exp", "log", "sin", "cos",
    "tanh", "pow", "abs", "min", "max", "not", "car", "cdr", "cons", "list", "null?", "map",
    "filter", "fold-left", "length", "vector-ref", "pi", "if", "let", "let*", "letrec",
    "letrec*", "lambda", "define", "loop", "recur", "quote", "quasiquote", "cond", "case",
    "else", "and", "or", "when", "unless", "begin", "set!", "define-syntax", "=>",
    "0", "1", "2", "-1", "12", "1.0", "-2.0", "0.5", ".5", "-.5", "1.", "-0", "-0.0", "+0.0",
    "1e400", "-1e400", "1e-400", "1e5", "2.5e-3", "1E3", "1e", "1e+", "1.5.2", "1/3", "+5",
    "123456789012345", "1234567890123456", "99999999999999999999", "0x10", "1x", "1+", "+",
    "-", "...", ".", "..", "+.", "-.", "#t", "#f", "#true", "#false", "#x", "#", "#\\a", "#(",
    "\"s\"", "\"", "λ", "x₁", "é", "\u00a0", "a\u00a0b", "a\u200bb", "\ufeffx", "a\u3000b",
    "a\x00b", "a\x01", "\x7f", "a\u2003b", "a\u2060b", "日本", "🙂",
]
_FORMS = [
    "({f} {a})", "({f} {a} {b})", "({f} {a} {b} {c})", "(if {a} {b} {c})", "(if {a} {b})",
    "(let (({n} {a})) {b})", "(let* (({n} {a}) ({m} {b})) {c})", "(lambda ({n}) {a})",
    "(lambda {n} {a})", "(lambda ({n} . {m}) {a})", "((lambda ({n} {m}) {a}) {b} {c})",
    "(define ({n} {m}) {a}) ({n} {b})", "(define {n} {a}) {b}", "(loop (({n} {a})) {b})",
    "(loop (({n} {a}) ({m} {b})) (if (< {n} 3) (recur (+ {n} 1) {m}) {c}))", "(recur {a})",
    "'{a}", "(quote {a})", "`{a}", "[{a} {b}]", "[]", "()", "'()", "({a} . {b})",
    "(cond ({a} {b}) (else {c}))", "(case {a} ((1 2) {b}) (else {c}))", "(and {a} {b})",
    "(or {a})", "(when {a} {b})", "(unless {a} {b} {c})", "(begin {a} {b})",
    "(let {n} (({m} {a})) {b})", "(letrec (({n} (lambda () {a}))) {b})", "(set! {n} {a})",
    "; c\n{a}", "#| c |#{a}", "#| #| n |# |# {a}", "{a} ; end", "\t{a}\r\n", "(+ {a}\n {b})",
    "(map (lambda ({n}) {a}) {b})", "(vector-ref {a} {b})", "(pow {a} {b})",
]


def _random_text(rng, depth=0):
    """A random program text: a form of _FORMS with random parts, or an atom."""
    if depth > 4 or rng.random() < 0.35:
        return rng.choice(_ATOMS)
    form = rng.choice(_FORMS)
    parts = {k: _random_text(rng, depth + 1) for k in "abc"}
    names = {k: rng.choice(_ATOMS[:20] + ["if", "+", "1", "(x)", "pi"]) for k in "nm"}
    return form.format(f=rng.choice(_ATOMS), **parts, **names)


_NOISE = list("()[]'\". ;#|\n\t \\") + ["\x00", "\u00a0", "\u200b", "1e9", "-", "e", "/", "é"]


def _mutated(rng, text):
    """``text`` with a random change: a character deleted, inserted or swapped, a token
    replaced, a bracket doubled, or the text cut short."""
    if not text:
        return rng.choice(_NOISE)
    i = rng.randrange(len(text) + 1)
    way = rng.randrange(6)
    if way == 0:
        return text[:i] + text[i + 1:]
    if way == 1:
        return text[:i] + rng.choice(_NOISE) + text[i:]
    if way == 2 and len(text) > 1:
        j = rng.randrange(len(text))
        t = list(text)
        t[i % len(t)], t[j] = t[j], t[i % len(t)]
        return "".join(t)
    if way == 3:
        return text[:i] + rng.choice(_ATOMS) + text[i:]
    if way == 4:
        return text[:i] + rng.choice("()[]") + text[i:]
    return text[:i]


def texts(out, *source_files):
    """Writes the checked texts (see the module's docstring) to ``out``, a JSON list."""
    base = _shared_programs() + _files()
    for path in source_files:
        base.extend(json.loads(Path(path).read_text()))
    seen = set()
    kept = [t for t in base if not (t in seen or seen.add(t))]
    rng = random.Random(20261207)
    made = [_random_text(rng) for _ in range(25000)]
    for pool in (kept, made):
        for _ in range(20000 if pool is made else 15000):
            t = rng.choice(pool)
            for _ in range(rng.randrange(1, 4)):
                t = _mutated(rng, t)
            made.append(t)
    made.extend(["", " ", ";", "#|", "#| x", "(", ")", "]", "[", "(]", "[)", "'", "( . x)",
                 "(x .)", "(x . y z)", "(x . y)", "\ufeff(+ 1 2)", "(" * 20000 + ")" * 20000,
                 "'" * 20000 + "x", "\ud800", "(+ x \udfff)", "\x00", "x\x00", "(x\x00)"])
    every = kept + made
    Path(out).write_text(json.dumps(every))
    print(f"{len(every)} texts ({len(kept)} programs and sources, {len(made)} made) -> {out}")


def native(srcdir, texts_file, out):
    """Compiles the native dump against ``srcdir``'s core and writes its dump of every text
    (a text that is not valid UTF-8 as a str, a lone surrogate, never reaches the core: it is
    dumped as skipped)."""
    core = Path(srcdir) / "ndvm" / "_core"
    every = json.loads(Path(texts_file).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "dump"
        flags = ["-std=c++17", "-O2", "-DNDEBUG", "-fno-math-errno", "-fno-trapping-math"]
        subprocess.run(["g++", *flags, f"-I{core}", "-o", str(exe),
                        str(HERE / "native" / "check_parse_dump.cpp"),
                        *(str(core / f) for f in ("reader.cpp", "expand.cpp", "expand_forms.cpp",
                                                  "prelude.cpp", "kernels.cpp")),
                        "-lpthread"], check=True)
        packed = Path(tmp) / "texts"
        skipped = []
        with open(packed, "wb") as f:
            for k, t in enumerate(every):
                try:
                    b = t.encode("utf-8")
                except UnicodeEncodeError:
                    skipped.append(k)
                    continue
                f.write(b"%d\n" % len(b) + b)
        lines = subprocess.run([str(exe), str(packed)], check=True, capture_output=True
                               ).stdout.decode().splitlines()
    it = iter(lines)
    skip = set(skipped)
    rows = ["skipped (not UTF-8)" if k in skip else next(it) for k in range(len(every))]
    Path(out).write_text("\n".join(rows) + "\n")
    print(f"{len(rows)} dumps ({len(skipped)} skipped) -> {out}")


def python(texts_file, out):
    """Writes each text's Program attributes or exception, as ndvm._core.parse gives them in the
    running venv."""
    from ndvm._core import _core

    rows = []
    for t in json.loads(Path(texts_file).read_text()):
        try:
            p = _core.parse(t, "<check>")
        except Exception as e:  # noqa: BLE001 - every error a text may raise: its type and fields
            rows.append(repr((type(e).__name__, str(e), getattr(e, "line", None),
                              getattr(e, "col", None), getattr(e, "form", None),
                              getattr(e, "file", None))))
            continue
        rows.append(repr((p.source == t, p.name, p.free_names, sorted(p.free_positions.items()),
                          p.result_position, p._bounded)))
    Path(out).write_text("\n".join(rows) + "\n")
    print(f"{len(rows)} rows -> {out}")


def compare(a, b):
    """Prints how many lines of two dumps differ (and the first few); exits 1 when any do."""
    la, lb = Path(a).read_text().splitlines(), Path(b).read_text().splitlines()
    if len(la) != len(lb):
        print(f"{a}: {len(la)} lines, {b}: {len(lb)}")
        raise SystemExit(1)
    differ = [k for k in range(len(la)) if la[k] != lb[k]]
    for k in differ[:5]:
        print(f"line {k + 1}:\n  {la[k][:300]}\n  {lb[k][:300]}")
    print(f"{len(differ)} of {len(la)} lines differ")
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    commands = {"sources": sources, "texts": texts, "native": native, "python": python,
                "compare": compare}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        raise SystemExit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
