"""A lab on a real Ray cluster: a head and a second node (one CPU each, on 127.0.0.1), two real sshd "boards" of
one profile on loopback ports. A fit whose benchmarks go through the pool equals the fit through the profile's own
connection; a board killed mid-fit is marked down and the fit completes on the other; a board pinned to a node by
its resource runs there; the boards file is checked like a profile."""

import os
import re
import subprocess
import sys

import pytest

# Ray binds every server of a cluster to the loopback address when multi-node clusters are "off" (its default on
# macOS and Windows); ray.cluster_utils still starts several nodes, each its own raylet and object store, on this
# machine. Set before ray is imported (it reads this once); nothing then listens beyond 127.0.0.1.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

from edgeprune.cli import main  # noqa: E402
from edgeprune.cluster import BoardPool, load_boards  # noqa: E402
from edgeprune.cluster.ahead import nodes_elsewhere, start_builds_ahead  # noqa: E402
from edgeprune.cluster.connect import check_speaks_grpc  # noqa: E402
from edgeprune.errors import UserInputError  # noqa: E402
from edgeprune.progress import Progress  # noqa: E402
from edgeprune.search import Budget  # noqa: E402
from edgeprune.search.benchmarkers import WorkElsewhere  # noqa: E402
from edgeprune.search.fit import FitOptions, fit  # noqa: E402
from edgeprune.tasks import bundled_task  # noqa: E402
from edgeprune.tasks.base import Task  # noqa: E402
from tests.sshd import start_sshd  # noqa: E402
from tests.test_fit_integration import FAST, HEADS_ONLY, NO_RECOVERY  # noqa: E402

PINNED = "board:lab-pinned"

pytestmark = pytest.mark.usefixtures("one_ray_cluster_at_a_time")  # tests/conftest.py


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="Ray is the cluster extra; make install brings it")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    second = cluster.add_node(num_cpus=1, resources={PINNED: 1})
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster, second
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def two_boards(tmp_path):
    boards = [start_sshd(tmp_path / f"sshd-{name}") for name in ("a", "b")]
    yield boards
    for board in boards:
        board.stop()


def lab_profile(folder, server, name="lab-pi"):
    return server.write_profile(folder, name)


def boards_file(folder, profile, servers, pinned=None):
    text = ""
    for name, server in servers.items():
        pin = f'node_resource = "{PINNED}"\n' if name == pinned else ""
        text += f'[[board]]\nname = "{name}"\nprofile = "{profile}"\n{pin}[board.connection]\n'
        text += server.connection_toml() + "\n"
    path = folder / "boards.toml"
    path.write_text(text)
    return path


class Recorder(Progress):
    """Keeps notes and warnings; calls `hook` with each note."""

    def __init__(self, hook=None) -> None:
        super().__init__(enabled=False)
        self.notes: list[str] = []
        self.hook = hook

    def note(self, message: str) -> None:
        self.notes.append(message)
        if self.hook:
            self.hook(message)

    def warn(self, message: str) -> None:
        self.notes.append(message)


OPTIONS = FitOptions(recipes=("int8",), scoring_examples=32, ffn_fractions=(0.0,), layer_removals=(0,),
                     trim_vocabulary=False, bench_runs=20, bench_warmup=1, recover_steps=0)


def small_task(model_dir):
    return bundled_task("minilm-bbc", model_path=model_dir, max_length=32, progress=Progress(enabled=False))


def test_a_fit_through_the_pool_on_the_cluster_equals_the_fit_through_the_profile(
        ray_cluster, two_boards, small_bert_dir, tmp_path, capsys):
    first = two_boards[0]
    profile = lab_profile(tmp_path, first)
    boards = boards_file(tmp_path, profile, {"lab-a": first})
    out = tmp_path / "pooled"
    code = main(["fit", *NO_RECOVERY, "--model", str(small_bert_dir), "--device", str(profile), "--boards", str(boards),
                 "--ray", ray_cluster[0].address, "--max-mb", "0.5", "--recipe", "int8", "--out", str(out), "--json",
                 *HEADS_ONLY, *FAST])
    printed = capsys.readouterr()
    assert code in (0, 3), printed.err
    import json

    pooled = json.loads(printed.out)
    assert pooled["fitted"]["benchmark"]["board"] == "lab-a" and pooled["fitted"]["benchmark"]["measured"]
    direct = fit(small_task(small_bert_dir), device=str(profile), budget=Budget(max_mb=0.5), out=tmp_path / "direct",
                 options=FitOptions(recipes=("int8",), scoring_examples=32, ffn_fractions=(0.0,),
                                    layer_removals=(0,), trim_vocabulary=False, runtime="executorch",
                                    recover_steps=0))
    assert direct.fitted.benchmark.board == ""  # through the profile's own connection
    # the timing-independent parts are the same: status, choice, every candidate built and its quality
    assert pooled["status"] == direct.status
    assert (pooled["fitted"]["recipe"]["name"], pooled["fitted"]["file_bytes"]) == (
        direct.fitted.recipe.name, direct.fitted.file_bytes)
    assert [(c["path"], c["validation_quality"]["value"] if c["validation_quality"] else None)
            for c in pooled["candidates"]] == [(c.path, c.validation_quality.value if c.validation_quality else None)
                                               for c in direct.candidates]


