"""Transports: push files to a device, run commands there, fetch results. One module per connection kind."""

from edgeprune.devices.transports import adb, local, ssh
from edgeprune.devices.transports.base import TRANSPORTS, CommandResult, Transport, open_transport, shell_command

__all__ = ["TRANSPORTS", "CommandResult", "Transport", "adb", "local", "open_transport", "shell_command", "ssh"]
