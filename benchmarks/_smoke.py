"""Every benchmark's `--smoke`: the script's every line once at tiny sizes, in seconds, so that a
change cannot break a benchmark silently (tests/test_benchmarks_smoke.py runs each one so and reads
its output; its figures mean nothing and nothing is timed there).

`parse_args(parser, **tiny)` adds `--smoke` and, when it is given, parses again with `tiny` as the
defaults (an option given on the command line still wins). `skip(reason)` ends a smoke run that
lacks an optional piece (a package, a server, the shared data) with one line saying which.
"""

from __future__ import annotations

import argparse
import sys

SKIPPED = "smoke run skipped:"


def parse_args(parser: argparse.ArgumentParser, **tiny) -> argparse.Namespace:
    parser.add_argument("--smoke", action="store_true",
                        help="every line once at tiny sizes, in seconds (the tests' smoke run)")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(**tiny)
        args = parser.parse_args()
    return args


def skip(reason: str) -> None:
    print(f"{SKIPPED} {reason}", flush=True)
    sys.exit(0)
