"""Fleet fits on a small random BERT through the real ExecuTorch runtime: one run fits every device, a folder each
and fleet.json/md/html beside them; the device-independent work is done once, each device's decisions are its own
(the same as a fit of that device alone); a device that fails does not stop the others; an interrupted fleet
resumes device by device."""

import json

import pytest

from edgeprune.cli import main
from edgeprune.progress import Progress
from edgeprune.search import Budget
from edgeprune.search.fit import FitOptions, fit
from edgeprune.search.fleet import fit_fleet
from edgeprune.search.fleet_result import FleetResult
from edgeprune.tasks import bundled_task
from tests.sshd import free_port
from tests.test_fit_integration import FAST, HEADS_ONLY, NO_RECOVERY

pytestmark = pytest.mark.integration


def host_like(folder, name):
    """A second profile of this machine (local connection) under another name: a device with its own budget."""
    path = folder / f"{name}.toml"
    path.write_text(f"""name = "{name}"
description = "this machine again, as a second device of the fleet"
[hardware]
arch = "x86_64"
cores = 2
ram_mb = 24576
[runtime]
name = "executorch"
threads = 2
[budgets]
max_mb = 100.0
[connection]
kind = "local"
""")
    return path


def unreachable(folder):
    """A board behind ssh on a loopback port nothing listens on."""
    path = folder / "gone.toml"
    path.write_text(host_like(folder, "gone").read_text().replace('kind = "local"', f"""kind = "ssh"
host = "127.0.0.1"
user = "nobody"
port = {free_port()}
connect_timeout_s = 2"""))
    return path


class Recorder(Progress):
    """Keeps every note; raises KeyboardInterrupt (as Ctrl-C would) at the `times`-th note containing `stop_at`."""

    def __init__(self, stop_at: str | None = None, times: int = 1) -> None:
        super().__init__(enabled=False)
        self.notes: list[str] = []
        self.stop_at, self.times = stop_at, times

    def note(self, message: str) -> None:
        self.notes.append(message)
        if self.stop_at is not None and self.stop_at in message:
            self.times -= 1
            if self.times == 0:
                raise KeyboardInterrupt

    def warn(self, message: str) -> None:
        self.notes.append(message)


def test_a_fleet_from_the_project_file_shares_work_and_decides_like_separate_fits(small_bert_dir, small_bert_int8_bytes,
                                                                                  tmp_path, capsys):
    tight = small_bert_int8_bytes(2) / 1e6  # 2 of 4 heads gone per layer fits
    second = host_like(tmp_path, "host2")
    project = tmp_path / "edgeprune.toml"
    project.write_text(f"""[fit]
fleet = ["host", "{unreachable(tmp_path)}", "{second}"]
require_device = true
[fit.budgets.host2]
max_mb = {tight}
""")
    out = tmp_path / "fleet"
    code = main(["--config", str(project), "fit", *NO_RECOVERY,
                 "--model", str(small_bert_dir), "--recipe", "int8", "--out", str(out),
                 *HEADS_ONLY, *FAST])
    printed = capsys.readouterr()
    assert code == 3, printed.err  # not every device fits: one failed
    fleet = FleetResult.load(out / "fleet.json")
    host, gone, host2 = fleet.members
    assert [m.device for m in fleet.members] == ["host", "gone", "host2"]
    assert (gone.status, gone.file_bytes) == ("failed", None) and "gone is not usable" in gone.message
    assert "gone: failed" in printed.out and not (out / "gone").exists()
    assert host.fits and host2.fits and host.structure == "0 heads removed"
    assert host2.file_bytes <= tight * 1e6 < host.file_bytes and host2.budget.max_mb == tight
    for member in (host, host2):
        folder = out / member.device
        assert (folder / "model.pte").is_file() and (folder / "report.html").is_file()
        assert json.loads((folder / "result.json").read_text())["device"] == member.device
    # computed once: host2 took the teacher, head scores and means, and the dense baseline's test quality
    assert fleet.reused["teacher"] == 1 and fleet.reused["head scores"] == 1 and fleet.reused["head means"] == 1
    assert fleet.reused["test qualities through the runtime"] >= 1
    page = (out / "fleet.html").read_text()
    assert 'id="plot-fleet"' in page and "host2/report.html" in page and page.count("<tr>") == 4
    assert "| host2 | executorch | fit | int8 |" in (out / "fleet.md").read_text()

    # the decisions are the device's own: host2 alone, same budget, builds and chooses the same candidates
    alone = fit(bundled_task("minilm-bbc", model_path=small_bert_dir, max_length=32, progress=Progress(enabled=False)),
                device=str(second), budget=Budget(max_mb=tight), out=tmp_path / "alone",
                options=FitOptions(recipes=("int8",), scoring_examples=32, ffn_fractions=(0.0,), layer_removals=(0,),
                                   trim_vocabulary=False, recover_steps=0))
    together = json.loads((out / "host2" / "result.json").read_text())
    assert alone.fitted.describe() == host2.structure and alone.fitted.file_bytes == host2.file_bytes
    assert sorted(c.describe() for c in alone.candidates) == sorted(
        f"{c['plan']['heads']['heads_removed']} heads removed" for c in together["candidates"])
    assert alone.fitted.validation_quality == host2_quality(together)


