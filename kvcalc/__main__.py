"""`python -m kvcalc` and the `kvcalc` console script: start the command line, with Ctrl-C guarded from the start.

The CLI's import (typer, rich, pydantic) takes a tenth of a second; a Ctrl-C then must print `interrupted` and
exit 130 like one during a command, not a traceback."""

import sys


def main() -> None:
    """Console-script entry point: import the CLI under a Ctrl-C guard, then run it."""
    try:
        from kvcalc.cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
    cli_main()


if __name__ == "__main__":
    main()
