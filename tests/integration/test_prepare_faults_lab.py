"""Two more cases of the fault matrix (issue 7, item 3), on the lab's EMULATED units, in one
site.yml run limited to three units:

| unit            | fault                                             | expected                              |
|-----------------|---------------------------------------------------|---------------------------------------|
| orinnx-01       | its disk fills up while rsync copies a new model  | refused in prepare, the partial copy  |
|                 |                                                   | removed, live cache and serving as    |
|                 |                                                   | they were; a re-run copies it         |
| orinnano-01     | its gated target is missing from the controller's | refused in prepare, the reason says   |
|                 | model store (nobody downloaded it with a token)   | it is gated and how to fetch it       |
| agxorin-jp72-01 | none (the control unit)                           | rolled out as usual                   |

The disk filling up is a 16 KiB tmpfs over the unit's staging folder: the room check (which
reads the cache's own filesystem) passes, and rsync then runs out of space part-way, as it
does when something else fills a real unit's disk during the copy. The other ten cases are
in test_fault_matrix_lab.py and test_rollout_lab.py.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import LAB_INVENTORY, lab_decision, lab_vars, on_unit, unit_models
from tests.conftest import lab_playbook as playbook
from tests.integration.test_fault_matrix_lab import HF_HUB, RELEASE, hub_repo, ok, serving_id, write_host_vars

# ~5 min (one prepare of three units, and a first rollout of the control unit on a fresh lab).
# Not in CI: its read-only case sometimes reports "rsync failed" without rsync's stderr
# (seen in the fifth and seventh sessions; not yet explained).
pytestmark = [pytest.mark.lab, pytest.mark.slow]

DISK_FULL = "orinnx-01"
GATED = "orinnano-01"
CONTROL = "agxorin-jp72-01"
# A model the unit does not hold yet; on Orin NX its plan is n-gram (no second repo to copy).
NEW_MODEL = "Qwen/Qwen3-0.6B"
GATED_MODEL = "meta-llama/Llama-3.2-1B-Instruct"
INCOMING = "/var/lib/specfleet/huggingface/.specfleet/incoming"


def live_cache(host: str) -> str:
    """Each live model of the unit and the version it points to."""
    return ok(host, f"for l in $(ls -d {HF_HUB}/models--* 2>/dev/null); do echo \"$l -> $(readlink \"$l\")\"; done")


def unit_state(host: str) -> dict:
    return {"serving": serving_id(host), "release": ok(host, f"cat {RELEASE} 2>/dev/null; true"),
            "cache": live_cache(host)}


@pytest.fixture(scope="module")
def faulted(fleet_lab, tmp_path_factory):
    written = []
    # The controller's store as the organiser left it: everything but the gated target.
    store = tmp_path_factory.mktemp("store") / "hf-store"
    shutil.copytree(lab_vars()["specfleet_hf_cache_store"], store, symlinks=True)
    repo_dir = "models--" + GATED_MODEL.replace("/", "--")
    shutil.rmtree(store / "hub" / repo_dir)
    (store / "manifests" / f"{repo_dir}.json").unlink()
    try:
        ok(DISK_FULL, f"rm -rf {hub_repo(NEW_MODEL)} && mkdir -p {INCOMING} && "
                      f"mount -t tmpfs -o size=16k specfleet-lab-disk-full {INCOMING}")
        written.append(write_host_vars(DISK_FULL, {"specfleet_model": NEW_MODEL}))
        written.append(write_host_vars(GATED, {"specfleet_hf_cache_store": str(store)}))
        before = {host: unit_state(host) for host in (DISK_FULL, GATED)}
        runs = tmp_path_factory.mktemp("runs")
        result = playbook("site.yml", "-l", f"{DISK_FULL},{GATED},{CONTROL}",
                          env={"SPECFLEET_RUNS_DIR": str(runs)})
        run_dirs = list(runs.iterdir())
        assert run_dirs, f"site.yml wrote no report (rc {result.returncode}):\n{result.stdout[-6000:]}"
        run_dir = run_dirs[0]
        staged = ok(DISK_FULL, f"find {INCOMING} -type f | head; df -B1 --output=used {INCOMING} | tail -1 | tr -d ' '")
        after = {host: unit_state(host) for host in (DISK_FULL, GATED)}
        # A copy that fails for another reason (here the staging folder turned read-only, with
        # room enough) keeps whatever it staged, for the next run to resume.
        ok(DISK_FULL, f"mount -o remount,ro,size=4m {INCOMING}")
        unwritable = playbook("prepare.yml", "-l", DISK_FULL)
        ok(DISK_FULL, f"umount {INCOMING}")
        # With room again, the same prepare copies the model and switches it in whole.
        recovered = playbook("prepare.yml", "-l", DISK_FULL)
        yield {
            "result": result,
            "report": json.loads((run_dir / "report.json").read_text()),
            "records": {path.stem: json.loads(path.read_text()) for path in (run_dir / "units").glob("*.json")},
            "before": before,
            "after": after,
            "staged": staged,
            "unwritable": unwritable,
            "recovered": recovered,
        }
    finally:
        on_unit(DISK_FULL, f"umount {INCOMING} 2>/dev/null; rm -rf {hub_repo(NEW_MODEL)}")
        for path in written:
            path.unlink(missing_ok=True)
        assert not (LAB_INVENTORY / "host_vars" / f"{DISK_FULL}.yml").exists()


def reasons(record: dict) -> str:
    return " ".join(record.get("reasons") or [])


def test_every_unit_is_in_the_report(faulted):
    assert {unit["host"] for unit in faulted["report"]["units"]} == {DISK_FULL, GATED, CONTROL}


def test_disk_full_is_refused_with_the_cause(faulted):
    record = faulted["records"][DISK_FULL]
    assert record["decision"] == "failed", record
    assert "filled up while copying Qwen/Qwen3-0.6B" in reasons(record), record
    assert "no room left for the rest of the copy" in reasons(record), record


def test_disk_full_leaves_no_partial_copy(faulted):
    # No file of the copy is left in the staging folder: the space is given back.
    assert faulted["staged"].split() == ["0"], faulted["staged"]


def test_disk_full_leaves_cache_and_serving_as_they_were(faulted):
    assert faulted["after"][DISK_FULL] == faulted["before"][DISK_FULL]
    assert "Qwen3-0.6B" not in faulted["after"][DISK_FULL]["cache"]


def test_other_copy_failures_keep_the_partial_copy_and_say_why(faulted):
    result = faulted["unwritable"]
    assert result.returncode != 0
    output = " ".join(result.stdout.split())  # the YAML callback folds long messages
    assert "Copying Qwen/Qwen3-0.6B failed (rsync" in output, result.stdout[-3000:]
    assert "Read-only file system" in output, result.stdout[-3000:]
    assert "the next run resumes it" in output


def test_disk_full_unit_copies_the_model_once_there_is_room(faulted):
    result = faulted["recovered"]
    assert result.returncode == 0, result.stdout[-4000:]
    live = live_cache(DISK_FULL)
    assert "models--Qwen--Qwen3-0.6B -> " in live, live
    ok(DISK_FULL, f"test -f {hub_repo(NEW_MODEL)}/refs/main")


def test_gated_model_missing_is_refused_with_how_to_fetch_it(faulted):
    record = faulted["records"][GATED]
    assert record["decision"] == "failed", record
    text = reasons(record)
    assert f"{GATED_MODEL} is not in" in text, record
    assert "gated repo" in text and f"https://huggingface.co/{GATED_MODEL}" in text, record
    assert faulted["after"][GATED] == faulted["before"][GATED]


def test_control_unit_is_unaffected(faulted):
    record = faulted["records"][CONTROL]
    assert record["decision"] == lab_decision(CONTROL), record
    models = unit_models(CONTROL)
    assert models.returncode == 0 and json.loads(models.stdout)["data"], "the control unit serves"
