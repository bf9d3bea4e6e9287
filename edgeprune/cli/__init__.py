"""The `edgeprune` command: verbs that mirror the Python API. Status on stderr, results on stdout.

Every error is one line on stderr with the exit code of its kind (README); `--debug` re-raises it with its
traceback instead.
"""

import argparse
import sys
from collections.abc import Sequence

from edgeprune.cli import artifacts, devices, fit, pruning, recovery
from edgeprune.cli.common import Parser, non_finite_flag, one_line
from edgeprune.errors import EdgepruneError, UserInputError

DEBUG_FLAG = "--debug"
QUIET_FLAG, VERBOSE_FLAG = "--quiet", "--verbose"  # global: accepted before or after the verb, by every verb
EXIT_INTERNAL, EXIT_INTERRUPTED = 1, 130
DEBUG_HINT = f"(run with {DEBUG_FLAG} for the traceback)"
MAX_INTERNAL_MESSAGE = 500  # characters of an unexpected error's message; --debug shows all of it


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="edgeprune", description=__doc__,
                    epilog="Options may also come from edgeprune.toml in the working folder or --config PATH.")
    parser.add_argument(DEBUG_FLAG, action="store_true", help="on an error, show its traceback instead of one line")
    parser.add_argument(QUIET_FLAG, action="store_true", help="no progress on stderr, only errors and warnings about "
                        "the result (any verb, anywhere on the line)")
    parser.add_argument(VERBOSE_FLAG, action="store_true", help="also show what the libraries underneath log "
                        "(transformers, torchao, ...), hidden by default (any verb, anywhere on the line)")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=Parser)
    for module in (fit, pruning, recovery, artifacts, devices):
        module.add_parsers(verbs)
    return parser


def verb_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parse_with_project_file(argv: list[str]) -> argparse.Namespace:
    """Flags over the project file's values over the built-in defaults; every number is finite."""
    from edgeprune.cli.config import defaults_for, read_project_file, split_config_flag, unknown_top_level_keys

    explicit, argv = split_config_flag(argv)
    parser = build_parser()
    parsers = verb_parsers(parser)
    path, data = read_project_file(explicit)
    if path is not None:
        unknown_top_level_keys(path, data, parsers)
        for verb, subparser in parsers.items():
            subparser.set_defaults(**defaults_for(verb, subparser, list(parsers), path, data))
    args = parser.parse_args(argv)
    flag = non_finite_flag(args, parsers.get(getattr(args, "verb", ""), parser))
    if flag is not None:
        raise UserInputError(f"{flag}: every number must be finite")
    return args


def split_debug_flag(argv: list[str]) -> tuple[bool, list[str]]:
    """Take `--debug` out of the arguments, wherever it is."""
    rest = [item for item in argv if item != DEBUG_FLAG]
    return len(rest) != len(argv), rest


def split_output_flags(argv: list[str]) -> tuple[bool, bool, list[str]]:
    """Take `--quiet` and `--verbose` out of the arguments, wherever they are."""
    rest = [item for item in argv if item not in (QUIET_FLAG, VERBOSE_FLAG)]
    return QUIET_FLAG in argv, VERBOSE_FLAG in argv, rest


def main(argv: Sequence[str] | None = None) -> int:
    from edgeprune.progress import VERBOSITY, quiet_third_party

    debug, arguments = split_debug_flag(list(sys.argv[1:] if argv is None else argv))
    before = (VERBOSITY.quiet, VERBOSITY.verbose)
    VERBOSITY.quiet, VERBOSITY.verbose, arguments = split_output_flags(arguments)
    quiet_third_party(VERBOSITY.verbose)
    try:
        return run_verb(arguments, debug, VERBOSITY.quiet)
    finally:  # --quiet is this call's: a Python caller's later Progress objects print as before
        VERBOSITY.quiet, VERBOSITY.verbose = before


def run_verb(arguments: list[str], debug: bool, quiet: bool) -> int:
    """Parse and run one verb; every error becomes one line and its exit code (re-raised with --debug)."""
    try:
        args = parse_with_project_file(arguments)
        if quiet and hasattr(args, "quiet"):  # the verbs that read their own --quiet
            args.quiet = True
        return args.run(args)
    except EdgepruneError as error:
        if debug:
            raise
        sys.stderr.write(f"edgeprune: error: {one_line(error) or type(error).__name__}\n")
        return error.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        sys.stderr.write("edgeprune: interrupted; nothing was written to the output folder\n")
        return EXIT_INTERRUPTED
    except OSError as error:  # the machine's, not the input's: a full disk, a file that went away, ...
        if debug:
            raise
        sys.stderr.write(f"edgeprune: error: {one_line(error) or type(error).__name__} {DEBUG_HINT}\n")
        return EXIT_INTERNAL
    except Exception as error:  # a bug: one line that says so, the traceback with --debug
        if debug:
            raise
        message = one_line(error)
        message = message if len(message) <= MAX_INTERNAL_MESSAGE else message[:MAX_INTERNAL_MESSAGE] + "..."
        sys.stderr.write(f"edgeprune: internal error: {type(error).__name__}{': ' + message if message else ''} "
                         f"{DEBUG_HINT}\n")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
