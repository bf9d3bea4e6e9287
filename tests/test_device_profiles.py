"""Device profiles: the bundled ones load; bad files fail with the file, the key and what is allowed."""

import pytest

from edgeprune.devices import known_devices, load_profile
from edgeprune.errors import UserInputError

GOOD = """
name = "board"
description = "a test board"
[hardware]
arch = "aarch64"
cores = 4
ram_mb = 4096
[runtime]
name = "executorch"
threads = 4
[budgets]
max_mb = 25
[connection]
kind = "local"
"""


def test_bundled_host_profile_loads():
    assert "host" in known_devices()
    host = load_profile("host")
    assert host.runtime == "executorch" and host.threads >= 1 and host.connection == "local"


def test_profile_by_path_and_from_the_user_folder(tmp_path, monkeypatch):
    (tmp_path / "board.toml").write_text(GOOD)
    assert load_profile(str(tmp_path / "board.toml")).max_mb == 25.0
    monkeypatch.setenv("EDGEPRUNE_DEVICES", str(tmp_path))
    assert "board" in known_devices() and load_profile("board").cores == 4


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("cores = 4", "cores = 4\nfrequency = 2", "unknown key 'hardware.frequency'"),
        ("threads = 4", 'threads = "four"', "runtime.threads = 'four' has the wrong type"),
        ("threads = 4", "threads = 0", "runtime.threads = 0 must be positive"),
        ('kind = "local"', 'kind = "pigeon"', "connection.kind = 'pigeon'; supported: local"),
        ("[budgets]", "[budget]", "unknown table"),
    ],
)
def test_bad_profiles_name_the_file_and_the_key(tmp_path, old, new, message):
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(UserInputError, match="bad.toml") as error:
        load_profile(str(path))
    assert message in str(error.value)


def test_unknown_device_lists_the_known_ones():
    with pytest.raises(UserInputError, match="known devices: .*host"):
        load_profile("toaster")