def test_a_board_that_stops_answering_is_marked_down_and_the_fit_completes_on_the_other(
        ray_cluster, two_boards, small_bert_dir, tmp_path):
    first, second = two_boards
    profile = lab_profile(tmp_path, first)
    boards = load_boards(boards_file(tmp_path, profile, {"lab-a": first, "lab-b": second}))
    benchmarks = []

    def kill_a_after_its_first_benchmark(message):
        if message.lstrip().startswith("p50 "):
            benchmarks.append(message)
            if len(benchmarks) == 1:
                first.kill()  # powered off mid-fit, its sessions with it

    progress = Recorder(kill_a_after_its_first_benchmark)
    with BoardPool(boards, progress) as pool:
        result = fit(small_task(small_bert_dir), device=str(profile), budget=Budget(max_mb=0.5, max_latency_ms=1e4),
                     out=tmp_path / "fit", options=OPTIONS, progress=progress, boards=pool)
        assert set(pool.down) == {"lab-a"}
    assert result.fits
    boards_used = [c.benchmark.board for c in [result.dense, *result.candidates] if c.benchmark is not None]
    assert boards_used[0] == "lab-a" and boards_used[-1] == "lab-b" and len(boards_used) >= 2
    assert any(n.startswith("board lab-a stopped answering") and "its work goes to lab-b" in n for n in progress.notes)


def test_a_pinned_board_runs_on_the_node_with_its_resource_and_a_lab_with_none_left_says_so(
        ray_cluster, two_boards, tmp_path):
    import ray

    first = two_boards[0]
    profile = lab_profile(tmp_path, first)
    boards = load_boards(boards_file(tmp_path, profile, {"lab-pinned": first}, pinned="lab-pinned"))
    with BoardPool(boards) as pool:
        node = ray.get(pool.actors["lab-pinned"].__ray_call__.remote(
            lambda worker: ray.get_runtime_context().get_node_id()))
        assert node == ray_cluster[1].node_id
        assert pool.ping("lab-pi") is None
        first.kill()
        assert pool.ping("lab-pi").startswith("every board of lab-pi is down: lab-pinned:")
        assert pool.ping("another") == "no board of profile another in the pool"


def test_builds_and_recoveries_started_ahead_on_ray_change_no_decision(ray_cluster, small_bert_dir, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(tmp_path / "own-cache"))  # not the session's shared export cache
    # two lines (FFN kept, half removed): while one line's candidate is measured, the other's can be built, and
    # recovered first (a few steps: the point is that a worker's recovery is the one the driver would make)
    options = FitOptions(recipes=("int8",), scoring_examples=32, ffn_fractions=(0.0, 0.5), layer_removals=(0,),
                         trim_vocabulary=False, bench_runs=20, bench_warmup=1, recover_steps=4)
    budget = Budget(max_mb=0.45)
    evaluated_here: list[str] = []  # the splits evaluated through the runtime in this process (not a worker's)
    measure = Task.runtime_quality

    def counted(task, run, split="test", map_inputs=None):
        evaluated_here.append(split)
        return measure(task, run, split, map_inputs)

    monkeypatch.setattr(Task, "runtime_quality", counted)
    ahead = Recorder()
    shared = tmp_path / "shared"  # as a folder every node mounts: the workers write the artifacts there
    shared.mkdir()
    # first, in an empty export cache: whatever it finds cached was built by a Ray worker
    built_ahead = fit(small_task(small_bert_dir), device="host", budget=budget, out=tmp_path / "ahead",
                      options=options, progress=ahead, builds_ahead=2, shared_folder=shared)
    summary = next(n for n in ahead.notes if n.startswith("candidate builds started ahead on Ray: "))
    started, used = (int(word.strip("(")) for word in summary.split(":")[1].split()[:2])
    assert started >= 1 and used >= 1, summary
    assert any(n.endswith("was recovered ahead on a worker") for n in ahead.notes), ahead.notes
    assert any(c.cached_export for c in built_ahead.candidates)
    exports = {p.name for p in (tmp_path / "own-cache" / "exports").iterdir()}
    # every build that was used came through the shared folder (one still running when the search ended may not)
    assert {p.name for p in shared.iterdir()} <= exports and used <= len(list(shared.iterdir())) <= started
    with_ahead, evaluated_here[:] = evaluated_here.count("validation"), []
    plain = fit(small_task(small_bert_dir), device="host", budget=budget, out=tmp_path / "plain", options=options,
                progress=Recorder())
    # a candidate built ahead (found in the export cache) was evaluated there, unless over the size budget
    evaluated_ahead = sum(c.cached_export and c.validation_quality is not None for c in built_ahead.candidates)
    assert evaluated_ahead >= 1 and with_ahead == evaluated_here.count("validation") - evaluated_ahead
    # the same search: the same candidates in the same order, the same qualities, the same choice
    assert [(c.recipe.name, c.describe(), c.file_bytes) for c in built_ahead.candidates] == [
        (c.recipe.name, c.describe(), c.file_bytes) for c in plain.candidates]
    assert [c.validation_quality for c in built_ahead.candidates] == [c.validation_quality for c in plain.candidates]
    assert built_ahead.fitted.describe() == plain.fitted.describe() and built_ahead.status == plain.status
    # recovered from the same weights to the same weights (the timings aside)
    assert [re.sub(r"\(\d+ s\)", "", c.recovery) for c in built_ahead.candidates] == [
        re.sub(r"\(\d+ s\)", "", c.recovery) for c in plain.candidates]
    assert any(c.recovery for c in plain.candidates)


