"""Device profiles: the bundled ones load; bad files fail with the file, the key and what is allowed."""

import pytest

from edgeprune.devices import known_devices, load_profile
from edgeprune.errors import UserInputError
from edgeprune.search.budget import Budget

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
        ('kind = "local"', 'kind = "pigeon"', "connection.kind = 'pigeon'; supported: adb, local, ssh"),
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


def test_bundled_board_profiles_state_hardware_budgets_power_and_connection():
    pi5 = load_profile("pi5")
    assert (pi5.arch, pi5.cores, pi5.max_mhz, pi5.peak_gflops) == ("aarch64", 4, 2400, 154.0)
    assert pi5.endpoint.kind == "ssh" and pi5.endpoint.port == 22 and not pi5.endpoint.trust_on_first_use
    assert pi5.power.sensor == "vcgencmd" and pi5.power.active_w > pi5.power.idle_w
    assert pi5.max_memory_mb and pi5.max_latency_ms and pi5.max_energy_mj and pi5.python == "python3"
    assert load_profile("pi4").runtime == "litert" and load_profile("pi4").power.sensor is None
    jetson = load_profile("jetson-orin-nano")
    assert jetson.mem_bandwidth_gbs == 68.0 and jetson.threads == 6 and jetson.power.sensor == "ina3221"
    phone = load_profile("android-arm64")
    assert phone.endpoint.kind == "adb" and phone.endpoint.serial and phone.python is None
    assert phone.runner == "native" and phone.native_binaries == {
        "litert": "/data/local/tmp/benchmark_model", "executorch": "/data/local/tmp/executor_runner"}
    assert load_profile("pi5").runner == "python" and load_profile("pi5").native_binaries == {}
    assert [c.cpus for c in phone.clusters] == [(0, 1, 2, 3), (4, 5, 6, 7), (8,)]
    board = load_profile("pi5-emulated")  # LiteRT through runner.py, ExecuTorch through the runner setup builds
    assert board.runner == "python" and board.native == ("executorch",) and board.install == ("litert", "executorch")
    assert board.native_binaries == {"executorch": "/home/pi/.edgeprune/env/bin/executor_runner"}
    assert (board.runner_for("litert"), board.runner_for("executorch")) == ("python", "native")
    assert board.searched_runtimes == ("litert",) and phone.runner_for("litert") == "native"
    assert load_profile("host").endpoint.kind == "local" and load_profile("host").power is None


SSH = GOOD.replace('kind = "local"', 'kind = "ssh"\nhost = "pi5.local"\nuser = "pi"')


