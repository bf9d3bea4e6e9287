"""`edgeprune devices list|show|check|setup`: the device profiles edgeprune knows, whether a device answers,
and provisioning a board's environment with the profile's runtimes."""

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from edgeprune.cli.common import EXIT_OK, EXIT_USAGE, one_line
from edgeprune.errors import UserInputError

EXIT_CHECK_FAILED = 1


def add_parsers(verbs: argparse._SubParsersAction) -> None:
    devices = verbs.add_parser("devices", help="device profiles; check that a device answers",
                               epilog="list: exit 2 when a profile cannot be read (each such file is named on "
                               "stderr; the others are listed). setup: exit 2 when the board does not qualify "
                               "(arch, python, free disk or RAM), 5 when it cannot be reached")
    devices.add_argument("action", choices=["list", "show", "check", "setup"])
    devices.add_argument("name", nargs="?")
    add_connection_arguments(devices)
    devices.add_argument("--offline", action="store_true", help="setup: install from wheels this host downloads "
                         "for the board and copies over, for boards without internet")
    devices.add_argument("--json", action="store_true", help="setup: print what it found and did as JSON")
    devices.set_defaults(run=run_devices)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ssh", metavar="USER@HOST[:PORT]", help="reach the device over ssh here instead of "
                        "the profile's connection")
    parser.add_argument("--adb", metavar="SERIAL", help="reach the device over adb here (a serial from `adb devices`) "
                        "instead of the profile's connection")
    parser.add_argument("--adb-port", type=int, metavar="PORT", help="the adb server's port (default: the "
                        "profile's, else 5037)")
    parser.add_argument("--identity", type=Path, help="ssh private key (default: your ssh config and agent)")
    parser.add_argument("--trust-on-first-use", action="store_true",
                        help="accept and record an unknown ssh host key (a changed key is still refused)")


def endpoint_from(profile, args: argparse.Namespace):  # noqa: ANN001, ANN201 - DeviceProfile -> Endpoint
    """The profile's connection with the command line's --ssh, --adb, --identity and --trust-on-first-use applied."""
    from edgeprune.devices.profile import check_adb_serial, check_ssh_target
    from edgeprune.devices.transports.ssh import parse_target

    endpoint = profile.endpoint
    if args.ssh and args.adb:
        raise UserInputError("pass --ssh or --adb, not both: a device has one connection")
    if args.adb_port is not None and not 0 < args.adb_port < 65536:
        raise UserInputError(f"--adb-port {args.adb_port}: expected a TCP port from 1 to 65535")
    if args.adb is not None:
        check_adb_serial(args.adb, "--adb")
    if args.adb:
        keep = endpoint if endpoint.kind == "adb" else type(endpoint)()
        endpoint = dataclasses.replace(keep, kind="adb", serial=args.adb)
    if args.adb_port is not None:
        if endpoint.kind != "adb":
            raise UserInputError(f"--adb-port is for adb; device {profile.name} connects over {endpoint.kind} "
                                 "(pass --adb SERIAL)")
        endpoint = dataclasses.replace(endpoint, adb_port=args.adb_port)
    if args.ssh is not None:
        user, host, port = parse_target(args.ssh)
        check_ssh_target(user, host, f"--ssh {args.ssh!r}")
        keep = endpoint if endpoint.kind == "ssh" else type(endpoint)()
        endpoint = dataclasses.replace(keep, kind="ssh", user=user, host=host, port=port)
    elif (args.identity or args.trust_on_first_use) and endpoint.kind != "ssh":
        raise UserInputError(f"--identity and --trust-on-first-use are for ssh; device {profile.name} connects "
                             f"over {endpoint.kind} (pass --ssh USER@HOST)")
    if args.identity:
        if not args.identity.expanduser().is_file():
            raise UserInputError(f"--identity {args.identity} does not exist")
        endpoint = dataclasses.replace(endpoint, key=str(args.identity.expanduser()))
    if args.trust_on_first_use:
        endpoint = dataclasses.replace(endpoint, trust_on_first_use=True)
    return endpoint


def run_devices(args: argparse.Namespace) -> int:
    from edgeprune.devices import known_devices, load_profile, probe_device
    from edgeprune.serialization import to_jsonable

    if args.action == "list":
        broken = 0
        for name in sorted(known_devices(), key=lambda name: (name != "host", name)):  # this machine first
            try:
                profile = load_profile(name)
            except UserInputError as error:  # one bad file hides none of the others
                sys.stderr.write(f"edgeprune: error: {one_line(error)}\n")
                broken += 1
                continue
            print(f"{name}\t{profile.runtime}\t{profile.connection}\t{one_line(profile.description)}")
        return EXIT_USAGE if broken else EXIT_OK
    if not args.name:
        raise UserInputError(f"devices {args.action} needs a device name, e.g. edgeprune devices {args.action} host")
    profile = load_profile(args.name)
    if args.action == "show":
        print(json.dumps(to_jsonable(profile), indent=2))
        return EXIT_OK
    if args.action == "setup":
        from edgeprune.devices.setup import describe, setup_device

        done = setup_device(profile, endpoint_from(profile, args), offline=args.offline)
        print(json.dumps(done.to_dict(), indent=2) if args.json else describe(done))
        return EXIT_OK
    if args.offline:
        raise UserInputError("--offline is for devices setup")
    report = probe_device(profile, endpoint_from(profile, args))
    for problem in report.problems:
        sys.stderr.write(f"edgeprune: {profile.name}: {problem}\n")
    print(json.dumps(report.to_dict(), indent=2))
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED
