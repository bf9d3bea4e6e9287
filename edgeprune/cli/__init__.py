"""The `edgeprune` command: verbs that mirror the Python API. Status on stderr, results on stdout."""

import argparse
import sys
from collections.abc import Sequence

from edgeprune.cli import artifacts, devices, fit, pruning, recovery
from edgeprune.cli.common import Parser
from edgeprune.errors import EdgepruneError, UserInputError


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="edgeprune", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for module in (fit, pruning, recovery, artifacts, devices):
        module.add_parsers(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except EdgepruneError as error:
        if isinstance(error, UserInputError) or error.exit_code != 1:
            sys.stderr.write(f"edgeprune: error: {error}\n")
            return error.exit_code
        raise
    except KeyboardInterrupt:
        sys.stderr.write("edgeprune: interrupted; nothing was written to the output folder\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
