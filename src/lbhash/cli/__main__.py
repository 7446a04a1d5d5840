"""`python -m lbhash.cli`: the same as the `lbhash` command (multi-process launchers re-run it)."""

from lbhash.cli import main

main()
