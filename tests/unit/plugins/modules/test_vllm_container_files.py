"""vllm_container's files (trtllm-serve's options YAML): hashed, mounted read-only, written whole."""

from __future__ import annotations

import os

from tests.conftest import load_module

vllm_container = load_module("vllm_container")
OPTIONS = "/etc/specfleet/trtllm/speculative.yml"


def params(**overrides) -> dict:
    base = {"image": "img:1", "args": ["trtllm-serve", "m"], "env": {}, "secret_env": {}, "mounts": [],
            "port": 8000, "runtime": "nvidia", "shm_size": "16g", "ulimits": {}, "labels": {}, "files": {}}
    return {**base, **overrides}


def test_a_serving_without_files_keeps_its_hash():
    # The configuration every running vLLM container was labelled with before files existed.
    before_files = {"image": "img:1", "args": ["trtllm-serve", "m"], "env": {}, "secret_env": {}, "mounts": [],
                    "port": 8000, "runtime": "nvidia", "shm_size": "16g", "ulimits": {}, "labels": {}}
    assert vllm_container.desired_config(params()) == before_files


def test_a_changed_file_changes_the_hash():
    first = vllm_container.config_hash(vllm_container.desired_config(params(files={OPTIONS: "a: 1\n"})))
    second = vllm_container.config_hash(vllm_container.desired_config(params(files={OPTIONS: "a: 2\n"})))
    plain = vllm_container.config_hash(vllm_container.desired_config(params()))
    assert len({first, second, plain}) == 3


def test_files_are_written_whole_by_content_and_mounted_at_their_path(tmp_path):
    files = {OPTIONS: "speculative_config:\n  decoding_type: Eagle3\n"}
    mounts = vllm_container.file_mounts(files, str(tmp_path))
    (host_path, container_path), = mounts.items()
    assert container_path == OPTIONS
    assert os.path.basename(host_path).endswith("-speculative.yml")
    vllm_container.write_files(files, str(tmp_path))
    assert open(host_path, encoding="utf-8").read() == files[OPTIONS]
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(host_path)]  # no temporary left
    changed = {OPTIONS: "speculative_config:\n  decoding_type: NGram\n"}
    vllm_container.write_files(changed, str(tmp_path))
    assert open(host_path, encoding="utf-8").read() == files[OPTIONS]  # the running one is untouched
    assert len(os.listdir(tmp_path)) == 2


def test_the_restart_policy_is_no_part_of_the_configuration():
    """Setting it on the decided serving must not restart a server that is already right."""
    plain = vllm_container.config_hash(vllm_container.desired_config(params()))
    persisted = vllm_container.config_hash(vllm_container.desired_config(params(restart_policy="unless-stopped")))
    assert plain == persisted


class _Container:
    def __init__(self, attrs):
        self.attrs = attrs


def test_restart_policy_read_from_the_container():
    assert vllm_container.restart_policy(_Container({"HostConfig": {"RestartPolicy": {"Name": "unless-stopped"}}})) \
        == "unless-stopped"
    assert vllm_container.restart_policy(_Container({"HostConfig": {"RestartPolicy": {"Name": ""}}})) == "no"
    assert vllm_container.restart_policy(_Container({})) == "no"
