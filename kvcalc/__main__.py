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


def _sigint(signum: int, frame: object) -> None:
    """Python's own SIGINT handler, which raises KeyboardInterrupt, that also records the signal: a library may catch
    the interrupt and raise an error of its own (pydantic_core's SchemaError), which is then still a Ctrl-C."""
    from kvcalc.errors import SIGINT_SEEN  # loaded before this handler is installed: a lookup, not an import

    SIGINT_SEEN.append(True)
    raise KeyboardInterrupt


def main() -> None:
    """Console-script entry point: import the CLI under a Ctrl-C guard, then run it. Nothing is imported at module
    level (sys is loaded already): a Ctrl-C during an import there would be a traceback, here it is guarded."""
    sys.unraisablehook = _unraisable
    try:
        import signal

        import kvcalc.errors  # noqa: F401 (for _sigint; no imports of its own)

        try:
            signal.signal(signal.SIGINT, _sigint)
        except ValueError:  # not the main thread (an embedding host): keep the handler it has
            pass
        from kvcalc.cli import main as cli_main
    except (KeyboardInterrupt, Exception) as exc:
        from kvcalc.errors import interrupted

        if not interrupted(exc):  # an error of Python's own making, not a Ctrl-C: let it show
            raise
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    cli_main()


if __name__ == "__main__":
    main()
