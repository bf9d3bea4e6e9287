"""The `edgeprune` command: verbs that mirror the Python API. Status on stderr, results on stdout."""

import argparse
import sys
from collections.abc import Sequence

from edgeprune.cli import artifacts, devices, fit, pruning, recovery
from edgeprune.cli.common import Parser
from edgeprune.errors import EdgepruneError, UserInputError


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="edgeprune", description=__doc__,
                    epilog="Options may also come from edgeprune.toml in the working folder or --config PATH.")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for module in (fit, pruning, recovery, artifacts, devices):
        module.add_parsers(verbs)
    return parser


def parse_with_project_file(argv: list[str]) -> argparse.Namespace:
    """Flags over the project file's values over the built-in defaults."""
    from edgeprune.cli.config import defaults_for, read_project_file, split_config_flag, unknown_top_level_keys

    explicit, argv = split_config_flag(argv)
    parser = build_parser()
    path, data = read_project_file(explicit)
    if path is not None:
        verbs_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parsers = dict(verbs_action.choices)
        unknown_top_level_keys(path, data, parsers)
        for verb, subparser in parsers.items():
            subparser.set_defaults(**defaults_for(verb, subparser, list(parsers), path, data))
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_with_project_file(list(sys.argv[1:] if argv is None else argv))
    except UserInputError as error:
        sys.stderr.write(f"edgeprune: error: {error}\n")
        return error.exit_code
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
