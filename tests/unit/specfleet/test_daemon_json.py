"""daemon.json merge: keep every existing key, add the nvidia runtime."""

from __future__ import annotations

import pytest

from specfleet import daemon_json

WANTED = {"runtime_name": "nvidia", "runtime_path": "nvidia-container-runtime", "default_runtime": "nvidia"}


def test_fresh_file():
    assert daemon_json.merge(daemon_json.parse(None, "/etc/docker/daemon.json"), **WANTED) == {
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
        "default-runtime": "nvidia",
    }


def test_existing_keys_and_runtime_args_are_kept():
    existing = daemon_json.parse(
        '{"data-root": "/mnt/docker", "runtimes": {"nvidia": {"path": "old", "runtimeArgs": ["--x"]},'
        ' "crun": {"path": "/usr/bin/crun"}}, "insecure-registries": ["a:5000"]}', "f")
    merged = daemon_json.merge(existing, insecure_registries=["b:5000", "a:5000"], **WANTED)
    assert merged["data-root"] == "/mnt/docker"
    assert merged["runtimes"]["crun"] == {"path": "/usr/bin/crun"}
    assert merged["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "runtimeArgs": ["--x"]}
    assert merged["insecure-registries"] == ["a:5000", "b:5000"]


def test_merge_is_idempotent():
    once = daemon_json.merge({"log-driver": "json-file"}, registry_mirrors=["http://m"], **WANTED)
    assert daemon_json.merge(once, registry_mirrors=["http://m"], **WANTED) == once


@pytest.mark.parametrize(("text", "says"), [('{"a": 1,', "is not valid JSON"), ("[1, 2]", "must hold a JSON object")])
def test_invalid_file_is_refused_with_its_path(text, says):
    with pytest.raises(daemon_json.DaemonJsonError) as raised:
        daemon_json.parse(text, "/etc/docker/daemon.json")
    assert "/etc/docker/daemon.json" in str(raised.value) and says in str(raised.value)
