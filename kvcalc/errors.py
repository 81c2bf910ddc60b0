"""The one family of errors a user can cause; the CLI prints them without a traceback."""


class KvcalcError(Exception):
    """A user mistake (bad file, bad spec, bad argument) with a message meant for the user."""


class SpecError(KvcalcError):
    """A model spec or config file that cannot be read or does not validate.

    The message is one or more `file: field.path: rule` lines.
    """


class LookupFailure(KvcalcError):
    """A model name that matches no bundled spec and no file."""
