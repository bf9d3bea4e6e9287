"""Transports: push files to a device, run commands there, fetch results. One module per connection kind, each
registered on `TRANSPORTS` by its `@register(kind)` (adding a kind is one module here plus its test)."""

from edgeprune.devices.profile import Endpoint
from edgeprune.devices.transports import adb, local, ssh
from edgeprune.devices.transports.base import TRANSPORTS, CommandResult, Transport, shell_command


def open_transport(endpoint: Endpoint, python: str | None = None) -> Transport:
    """The transport for `endpoint.kind`, not yet connected (it connects on first use).

    `python` runs the benchmark runner there; None means `python3` on a device, this interpreter locally.
    """
    return TRANSPORTS.get(endpoint.kind)(endpoint, python)


__all__ = ["TRANSPORTS", "CommandResult", "Transport", "adb", "local", "open_transport", "shell_command", "ssh"]
