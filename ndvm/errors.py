"""The exceptions ndvm raises for bad programs and inputs.

Every error carries ``kind``, ``message``, ``line``, ``col``, ``form`` (the offending form's text),
``file`` and, for runtime errors inside procedure calls, a short Scheme ``backtrace``.
"""

__all__ = [
    "SchemeError", "ReadError", "FormError", "UnboundError", "EvalError", "LimitError",
    "InternalError", "error_class", "utf8_text",
]


class SchemeError(ValueError):
    """Base class of every error in a program or its inputs."""

    kind = "SchemeError"

    def __init__(self, message, *, line=None, col=None, form=None, file=None, backtrace=None):
        self.message = message
        self.line = line
        self.col = col
        self.form = form
        self.file = file
        self.backtrace = backtrace
        super().__init__(message)

    @property
    def location(self):
        """``file:line:col`` (the parts that are known)."""
        parts = [self.file or "<program>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def __str__(self):
        text = f"{self.location}: {self.kind}: {self.message}"
        if self.form:
            text += f"\n  in: {self.form}"
        if self.backtrace:
            text += "\n  " + self.backtrace.replace("\n", "\n  ")
        return text

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.line, self.col, self.form, self.file,
                           self.backtrace))


def _rebuild(cls, message, line, col, form, file, backtrace):
    return cls(message, line=line, col=col, form=form, file=file, backtrace=backtrace)


class ReadError(SchemeError):
    """The program text cannot be read (brackets, bad ``#`` syntax, empty program)."""

    kind = "ReadError"


class FormError(SchemeError):
    """A special form is malformed (``(if)``, ``(let ((x)) x)``, ``recur`` outside a loop...)."""

    kind = "FormError"


class UnboundError(SchemeError):
    """A name is neither defined by the program nor bound by the caller."""

    kind = "UnboundError"


class EvalError(SchemeError):
    """A runtime error: wrong type, wrong arity, shape mismatch, bad index."""

    kind = "EvalError"


class LimitError(SchemeError):
    """A resource limit was reached (steps, recursion depth, memory)."""

    kind = "LimitError"


class InternalError(SchemeError):
    """An internal invariant failed: a bug in ndvm; please report it with the program."""

    kind = "InternalError"


_BY_CODE = {1: ReadError, 2: FormError, 3: UnboundError, 4: EvalError, 5: LimitError,
            6: InternalError}


def error_class(code):
    """The exception class for the core's numeric error kind."""
    return _BY_CODE.get(code, InternalError)


def utf8_text(path):
    """The text of the file ``path``, read as UTF-8 (a leading byte-order mark, which
    spreadsheets write, dropped); OSError when it cannot be read, ValueError naming the first
    byte that is not UTF-8 and its offset (a binary file, another encoding)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} "
                         f"({e.reason})") from None