def test_an_ssh_profile_with_everything_optional(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text(SSH.replace("max_mb = 25", "max_mb = 25\nmax_latency_ms = 40\nmax_energy_mj = 90.5\n"
                                               "min_decode_tps = 25\nmax_ttft_ms = 300")
                    .replace('threads = 4', 'threads = 4\npython = "/opt/venv/bin/python"')
                    + 'port = 2222\nkey = "~/.ssh/id_pi"\ntrust_on_first_use = true\nconnect_timeout_s = 3\n'
                    + "[power]\nidle_w = 2\nactive_w = 8.5\n"
                    + '[[hardware.clusters]]\nname = "big"\ncpus = [0, 1, 2, 3]\nmax_mhz = 2400\n')
    profile = load_profile(str(path))
    assert profile.endpoint.port == 2222 and profile.endpoint.key.endswith("/.ssh/id_pi")
    assert not profile.endpoint.key.startswith("~") and profile.endpoint.trust_on_first_use
    assert profile.max_latency_ms == 40.0 and profile.max_energy_mj == 90.5 and profile.max_memory_mb is None
    assert profile.min_decode_tps == 25 and Budget.for_device(profile).min_decode_tps == 25
    assert profile.max_ttft_ms == 300 and Budget.for_device(profile).max_ttft_ms == 300
    assert "decode at least 25 tokens/s, first token within 300 ms" in Budget.for_device(profile).describe()
    assert profile.python == "/opt/venv/bin/python" and profile.power.active_w == 8.5
    assert profile.clusters[0].cpus == (0, 1, 2, 3)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('user = "pi"', "", "kind = 'ssh' needs connection.user"),
        ('user = "pi"', 'user = "pi"\nserial = "abc"',
         "connection.serial does not apply to kind = 'ssh' (it is for 'adb')"),
        ('user = "pi"', 'user = "pi"\ntrust_on_first_use = "yes"',
         "connection.trust_on_first_use = 'yes' has the wrong type; expected true or false"),
        ('user = "pi"', 'user = "pi"\nport = 0', "connection.port = 0 must be positive"),
        ('user = "pi"', 'user = "pi"\nport = true', "connection.port = True has the wrong type"),
        ("threads = 4", "threads = 5", "runtime.threads = 5 exceeds hardware.cores = 4"),
        ('name = "executorch"', 'name = "onnx"', "runtime.name = 'onnx'; supported: executorch, litert"),
        ('arch = "aarch64"', 'arch = "arm64"', "hardware.arch = 'arm64'; supported: x86_64, aarch64"),
        ("max_mb = 25", "max_energy_mj = -1", "budgets.max_energy_mj = -1 must be positive"),
        ("max_mb = 25", "max_mb = 25\n[power]\nidle_w = 5\nactive_w = 3",
         "power.active_w = 3 is below power.idle_w = 5"),
        ("max_mb = 25", "max_mb = 25\n[power]\nidle_w = 1\nactive_w = 3\nsensor = \"ammeter\"",
         "power.sensor = 'ammeter'; supported: vcgencmd, ina3221"),
        ("max_mb = 25", "max_mb = 25\n[power]\nidle_w = 1", "missing power.active_w"),
        ("threads = 4", 'threads = 4\nrunner = "native"', "runtime.runner = 'native' needs runtime.benchmark_model"),
        ("threads = 4", 'threads = 4\nrunner = "jni"', "runtime.runner = 'jni'; supported: python, native"),
        ("ram_mb = 4096", 'ram_mb = 4096\n[[hardware.clusters]]\nname = "big"\ncpus = [0, 1]\nmax_mhz = 2000',
         "hardware.clusters cover 2 CPUs but hardware.cores = 4"),
        ("ram_mb = 4096", 'ram_mb = 4096\n[[hardware.clusters]]\nname = "big"\ncpus = [0, 9]\nmax_mhz = 2000',
         "hardware.clusters[0].cpus = [0, 9]; expected CPU numbers from 0 to 3"),
        ("ram_mb = 4096", 'ram_mb = 4096\n[[hardware.clusters]]\nname = "big"\ncpus = [0]\nghz = 2',
         "unknown key 'hardware.clusters[0].ghz'; allowed in [hardware.clusters[0]]: name, cpus, max_mhz"),
        ("threads = 4", 'threads = 4\nenv = "edgeprune/env"', "runtime.env = 'edgeprune/env' must be an absolute"),
        ("threads = 4", 'threads = 4\ninstall = ["litert", "onnx"]', "runtime.install = ['litert', 'onnx']; "
         "supported: executorch, litert"),
        ('description = "a test board"', 'description = "a test board"\nemulated = true',
         "emulated = True has the wrong type; expected a string"),
        ("threads = 4", 'threads = 4\nnative = ["executorch"]', "runtime.native = ['executorch'] needs the device "
         "path of each tool: runtime.executor_runner, or runtime.env, where `devices setup` builds"),
        ("threads = 4", 'threads = 4\nnative = ["litert"]\nenv = "/opt/e"', "runtime.native = ['litert'] needs "
         "the device path of each tool: runtime.benchmark_model"),
        ("threads = 4", 'threads = 4\nnative = ["onnx"]', "runtime.native = ['onnx']; supported: executorch, litert"),
    ],
)
def test_bad_connection_power_and_cluster_settings_are_named(tmp_path, old, new, message):
    path = tmp_path / "bad.toml"
    path.write_text(SSH.replace(old, new))
    with pytest.raises(UserInputError, match="bad.toml") as error:
        load_profile(str(path))
    assert message in str(error.value)


def test_an_adb_profile_needs_a_serial(tmp_path):
    path = tmp_path / "phone.toml"
    path.write_text(GOOD.replace('kind = "local"', 'kind = "adb"\nadb_port = 5099'))
    with pytest.raises(UserInputError, match="kind = 'adb' needs connection.serial"):
        load_profile(str(path))
    path.write_text(GOOD.replace('kind = "local"', 'kind = "adb"\nserial = "R5CX"\nadb_port = 5099'))
    assert load_profile(str(path)).endpoint.adb_port == 5099


def test_the_emulated_board_profile_names_its_emulation_environment_and_runtimes():
    board = load_profile("pi5-emulated")
    assert board.emulated == "QEMU user mode on x86_64" and board.arch == "aarch64" and board.runtime == "litert"
    assert board.env == "/home/pi/.edgeprune/env" and board.python == "/home/pi/.edgeprune/env/bin/python"
    assert board.install == ("litert", "executorch") and board.endpoint.port == 2222
    assert not board.endpoint.key.startswith("~")
    pi5 = load_profile("pi5")
    assert pi5.env is None and pi5.install == () and pi5.emulated is None
