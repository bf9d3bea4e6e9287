"""Verbs loaded when they run: click's lazy-loading pattern, so that `edgeprune --help`, `--version` and
`devices list` import no verb's heavy dependencies (torch, transformers, the runtimes, Ray).

https://click.palletsprojects.com/en/stable/complex/#lazily-loading-subcommands
"""

import importlib
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class LazyVerb:
    """A verb by where it is defined ("edgeprune.cli.fit:fit_command"), with the one line `--help` lists for it
    (tests/test_cli_startup.py checks that the line is the verb's own)."""

    target: str
    summary: str

    def load(self) -> click.Command:
        module, attribute = self.target.split(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


class LazyGroup(click.Group):
    """A group whose verbs are imported on first use; `--help` lists them from their summaries alone."""

    def __init__(self, *args: Any, lazy_verbs: dict[str, LazyVerb] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_verbs = dict(lazy_verbs or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_verbs})

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_verbs:
            self.add_command(self.lazy_verbs[cmd_name].load(), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing of the verbs, with the summary of each one not loaded yet (nothing is imported)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is not None and loaded.hidden:
                continue
            text = (loaded.get_short_help_str(limit) if loaded is not None else
                    click.utils.make_default_short_help(self.lazy_verbs[name].summary, limit))
            rows.append((name, text))
        with formatter.section("Commands"):
            formatter.write_dl(rows)