def host2_quality(result: dict):
    from edgeprune.serialization import from_jsonable
    from edgeprune.tasks import Quality

    return from_jsonable(Quality, result["fitted"]["validation_quality"])


def test_an_interrupted_fleet_resumes_device_by_device(small_bert_dir, tmp_path):
    second = host_like(tmp_path, "host2")
    options = FitOptions(recipes=("int8",), scoring_examples=32, ffn_fractions=(0.0,), layer_removals=(0,),
                         trim_vocabulary=False, recover_steps=0)

    def task():
        return bundled_task("minilm-bbc", model_path=small_bert_dir, max_length=32, progress=Progress(enabled=False))

    out = tmp_path / "fleet"
    stopped = Recorder(stop_at="benchmarking on host2", times=2)  # the dense baseline is journaled by then
    with pytest.raises(KeyboardInterrupt, match="the whole fleet continues with --resume"):
        fit_fleet(task(), ["host", str(second)], {"host2": Budget(max_mb=50)}, out, options, stopped)
    assert (out / "host" / "result.json").is_file() and (out / ".host2.partial").is_dir()
    assert not (out / "fleet.json").exists()  # nothing says complete
    with pytest.raises(Exception, match="not empty"):
        fit_fleet(task(), ["host", str(second)], None, out, options, Recorder())

    resumed = Recorder()
    fleet = fit_fleet(task(), ["host", str(second)], {"host2": Budget(max_mb=50)}, out, options, resumed, resume=True)
    assert fleet.fits and [m.device for m in fleet.members] == ["host", "host2"]
    assert "fleet: host finished before (resumed)" in resumed.notes
    assert "head scores: finished before (resumed)" in resumed.notes  # host2's own journal
    assert not any(n.startswith("dense baseline:") for n in resumed.notes)
    with pytest.raises(Exception, match="finished fleet"):
        fit_fleet(task(), ["host", str(second)], None, out, options, Recorder(), resume=True)


@pytest.mark.parametrize(("argv", "message"), [
    (["--device", "host", "--device", "host"], "appears twice"),
    (["--device", "host", "--device", "pi5", "--ssh", "pi@10.0.0.2"], "in a fleet each device's profile"),
])
def test_fleet_mistakes_are_one_line_exit_2(argv, message, tmp_path, capsys):
    code = main(["fit", *argv, "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_budgets_for_a_device_outside_the_fleet_are_refused(tmp_path, capsys):
    project = tmp_path / "edgeprune.toml"
    project.write_text('[fit]\nfleet = ["host", "pi5"]\n[fit.budgets.pi4]\nmax_mb = 30\n')
    code = main(["--config", str(project), "fit", "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "[fit.budgets] names pi4, not a device of this fit" in err, err
    project.write_text('[fit]\nfleet = ["host", "pi5"]\n[fit.budgets.pi5]\nmax_joules = 3\n')
    assert main(["--config", str(project), "fit", "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "fit.budgets.pi5.max_joules is not a budget" in capsys.readouterr().err
