"""`edgeprune devices list|show|check|setup`: the device profiles edgeprune knows, whether a device answers,
and provisioning a board's environment with the profile's runtimes."""

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import click

from edgeprune.cli.common import EXIT_OK, EXIT_USAGE, as_args, epilog, one_line, options, output_options
from edgeprune.devices.profile import DeviceProfile
from edgeprune.devices.transports import Endpoint, Flag, connection_flags, endpoint_with_flags
from edgeprune.errors import UserInputError

EXIT_CHECK_FAILED = 1


def connection_option(flag: Flag) -> Callable:
    """The click option of a transport's connection flag (edgeprune.devices.transports.Flag)."""
    if flag.type is bool:
        return click.option(flag.option, is_flag=True, help=flag.help)
    kind = click.Path(path_type=Path) if flag.type is Path else flag.type
    return click.option(flag.option, type=kind, metavar=flag.metavar, help=flag.help)


# every registered transport's flags (--ssh, --identity, --adb, ...): each transport declares its own
connection_options = options(*(connection_option(flag) for _, flag in connection_flags()))


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


def endpoint_from(profile: DeviceProfile, args: SimpleNamespace) -> Endpoint:
    """The profile's connection with the command line's connection flags (--ssh, --adb, --identity, ...) applied."""
    return endpoint_with_flags(profile.endpoint, vars(args), profile.name)


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
