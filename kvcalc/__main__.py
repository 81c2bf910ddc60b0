"""`python -m kvcalc` and the `kvcalc` console script: start the command line, with Ctrl-C guarded from the start.

The CLI's import (typer, rich, pydantic) takes a tenth of a second; a Ctrl-C then must print `interrupted` and
exit 130 like one during a command, not a traceback."""

import sys


def _unraisable(hook) -> None:
    """A Ctrl-C that Python cannot raise, because it landed in a callback Python runs for itself (importlib's
    module-lock cleanup, a finaliser): Python would print 'Exception ignored ... KeyboardInterrupt' and carry on,
    so end the process as every other Ctrl-C does. Anything else goes to Python's own hook."""
    if isinstance(hook.exc_value, KeyboardInterrupt):
        import os

        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        os._exit(130)  # no clean-up to run: nothing is written or held that a Ctrl-C elsewhere would not leave
    sys.__unraisablehook__(hook)


def main() -> None:
    """Console-script entry point: import the CLI under a Ctrl-C guard, then run it."""
    sys.unraisablehook = _unraisable
    try:
        from kvcalc.cli import main as cli_main
    except (KeyboardInterrupt, RuntimeError) as exc:
        from kvcalc.errors import interrupted

        if not interrupted(exc):  # a RuntimeError of Python's own making, not a Ctrl-C: let it show
            raise
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    cli_main()


if __name__ == "__main__":
    main()
