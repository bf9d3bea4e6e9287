"""Transports: push files to a device, run commands there, fetch results. One module per connection kind
(local.py, ssh.py, adb.py), each registering its transport on `TRANSPORTS` with `@register(kind)` when the registry
is first read (the `edgeprune.transports` entry points): adding a kind is one module plus its test."""

from typing import Any

from edgeprune.devices.transports.base import (
    TRANSPORTS,
    CommandResult,
    Endpoint,
    Flag,
    Transport,
    endpoint_from_settings,
    endpoint_schema,
    shell_command,
)
from edgeprune.errors import UserInputError


def open_transport(endpoint: Endpoint, python: str | None = None) -> Transport:
    """The transport for `endpoint.kind`, not yet connected (it connects on first use).

    `python` runs the benchmark runner there; None means `python3` on a device, this interpreter locally.
    """
    return TRANSPORTS.get(endpoint.kind)(endpoint, python)


def connection_flags() -> list[tuple[str, Flag]]:
    """Every transport's command-line flags, with the kind each belongs to (the CLI's connection options)."""
    return [(kind, flag) for kind in TRANSPORTS for flag in TRANSPORTS.get(kind).flags]


def given_connection_flags(values: dict[str, Any]) -> list[str]:
    """The connection flags a command line gave (their options), from click's keyword values."""
    return [flag.option for _, flag in connection_flags() if values.get(flag.name) not in (None, False)]


def endpoint_with_flags(endpoint: Endpoint, values: dict[str, Any], device: str) -> Endpoint:
    """A profile's connection with the command line's connection flags applied (`--ssh USER@HOST`, `--adb
    SERIAL`, `--identity`, ...): a selecting flag switches the device to that kind, the others adjust an endpoint of
    their own kind and are refused, in one line, for a device that connects another way."""
    flags = connection_flags()
    selecting = [(kind, flag) for kind, flag in flags if flag.selects and values.get(flag.name) is not None]
    if len(selecting) > 1:
        raise UserInputError(f"pass {' or '.join(flag.option for _, flag in selecting)}, not both: a device has one "
                             "connection")
    kinds = dict.fromkeys(kind for kind, flag in flags if values.get(flag.name) not in (None, False))
    target = selecting[0][0] if selecting else endpoint.kind
    for kind in kinds:
        if kind != target:
            own = [flag for k, flag in flags if k == kind]
            adjusting = [flag.option for flag in own if not flag.selects]
            chooser = next(flag for flag in own if flag.selects)
            raise UserInputError(f"{' and '.join(adjusting)} {'is' if len(adjusting) == 1 else 'are'} for {kind}; "
                                 f"device {device} connects over {target} (pass {chooser.option} {chooser.metavar})")
    if not kinds:
        return endpoint
    transport = TRANSPORTS.get(target)
    return transport.with_flags(endpoint if endpoint.kind == target else None,
                                {flag.name: values.get(flag.name) for flag in transport.flags})


__all__ = ["TRANSPORTS", "CommandResult", "Endpoint", "Flag", "Transport", "connection_flags", "endpoint_from_settings",
           "endpoint_schema", "endpoint_with_flags", "given_connection_flags", "open_transport", "shell_command"]
