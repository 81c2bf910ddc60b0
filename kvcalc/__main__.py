"""`python -m kvcalc` runs the command line."""

from kvcalc.cli import main

main()
