"""An image tarball goes unit to unit: the image role cuts it into parts on the controller, the
fan-out passes verified parts on between lab units, and each unit loads the image from its copy.

Real Ansible, SSH, rsync (rrsync-confined fleet key) and each unit's own Docker engine; the
units are the lab's emulated Jetsons (root login, Docker installed).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    FLEET_PROBE,
    LAB_INVENTORY,
    REPO,
    fanout_record_task,
    fleet_leftovers,
    lab_hosts,
    on_unit,
    recap,
)

pytestmark = pytest.mark.lab

IMAGE = "specfleet-test/fanout-image:1"
TARBALL = "fanout-image.tar"
ROOT = "/var/lib/specfleet-image-fanout-test"
PLAY = """
- name: Prepare's image role, on its own, from a tarball
  hosts: all
  gather_facts: false
  become: true
  roles:
    - role: specfleet.fleet.specfleet_image
      # As prepare.yml skips the role for a refused plan; the first host of the play skips it.
      when: inventory_hostname != "{skipped}"
      vars:
        specfleet_image_ref: {image}
        specfleet_image_digest: ""
        specfleet_image_source: tarball
        specfleet_image_tarball_dir: {tarballs}
        specfleet_image_tarball: {tarball}
        specfleet_image_store: {store}
        specfleet_image_unit_dir: {root}
        specfleet_image_part_mib: 1
"""


@pytest.fixture(scope="module")
def image_tarball(fleet_lab, tmp_path_factory) -> Iterator[tuple[Path, str]]:
    """A 5 MiB image (random bytes: rsync cannot shortcut them) made in the lab's Docker engine on
    the controller and saved with `docker save`; (its directory, its image id)."""
    env = {**os.environ, "DOCKER_HOST": fleet_lab.docker_host}

    def docker(*argv: str, data: bytes | None = None) -> str:
        return subprocess.run(["docker", *argv], input=data, capture_output=True, check=True, timeout=120,
                              env=env).stdout.decode()

    base = tmp_path_factory.mktemp("image")
    rootfs = base / "rootfs"
    rootfs.mkdir()
    (rootfs / "payload").write_bytes(os.urandom(5 << 20))
    docker("import", "-", IMAGE,
           data=subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True).stdout)
    tarballs = base / "tarballs"
    tarballs.mkdir()
    docker("save", "-o", str(tarballs / TARBALL), IMAGE)
    image_id = docker("image", "inspect", "--format", "{{.Id}}", IMAGE).strip()
    yield tarballs, image_id
    docker("image", "rm", "-f", IMAGE)


def run_image_role(units: list[str], tmp_path: Path, tarballs: Path, store: Path, *extra: str) -> tuple[str, dict]:
    """The image role on ``units`` (the first skips it, as for a refused plan); (output, per unit:
    what came unit to unit and the fan-outs' results)."""
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
    out.mkdir()
    playbook = tmp_path / "image.yml"
    playbook.write_text(PLAY.format(image=IMAGE, tarballs=tarballs, tarball=TARBALL, store=store, root=ROOT,
                                    skipped=units[0])
                        + fanout_record_task("specfleet_image_fanned | default(none)", out))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    proc = subprocess.run(
        [str(REPO / ".venv/bin/ansible-playbook"), "-i", str(LAB_INVENTORY), str(playbook), "-l", ",".join(units),
         *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout, {unit: json.loads((out / f"{unit}.json").read_text()) for unit in units}


def test_an_image_several_units_lack_goes_unit_to_unit_and_each_loads_it(image_tarball, tmp_path):
    tarballs, image_id = image_tarball
    # The play's first host skips the role (as for a refused plan): the others still plan,
    # cut and fan out without it.
    skipped, *units = list(lab_hosts())[:5]  # inventory order: the play's first host skips
    for unit in [skipped, *units]:  # each lacks the image, and holds no copy of its parts
        cleared = on_unit(unit, f"docker image rm -f {IMAGE} >/dev/null 2>&1; rm -rf {ROOT}")
        assert cleared.returncode == 0, cleared.stderr
    store = tmp_path / "image-store"
    size = (tarballs / TARBALL).stat().st_size

    # Four units lack it (at least specfleet_image_fanout_min_units, 3): one fan-out of its parts.
    _, seen = run_image_role([skipped, *units], tmp_path, tarballs, store)
    # The skipping unit took no part (the run_once driver's result is registered on every host).
    assert seen[skipped]["fanned"] is None, seen[skipped]
    assert all(skipped not in json.loads(run)["units"] for run in seen[skipped]["runs"]), seen[skipped]
    manifest = json.loads((store / "manifests" / "fanout-image.json").read_text())
    assert len(manifest["files"]) == -(-size // (1 << 20)) > 1  # parts of 1 MiB, so pieces pipeline
    (run_json,) = seen[units[0]]["runs"]
    run = json.loads(run_json)
    assert run["mode"] == "fanout" and run["units"] == {unit: "live" for unit in units}, run
    # About one copy left the controller, not one per unit; the units sent the rest to each other.
    print(f"image fan-out to {len(units)} units: {size} bytes; from the controller "
          f"{run['bytes_from']['controller']}, from peers {run['bytes_from']['peers']}")
    assert size <= run["bytes_from"]["controller"] < len(units) * size, run["bytes_from"]
    assert run["bytes_from"]["controller"] + run["bytes_from"]["peers"] == len(units) * size, run
    for unit in units:
        assert seen[unit]["fanned"] == [TARBALL], (unit, seen[unit])
        loaded = on_unit(unit, f"docker image inspect --format '{{{{.Id}}}}' {IMAGE}")
        assert loaded.stdout.strip() == image_id, (unit, loaded.stdout, loaded.stderr)  # the very image
        probe = on_unit(unit, FLEET_PROBE)
        assert fleet_leftovers(probe.stdout) == [], unit
    assert on_unit(skipped, f"docker image inspect {IMAGE}").returncode != 0  # the role left it alone

    # Again: every unit has the image, so the role's question ends it there: nothing is cut,
    # copied or loaded (the fetch tasks, which note what was fanned, are not even included).
    output, seen = run_image_role([skipped, *units], tmp_path, tarballs, store)
    assert all(seen[unit] == {"fanned": None, "runs": []} for unit in units), seen
    counts = recap(output)
    assert all(counts[unit]["changed"] == 0 and counts[unit]["failed"] == 0 for unit in units), counts

    # One unit lacks it (fewer than the minimum): the controller's rsync copy of the tarball.
    on_unit(units[-1], f"docker image rm -f {IMAGE} >/dev/null 2>&1")
    output, seen = run_image_role([skipped, *units], tmp_path, tarballs, store)
    assert seen[units[-1]] == {"fanned": [], "runs": []}, seen
    assert all(seen[unit] == {"fanned": None, "runs": []} for unit in units[:-1]), seen
    assert "Copy the tarball to the unit (resumable)" in output
    loaded = on_unit(units[-1], f"docker image inspect --format '{{{{.Id}}}}' {IMAGE}")
    assert loaded.stdout.strip() == image_id, (loaded.stdout, loaded.stderr)
    for unit in [skipped, *units]:
        on_unit(unit, f"docker image rm -f {IMAGE} >/dev/null 2>&1; rm -rf {ROOT}")
