"""`edgeprune devices list|show`: the device profiles edgeprune knows."""

import argparse
import json

from edgeprune.cli.common import EXIT_OK
from edgeprune.errors import UserInputError


def add_parsers(verbs: argparse._SubParsersAction) -> None:
    devices = verbs.add_parser("devices", help="device profiles")
    devices.add_argument("action", choices=["list", "show"])
    devices.add_argument("name", nargs="?")
    devices.set_defaults(run=run_devices)


def run_devices(args: argparse.Namespace) -> int:
    from edgeprune.devices import known_devices, load_profile
    from edgeprune.serialization import to_jsonable

    if args.action == "list":
        for name in known_devices():
            profile = load_profile(name)
            print(f"{name}\t{profile.runtime}\t{profile.connection}\t{profile.description}")
        return EXIT_OK
    if not args.name:
        raise UserInputError("devices show needs a device name, e.g. edgeprune devices show host")
    print(json.dumps(to_jsonable(load_profile(args.name)), indent=2))
    return EXIT_OK
