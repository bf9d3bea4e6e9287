"""Where the device fixtures live (tests/fixtures/devices; see its README for their provenance)."""

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "devices"


def command_output(device: str, name: str) -> str:
    return (FIXTURES / device / "commands" / name).read_text()
