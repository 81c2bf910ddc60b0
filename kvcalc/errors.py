"""The one family of errors a user can cause; the CLI prints them without a traceback."""


class KvcalcError(Exception):
    """A user mistake (bad file, bad spec, bad argument) with a message meant for the user."""


class SpecError(KvcalcError):
    """A model spec or config file that cannot be read or does not validate.

    The message is one or more `file: field.path: rule` lines.
    """


def printable(text: str) -> str:
    """`text` for a message or a spec's text: as it is, or, where it holds an invisible character (a control or format
    character, a zero-width space), with Python's escapes for it ('n_lay\\u200bers')."""
    return text if text.isprintable() else ascii(text)[1:-1]


def brief(value: object) -> str:
    """An argument of the wrong type as a message shows it: its type and repr, cut to 40 characters ("str 'no'",
    "numpy.bool np.True_": numpy 2 names its bool type 'bool', so the module says it is not Python's)."""
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__.split('.')[0]}.{kind.__name__}"
    text = repr(value)
    return f"{name} {text if len(text) <= 40 else text[:39] + '…'}"


class LookupFailure(KvcalcError):
    """A model name that matches no bundled spec and no file."""


SIGINT_SEEN: list[bool] = []  # appended by the command line's SIGINT handler (kvcalc.__main__), never by the library


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` is a Ctrl-C, or an error raised because of one. Python 3.11 wraps a KeyboardInterrupt that lands in
    a class's __set_name__ into RuntimeError ('Error calling __set_name__'), with the interrupt as its cause; pydantic_core
    turns one during a schema build into SchemaError, the interrupt only in its text. So once the command line's handler
    has seen a SIGINT, any error is the interrupt's; before that, only one with a KeyboardInterrupt in its chain."""
    if SIGINT_SEEN:
        return True
    seen = 0
    while exc is not None and seen < 32:  # a chain of causes, bounded
        if isinstance(exc, KeyboardInterrupt):
            return True
        follow = exc.__cause__ if exc.__cause__ is not None else None if exc.__suppress_context__ else exc.__context__
        exc, seen = follow, seen + 1  # type: ignore[assignment]
    return False