def test_a_real_head_passes_the_check_that_refuses_ports_that_are_not_ray(ray_cluster):
    cluster, _ = ray_cluster
    check_speaks_grpc(cluster.address)  # the GCS answers as a gRPC server does, at once


def test_by_default_no_build_runs_ahead_on_a_cluster_whose_every_node_is_this_machine(ray_cluster):
    progress = Recorder()
    assert nodes_elsewhere() == []  # both nodes of the test cluster are on 127.0.0.1
    assert start_builds_ahead(None, WorkElsewhere(), None, None, progress) is None  # the builder is not even looked at
    assert progress.notes[0].startswith("builds ahead: off (every node of the Ray cluster is this machine")


def test_ray_auto_starts_a_ray_of_its_own_on_the_loopback_address():
    code = ("import os\nos.environ.pop('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER', None)\n"  # as a user's shell has it
            "from edgeprune.cluster import connect_ray\nimport sys\nassert connect_ray('auto')\nimport ray\n"
            "print(sorted({n['NodeManagerAddress'] for n in ray.nodes()}), ray.cluster_resources().get('CPU'))\n"
            "ray.shutdown()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("]")[0] == "['127.0.0.1'"


@pytest.mark.parametrize(("text", "message"), [
    ("", "no boards"),
    ('[[board]]\nname = "a"\n', "needs profile"),
    ('[[board]]\nname = "a"\nprofile = "host"\n[[board]]\nname = "a"\nprofile = "host"\n', "more than once"),
    ('[[board]]\nname = "a b"\nprofile = "host"\n', "use letters, digits"),
    ('[[board]]\nname = "a"\nprofile = "nowhere"\n', "unknown device 'nowhere'"),
    ('[[board]]\nname = "a"\nprofile = "host"\ncolour = "red"\n', r"board\[0\].colour is not a board key"),
    ('[[board]]\nname = "a"\nprofile = "host"\n[board.connection]\nkind = "ssh"\nhost = "x"\n', "needs"),
    ('[lab]\nname = "a"\n', "unknown key 'lab'"),
])
def test_a_bad_boards_file_is_one_clear_line(text, message, tmp_path):
    path = tmp_path / "boards.toml"
    path.write_text(text)
    with pytest.raises(UserInputError, match=message):
        load_boards(path)


def test_the_cli_checks_the_lab_flags_before_any_work(tmp_path, capsys):
    assert main(["fit", "--ray", "auto", "--builds-ahead", "-1", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "--builds-ahead must be 0 or more" in capsys.readouterr().err
    assert main(["fit", "--shared-folder", str(tmp_path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "--shared-folder is for builds ahead on Ray" in capsys.readouterr().err
    assert main(["fit", "--builds-ahead", "2", "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "--builds-ahead is for builds ahead on Ray" in capsys.readouterr().err
    assert main(["fit", "--ray", "auto", "--shared-folder", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    assert "is not a folder here" in capsys.readouterr().err
    assert main(["fit", "--boards", str(tmp_path / "none.toml"), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "boards file" in capsys.readouterr().err
