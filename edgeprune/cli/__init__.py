"""The `edgeprune` command: verbs that mirror the Python API. Status on stderr, results on stdout.

Every error is one line on stderr with the exit code of its kind (README), converted here in one place;
`--debug` re-raises it with its traceback instead.
"""

import sys
from collections.abc import Sequence
from typing import Any

import click

from edgeprune import __version__
from edgeprune.cli.common import epilog, one_line
from edgeprune.cli.config import project_defaults, split_config_flag
from edgeprune.cli.lazy import LazyGroup, LazyVerb
from edgeprune.errors import DiskFullError, EdgepruneError, UserInputError

DEBUG_FLAG = "--debug"
QUIET_FLAG, VERBOSE_FLAG = "--quiet", "--verbose"  # global: accepted before or after the verb, by every verb
EXIT_INTERNAL, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
DEBUG_HINT = f"(run with {DEBUG_FLAG} for the traceback)"
MAX_INTERNAL_MESSAGE = 500  # characters of an unexpected error's message; --debug shows all of it
EXIT_CODES = ("0 done (fit: every budget met); 1 internal error; 2 bad input; 3 budgets cannot be met; 4 an "
              "artifact failed verification or is not its runtime's; 5 device unreachable; 6 a device command timed "
              "out; 130 Ctrl-C")
ENVIRONMENT = ("EDGEPRUNE_DEVICE (fit's and bench's --device), EDGEPRUNE_RUNS (where fit's output folders go, "
               "default runs/), EDGEPRUNE_CACHE (teacher, scores and exports; default ~/.cache/edgeprune), "
               "EDGEPRUNE_DEVICES (more profile folders)")


# each verb is imported when it runs (or its own --help is asked for): `edgeprune --help`, `--version` and
# `devices list|show` load no torch
VERBS = {
    "fit": LazyVerb("edgeprune.cli.fit:fit_command",
                    "Prune, quantize, export and benchmark until the artifact meets every budget of the device."),
    "score": LazyVerb("edgeprune.cli.pruning:score_command",
                      "Score every attention head on the task's calibration data."),
    "prune": LazyVerb("edgeprune.cli.pruning:prune_command", "Remove heads for real and save the smaller model."),
    "distill": LazyVerb("edgeprune.cli.recovery:distill_command",
                        "Recover a pruned model by distillation from the dense teacher."),
    "quantize": LazyVerb("edgeprune.cli.artifacts:quantize_command",
                         "Quantize the task's model with a recipe; save it for PyTorch."),
    "export": LazyVerb("edgeprune.cli.artifacts:export_command", "Export the task's model for a runtime, verified "
                       "against PyTorch (summary beside it: OUT.json)."),
    "bench": LazyVerb("edgeprune.cli.artifacts:bench_command",
                      "Benchmark an artifact in a separate process on a device; save JSON and Markdown."),
    "generate": LazyVerb("edgeprune.cli.generation:generate_command",
                         "Continue a prompt with a KV-cached generator (a causal-lm fit's model.pte or "
                         "model.tflite), or benchmark it."),
    "cache": LazyVerb("edgeprune.cli.cache:cache_command", "The teachers, head scores, exports and wheels edgeprune "
                      "keeps in its cache folder ($EDGEPRUNE_CACHE), with their sizes."),
    "devices": LazyVerb("edgeprune.cli.devices:devices_group",
                        "Device profiles; whether a device answers; a board's environment."),
}


class EdgepruneCommand(LazyGroup):
    """The verbs' group. Its `main` takes the global flags out wherever they are, reads the project file into
    click's default_map, and turns every error into one line and its exit code."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> int:
        code = run_command(self, list(sys.argv[1:] if args is None else args), extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        """A verb, imported here the first time, with the libraries quieted (unless --verbose) before its imports,
        since some read their settings when imported, and after them, since some (torch) reset their loggers then.
        `--help` and `--version` import no verb and so none of them."""
        from edgeprune.progress import VERBOSITY, quiet_third_party

        quiet_third_party(VERBOSITY.verbose)
        command = super().get_command(ctx, cmd_name)
        quiet_third_party(VERBOSITY.verbose)
        return command


@click.group("edgeprune", cls=EdgepruneCommand, lazy_verbs=VERBS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
             epilog=epilog(["edgeprune fit --device host --max-mb 30", "edgeprune fit --help"],
                           EXIT_CODES) + f"\n\nEnvironment: {ENVIRONMENT}")
@click.version_option(__version__, "--version", prog_name="edgeprune")
@click.option("--config", metavar="PATH", expose_value=False,
              help="the project file (default: edgeprune.toml in the working folder): option defaults, flags win")
@click.option(QUIET_FLAG, is_flag=True, expose_value=False, help="no progress on stderr, only errors and warnings "
              "about the result (any verb, anywhere on the line)")
@click.option(VERBOSE_FLAG, is_flag=True, expose_value=False, help="also show what the libraries underneath log "
              "(transformers, torchao, ...), hidden by default (any verb, anywhere on the line)")
@click.option(DEBUG_FLAG, is_flag=True, expose_value=False, help="on an error, show its traceback instead of one line")
def cli() -> None:
    """Prune attention heads, quantize, export and benchmark transformers until they fit an edge device.

    Options may also come from edgeprune.toml in the working folder or --config PATH."""


def split_flags(argv: list[str]) -> tuple[bool, bool, bool, list[str]]:
    """Take `--debug`, `--quiet` and `--verbose` out of the arguments, wherever they are."""
    rest = [item for item in argv if item not in (DEBUG_FLAG, QUIET_FLAG, VERBOSE_FLAG)]
    return DEBUG_FLAG in argv, QUIET_FLAG in argv, VERBOSE_FLAG in argv, rest


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command line; the exit code (the `edgeprune` script exits with it)."""
    return cli.main(list(sys.argv[1:] if argv is None else argv), standalone_mode=False)


