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
        ' "crun": {"path": "/usr/bin/crun"}}, "insecure-registries": ["a:5000"]}',
        "f",
    )
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


FAILURE = {
    "host": "thor-07",
    "path": "/etc/docker/daemon.json",
    "known_good": "/etc/docker/daemon.json.specfleet-known-good",
    "timeout": 60,
}
# What the wait on `docker info` leaves when dockerd refused to start.
CANNOT_CONNECT = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
WAIT_FAILED = {"rc": 1, "msg": "non-zero return code", "stderr": f"\n{CANNOT_CONNECT}\n"}


def test_restored_and_running_again_names_host_file_and_copy():
    message = daemon_json.restart_failure_message(WAIT_FAILED, restored=True, docker_back=True, **FAILURE)
    assert message.startswith("thor-07: Docker did not come back healthy within 60 s on /etc/docker/daemon.json")
    assert f"({CANNOT_CONNECT})" in message
    assert (
        "/etc/docker/daemon.json was restored from /etc/docker/daemon.json.specfleet-known-good, the content "
        "Docker last ran with, and Docker was restarted on it: it runs as before."
    ) in message


def test_restored_but_still_down_says_docker_is_down():
    message = daemon_json.restart_failure_message(WAIT_FAILED, restored=True, docker_back=False, **FAILURE)
    assert "was restored from /etc/docker/daemon.json.specfleet-known-good" in message
    assert "Docker is DOWN on thor-07" in message and "journalctl -u docker" in message


def test_nothing_to_restore_says_the_file_was_left():
    # systemd's failed restart: the service task's message, no stderr.
    failed = {"msg": "Unable to restart service docker: Job for docker.service failed"}
    message = daemon_json.restart_failure_message(failed, restored=False, docker_back=False, **FAILURE)
    assert "(Unable to restart service docker: Job for docker.service failed)" in message
    assert "no known-good copy to restore" in message and "was left as it is; Docker is DOWN on thor-07" in message
