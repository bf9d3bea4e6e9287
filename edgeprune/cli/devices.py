"""`edgeprune devices list|show|check|setup`: the device profiles edgeprune knows, whether a device answers,
and provisioning a board's environment with the profile's runtimes."""

import dataclasses
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import click

from edgeprune.cli.common import EXIT_OK, EXIT_USAGE, as_args, epilog, one_line, options, output_options
from edgeprune.errors import UserInputError

EXIT_CHECK_FAILED = 1


connection_options = options(
    click.option("--ssh", metavar="USER@HOST[:PORT]", help="reach the device over ssh here instead of the profile's "
                 "connection"),
    click.option("--adb", metavar="SERIAL", help="reach the device over adb here (a serial from `adb devices`) "
                 "instead of the profile's connection"),
    click.option("--adb-port", type=int, metavar="PORT", help="the adb server's port (default: the profile's, "
                 "else 5037)"),
    click.option("--identity", type=click.Path(path_type=Path), help="ssh private key (default: your ssh config and "
                 "agent)"),
    click.option("--trust-on-first-use", is_flag=True,
                 help="accept and record an unknown ssh host key (a changed key is still refused)"),
)


@click.group("devices", epilog=epilog(["edgeprune devices list", "edgeprune devices show pi5",
                                       "edgeprune devices check pi5 --ssh pi@raspberrypi.local",
                                       "edgeprune devices setup pi5 --ssh pi@pi5.local --offline"],
                                      "see each sub-command's --help"))
def devices_group() -> None:
    """Device profiles; whether a device answers; a board's environment.

    Profiles are looked up in $EDGEPRUNE_DEVICES (folders separated by the path separator), the user's folder,
    then the bundled ones."""


@devices_group.command("list", epilog=epilog(["edgeprune devices list --json"], "0 listed; 2 a profile cannot be "
                                             "read (each such file is named on stderr; the others are listed)"))
@click.option("--json", "as_json", is_flag=True, help="print the profiles as a JSON list")
@output_options
def devices_list(as_json: bool) -> int:
    """The device profiles edgeprune knows, this machine first."""
    return list_devices(as_json)


@devices_group.command("show", epilog=epilog(["edgeprune devices show pi5"], "0 shown; 2 no such profile"))
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="the same JSON (the profile is always printed as JSON)")
@output_options
def devices_show(name: str, as_json: bool) -> int:
    """One profile, as JSON: budgets, runtime, threads, connection."""
    from edgeprune.devices import load_profile
    from edgeprune.serialization import to_jsonable

    print(json.dumps(to_jsonable(load_profile(name)), indent=2))
    return EXIT_OK


@devices_group.command("check", epilog=epilog(["edgeprune devices check host",
                                               "edgeprune devices check pi5 --ssh pi@raspberrypi.local"],
                                              "0 the device answers and has the profile's runtime; 1 it answers "
                                              "with problems (named on stderr); 2 bad input; 5 unreachable"))
@click.argument("name")
@connection_options
@click.option("--json", "as_json", is_flag=True, help="the same JSON (the report is always printed as JSON)")
@output_options
def devices_check(name: str, as_json: bool, **connection: object) -> int:
    """Connect to the device and report its arch, cores, RAM and runtimes."""
    from edgeprune.devices import load_profile, probe_device

    profile = load_profile(name)
    report = probe_device(profile, endpoint_from(profile, as_args(connection)))
    for problem in report.problems:
        sys.stderr.write(f"edgeprune: {profile.name}: {problem}\n")
    print(json.dumps(report.to_dict(), indent=2))
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


@devices_group.command("setup", epilog=epilog(["edgeprune devices setup pi5 --ssh pi@pi5.local",
                                               "edgeprune devices setup pi5-emulated --offline"],
                                              "0 ready (a second run checks and does nothing); 2 the board does not "
                                              "qualify (arch, python, free disk or RAM); 5 unreachable"))
@click.argument("name")
@connection_options
@click.option("--offline", is_flag=True, help="install from wheels this host downloads for the board and copies "
              "over, for boards without internet")
@click.option("--json", "as_json", is_flag=True, help="print what it found and did as JSON")
@output_options
def devices_setup(name: str, offline: bool, as_json: bool, **connection: object) -> int:
    """Create a virtual environment on the board with the runtimes its profile lists, at this host's versions."""
    from edgeprune.devices import load_profile
    from edgeprune.devices.setup import describe, setup_device

    profile = load_profile(name)
    done = setup_device(profile, endpoint_from(profile, as_args(connection)), offline=offline)
    print(json.dumps(done.to_dict(), indent=2) if as_json else describe(done))
    return EXIT_OK


def endpoint_from(profile, args: SimpleNamespace):  # noqa: ANN001, ANN201 - DeviceProfile -> Endpoint
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


def list_devices(as_json: bool) -> int:
    from edgeprune.devices import known_devices, load_profile
    from edgeprune.serialization import to_jsonable

    broken, listed = 0, []
    for name in sorted(known_devices(), key=lambda name: (name != "host", name)):  # this machine first
        try:
            profile = load_profile(name)
        except UserInputError as error:  # one bad file hides none of the others
            sys.stderr.write(f"edgeprune: error: {one_line(error)}\n")
            broken += 1
            continue
        listed.append(profile)
        if not as_json:
            print(f"{name}\t{profile.runtime}\t{profile.connection}\t{one_line(profile.description)}")
    if as_json:
        print(json.dumps([to_jsonable(profile) for profile in listed], indent=2))
    return EXIT_USAGE if broken else EXIT_OK