def parse_options(argv: Sequence[str]) -> dict[str, Any]:
    """The options a command line gives its verb (flags over EDGEPRUNE_* over the project file over the defaults),
    parsed but not run: `parse_options(["fit", "--max-mb", "30"])["max_mb"] == 30.0`."""
    config, rest = split_config_flag(split_flags(list(argv))[3])
    context = cli.make_context("edgeprune", [], default_map=project_defaults(cli, config), resilient_parsing=True)
    command: click.Command = cli
    while isinstance(command, click.Group):
        name, rest = rest[0], rest[1:]
        found = command.get_command(context, name)
        if found is None:
            raise UserInputError(f"no verb {name!r}; see edgeprune --help")
        command = found
        group = isinstance(command, click.Group)
        context = command.make_context(name, [] if group else list(rest), parent=context, resilient_parsing=group)
    return dict(context.params)


def run_command(group: click.Group, argv: list[str], extra: dict[str, Any]) -> int:
    from edgeprune.progress import VERBOSITY

    debug, quiet, verbose, argv = split_flags(argv)
    before = (VERBOSITY.quiet, VERBOSITY.verbose)
    VERBOSITY.quiet, VERBOSITY.verbose = quiet, verbose
    try:
        return invoke(group, argv, debug, extra)
    finally:  # --quiet is this call's: a Python caller's later Progress objects print as before
        VERBOSITY.quiet, VERBOSITY.verbose = before


def invoke(group: click.Group, argv: list[str], debug: bool, extra: dict[str, Any]) -> int:
    """Parse and run one verb; every error becomes one line and its exit code (re-raised with --debug)."""
    try:
        config, argv = split_config_flag(argv)
        extra = {"default_map": project_defaults(group, config), **extra}
        # not click's own main: it would turn a Ctrl-C inside a verb (and its Interrupted, which says where the
        # finished work is) into a bare Abort
        with group.make_context("edgeprune", argv, **extra) as ctx:
            code = group.invoke(ctx)
        return code if isinstance(code, int) else 0
    except click.exceptions.Exit as done:  # --help, --version
        return done.exit_code
    except click.exceptions.NoArgsIsHelpError as error:  # `edgeprune` or `edgeprune devices` alone: the help
        sys.stderr.write(error.ctx.get_help() + "\n")
        return EXIT_USAGE
    except click.UsageError as error:
        if debug:
            raise
        where = error.ctx.command_path if error.ctx is not None else "edgeprune"
        sys.stderr.write(f"edgeprune: error: {one_line(error.format_message())} (see {where} --help)\n")
        return EXIT_USAGE
    except click.ClickException as error:
        if debug:
            raise
        sys.stderr.write(f"edgeprune: error: {one_line(error.format_message())}\n")
        return error.exit_code
    except EdgepruneError as error:
        if debug:
            raise
        sys.stderr.write(f"edgeprune: error: {one_line(error) or type(error).__name__}\n")
        return error.exit_code
    except (KeyboardInterrupt, click.Abort):  # a prompt's Ctrl-C is an Abort
        if debug:
            raise
        sys.stderr.write("edgeprune: interrupted; nothing was written to the output folder\n")
        return EXIT_INTERRUPTED
    except OSError as error:  # the machine's, not the input's: a full disk, a file that went away, ...
        if debug:
            raise
        if DiskFullError.is_disk_full(error):  # a library's own write (torch.save, a copy): exit 2 like ours
            sys.stderr.write(f"edgeprune: error: {DiskFullError(error.filename)}\n")
            return DiskFullError.exit_code
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
