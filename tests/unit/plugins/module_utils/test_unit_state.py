"""unit_state's checks against real files, users, processes and stores on this machine; the
docker and dpkg answers from a runner that plays their command lines' output."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import shutil
import time

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import store_manifest as sm
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_state import dpkg_missing, evaluate

from tests.stores import make_repo

ME = pwd.getpwuid(os.geteuid()).pw_name
MY_GROUP = grp.getgrgid(os.getegid()).gr_name


def no_commands(argv):
    raise AssertionError(f"ran {argv}")


def ask(*checks, run=no_commands) -> list[bool]:
    return [result["holds"] for result in evaluate(list(checks), run)["results"]]


def test_a_file_holds_with_its_content_owner_and_mode(tmp_path):
    path = tmp_path / "f"
    path.write_text("key\n")
    path.chmod(0o644)
    digest = hashlib.sha256(b"key\n").hexdigest()
    file = {"kind": "file", "path": str(path), "sha256": digest, "owner": ME, "group": MY_GROUP, "mode": "0644"}
    assert ask(file) == [True]
    path.chmod(0o600)
    assert ask(file) == [False]
    path.chmod(0o644)
    path.write_text("other\n")
    assert ask(file, {**file, "sha256": None}) == [False, True]
    assert ask({**file, "sha256": None, "owner": "nobody"}, {**file, "sha256": None, "mine": True}) == [False, True]


def test_same_as_compares_with_the_other_file_or_the_given_sha256_when_it_is_absent(tmp_path):
    copy, original = tmp_path / "copy", tmp_path / "original"
    copy.write_text("{}\n")
    original.write_text("{}\n")
    same = {"kind": "file", "path": str(copy), "same_as": str(original)}
    assert ask(same) == [True]
    original.write_text('{"a": 1}\n')
    assert ask(same) == [False]
    original.unlink()
    assert ask({**same, "sha256": hashlib.sha256(b"{}\n").hexdigest()}, {**same, "sha256": "0" * 64}) == [True, False]


def test_directories_absence_and_links(tmp_path):
    (tmp_path / "d").mkdir(mode=0o755)
    os.chmod(tmp_path / "d", 0o755)
    os.symlink("../target", tmp_path / "link")
    assert ask(
        {"kind": "directory", "path": str(tmp_path / "d"), "mode": "0755", "mine": True},
        {"kind": "directory", "path": str(tmp_path / "link")},  # a link to a directory is no directory
        {"kind": "absent", "path": str(tmp_path / "none")},
        {"kind": "absent", "path": str(tmp_path / "link")},  # dangling, yet there
        {"kind": "link", "path": str(tmp_path / "link"), "src": "../target"},
        {"kind": "link", "path": str(tmp_path / "link"), "src": "../other"},
        {"kind": "link", "path": str(tmp_path / "d"), "src": "../target"},
    ) == [True, False, True, False, True, False, False]


def test_what_cannot_be_read_does_not_hold(tmp_path):
    (tmp_path / "file").write_text("x")
    answer = evaluate([{"kind": "file", "path": str(tmp_path / "file" / "below")}], no_commands)
    assert answer["holds"] is False
    assert answer["results"][0]["detail"].startswith("could not read")


def test_a_malformed_check_is_refused_before_any_is_asked(tmp_path):
    with pytest.raises(ValueError, match="unknown check kind 'fiel'"):
        evaluate([{"kind": "directory", "path": str(tmp_path)}, {"kind": "fiel", "path": "/x"}], no_commands)
    with pytest.raises(ValueError, match="a link check needs src"):
        evaluate([{"kind": "link", "path": "/x"}], no_commands)


def test_missing_is_what_dpkg_does_not_call_installed():
    # rsync installed, the toolkit removed with its configuration kept, docker.io unknown.
    dpkg = "rsync installed\nnvidia-container-toolkit config-files\n"
    assert dpkg_missing(["docker.io", "nvidia-container-toolkit", "rsync"], dpkg) == [
        "docker.io", "nvidia-container-toolkit"]
    assert dpkg_missing(["rsync:arm64"], dpkg) == []


def test_packages_ask_dpkg_once_and_name_what_is_missing(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    asked = []

    def dpkg(argv):
        asked.append(argv)
        return 1, "rsync installed\n", "dpkg-query: no packages found matching docker.io\n"

    answer = evaluate([{"kind": "packages", "names": ["docker.io", "rsync"]}], dpkg)
    assert asked == [["dpkg-query", "--show", "--showformat", "${Package} ${db:Status-Status}\n", "docker.io", "rsync"]]
    assert (answer["holds"], answer["results"][0]["detail"]) == (False, ["docker.io"])
    assert evaluate([{"kind": "packages", "names": []}], no_commands)["holds"] is True


def test_docker_runtime_and_image_from_what_docker_answers(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    info = {"Runtimes": {"runc": {}, "nvidia": {}}, "DefaultRuntime": "nvidia"}
    image = [{"Id": "sha256:abc", "RepoDigests": ["reg/vllm@sha256:111"]}]

    def docker(argv):
        if argv[:2] == ["docker", "info"]:
            return 0, json.dumps(info), ""
        if argv[:3] == ["docker", "image", "inspect"] and argv[3] == "reg/vllm:1":
            return 0, json.dumps(image), ""
        return 1, "[]", "Error: No such image"

    assert ask(
        {"kind": "docker_runtime", "name": "nvidia", "default": "nvidia"},
        {"kind": "docker_runtime", "name": "nvidia", "default": "runc"},
        {"kind": "docker_runtime", "name": "nvidia", "default": ""},
        {"kind": "docker_image", "ref": "reg/vllm:1"},
        {"kind": "docker_image", "ref": "reg/vllm:1", "digest": "sha256:111"},
        {"kind": "docker_image", "ref": "reg/vllm:1", "digest": "sha256:222"},
        {"kind": "docker_image", "ref": "reg/vllm:2"},
        run=docker,
    ) == [True, False, True, True, True, False, False]


def test_docker_info_without_a_daemon_does_not_hold(monkeypatch):
    # `docker info --format` exits 0 with no daemon; what it prints has no runtimes.
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    no_daemon = json.dumps({"ServerErrors": ["Cannot connect to the Docker daemon"]})
    assert ask({"kind": "docker_runtime", "name": "nvidia"}, run=lambda argv: (0, no_daemon, "")) == [False]


def test_group_members():
    assert ask(
        {"kind": "group_members", "group": MY_GROUP, "users": [ME]},  # the primary group
        {"kind": "group_members", "group": MY_GROUP, "users": []},
        {"kind": "group_members", "group": "no-such-group", "users": [ME]},
        {"kind": "group_members", "group": "no-such-group", "users": []},
    ) == [True, True, False, True]


@pytest.fixture
def dockerd_check(stand_in_dockerd):
    args, _process = stand_in_dockerd
    return {"kind": "dockerd", **args}


def test_dockerd_holds_when_it_loaded_the_file_and_carries_the_text(dockerd_check, tmp_path):
    answer = evaluate([dockerd_check], no_commands)["results"][0]
    assert answer["holds"] is True, answer
    assert answer["detail"]["content"] == "{}\n"
    time.sleep(0.05)
    (tmp_path / "daemon.json").write_text('{"debug": true}\n')
    later = evaluate([dockerd_check], no_commands)["results"][0]
    assert later["holds"] is False
    assert later["detail"]["content"].endswith('"debug": true}\n')


def test_dockerd_reads_the_pidfile_the_file_names(dockerd_check, tmp_path):
    (tmp_path / "daemon.json").write_text(json.dumps({"pidfile": str(tmp_path / "elsewhere.pid")}))
    # Written after the stand-in started, and naming a pidfile no process wrote: not loaded.
    answer = evaluate([dockerd_check], no_commands)["results"][0]
    assert (answer["holds"], answer["detail"]["reason"]) == (False, "dockerd is not running")


def test_a_store_holds_when_its_live_version_is_the_manifests(tmp_path):
    manifest = make_repo(tmp_path / "src" / "models--o--m")
    root = tmp_path / "hf"
    check = {"kind": "store", "root": str(root), "subdir": "hub", "manifest": manifest}
    first = evaluate([check], no_commands)["results"][0]
    assert first["holds"] is False and first["detail"]["up_to_date"] is False
    layout = sm.StoreLayout(str(root), "hub", manifest["name"])
    shutil.copytree(tmp_path / "src" / "models--o--m", layout.staging_dir(manifest["id"]), symlinks=True)
    assert sm.promote(layout, manifest) == []
    assert ask(check) == [True]
    # A version a killed switch left behind: up to date, yet not settled.
    os.makedirs(os.path.join(layout.versions, "leftover"))
    answer = evaluate([check], no_commands)["results"][0]
    assert (answer["holds"], answer["detail"]["up_to_date"], answer["detail"]["stale_versions"]) == (
        False, True, ["leftover"])


def answer(*checks) -> list[dict]:
    return evaluate(list(checks), no_commands)["results"]


def test_room_adds_up_the_needs_of_one_filesystem(tmp_path):
    """A tarball's parts and the image loaded from them on one disk need room for both."""
    free = sm.free_bytes(str(tmp_path))
    parts, docker = tmp_path / "images", tmp_path / "not" / "made" / "yet"
    half = free // 2 + 1  # either alone fits, both together do not
    [alone] = answer({"kind": "room", "needs": [{"path": str(parts), "bytes": half}]})
    assert alone["holds"]
    needs = [{"path": str(parts), "bytes": half}, {"path": str(docker), "bytes": half}]
    [both] = answer({"kind": "room", "needs": needs, "spare": 0})
    assert not both["holds"]
    [filesystem] = both["detail"]
    assert filesystem["paths"] == [str(parts), str(docker)] and filesystem["needed"] == 2 * half
    assert abs(filesystem["free"] - free) < 64 * 2**20  # the same filesystem, read again
    [spared] = answer({"kind": "room", "needs": [{"path": str(parts), "bytes": 1}], "spare": free + 2**30})
    assert not spared["holds"] and spared["detail"][0]["needed"] == free + 2**30 + 1


def test_room_counts_each_filesystem_on_its_own(tmp_path):
    other = "/dev/shm" if os.path.isdir("/dev/shm") else "/proc"
    needs = [{"path": str(tmp_path), "bytes": 1}, {"path": f"{other}/x", "bytes": 1}]
    [result] = answer({"kind": "room", "needs": needs})
    devices = {os.stat(str(tmp_path)).st_dev, os.stat(other).st_dev}
    assert len(result["detail"]) == len(devices)
    assert result["holds"] == all(entry["free"] >= entry["needed"] for entry in result["detail"])
