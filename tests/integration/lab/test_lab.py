"""The lab as the rest of the project uses it: up, SSH, Docker with the nvidia runtime,
the LAN registry, Ansible, idempotence, and a `down` that leaves nothing behind.

Tests run in file order against one lab (see conftest.running_lab); the last one takes it
down and compares the host with the snapshot taken before `up`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from labtools import REPO, snapshot, ssh, ssh_argv
from specfleet_lab import lab, network
from specfleet_lab.config import LabConfig
from specfleet_lab.engine import docker

pytestmark = pytest.mark.lab


def units(info: dict) -> list[dict]:
    return info["status"]["units"]


def test_status_lists_every_unit(cfg: LabConfig, running_lab: dict) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specfleet_lab.cli", "status", "--format", "json"],
        capture_output=True, text=True, cwd=REPO, check=True,
    )
    status = json.loads(proc.stdout)
    assert status["lab"] == "up" and status["emulated"] is True
    rows = status["units"]
    assert [r["name"] for r in rows][:3] == ["thor-01", "agxorin-jp6-01", "agxorin-jp72-01"][
        : len(rows)
    ]
    for row in rows:
        assert set(row) >= {"name", "device_class", "address", "ssh_port", "state", "emulated"}
        assert row["state"] == "running" and row["emulated"] is True and row["ssh_port"] == 22


def test_every_unit_answers_ssh(cfg: LabConfig, running_lab: dict) -> None:
    for unit in units(running_lab):
        proc = ssh(cfg, unit["address"], "true")
        assert proc.returncode == 0, f"{unit['name']}: {proc.stderr}"


def test_units_carry_jetson_identity(cfg: LabConfig, running_lab: dict) -> None:
    thor = units(running_lab)[0]
    proc = ssh(cfg, thor["address"],
               "cd /opt/specfleet-lab/jetson && od -An -c proc/device-tree/model | tail -2; "
               "head -1 etc/nv_tegra_release; grep MemTotal proc/meminfo; "
               "cat /etc/specfleet-lab/gpu.json")
    assert proc.returncode == 0, proc.stderr
    assert "\\0" in proc.stdout  # device-tree strings are NUL-terminated
    assert "# R38 (release), REVISION: 2.0, GCID: 41844464" in proc.stdout
    assert "128790100 kB" in proc.stdout
    assert '"emulated": true' in proc.stdout


def test_nothing_routes_out_of_the_lab(cfg: LabConfig, running_lab: dict) -> None:
    for unit in units(running_lab):
        ns = f"{cfg.prefix}-{unit['name']}"
        assert network.routes_out(ns) == []
        # `ip route get` asks the kernel for a route without sending a packet.
        probe = subprocess.run(["ip", "-n", ns, "route", "get", "192.0.2.1"],
                               capture_output=True, text=True)
        assert probe.returncode != 0 and "unreachable" in probe.stderr.lower()
    forwarding = f"/proc/sys/net/ipv4/conf/{cfg.controller_veth}/forwarding"
    with open(forwarding) as handle:
        assert handle.read().strip() == "0"


def test_nvidia_runtime_via_daemon_json(cfg: LabConfig, running_lab: dict) -> None:
    unit = units(running_lab)[1]  # an AGX Orin on JetPack 6
    addr = unit["address"]
    image = f"{cfg.mirror}/nvidia-ai-iot/vllm:0.14.0-r36.4-tegra-aarch64-cu126-22.04"
    fresh = ssh(cfg, addr, "test -e /etc/docker/daemon.json; echo $?; "
                           "docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}'")
    assert fresh.stdout.splitlines()[0] == "1", "a fresh unit has no daemon.json"
    assert "nvidia" not in fresh.stdout
    daemon_json = json.dumps(
        {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}
    )
    restart = ssh(cfg, addr, f"echo '{daemon_json}' > /etc/docker/daemon.json && "
                             "service docker restart")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    runtimes = ""
    for _ in range(30):
        runtimes = ssh(cfg, addr, "docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}'").stdout
        if "nvidia" in runtimes:
            break
        time.sleep(1)
    assert "nvidia" in runtimes
    pull = ssh(cfg, addr, f"docker pull -q {image}", timeout=300)
    assert pull.returncode == 0, pull.stderr
    with_gpu = ssh(cfg, addr, f"docker run --rm --runtime nvidia --entrypoint cat {image} "
                              "/run/specfleet-lab/gpu.json")
    assert with_gpu.returncode == 0, with_gpu.stderr
    gpu = json.loads(with_gpu.stdout)
    assert gpu["emulated"] is True and gpu["device_class"] == unit["device_class"]
    without = ssh(cfg, addr, f"docker run --rm --entrypoint sh {image} "
                             "-c 'test -e /run/specfleet-lab/gpu.json && echo seen || echo absent'")
    assert without.stdout.strip() == "absent"


def test_unit_dockerd_has_no_daemon_json_flags(cfg: LabConfig, running_lab: dict) -> None:
    """dockerd refuses a directive given both as a flag and in daemon.json, so the unit's
    dockerd gets none a site could set (only Debian's init script's pidfile)."""
    unit = units(running_lab)[2]
    proc = ssh(cfg, unit["address"], "ps -o args= -C dockerd; dockerd --version; python3 --version")
    assert proc.returncode == 0, proc.stderr
    argv, version, python = proc.stdout.splitlines()[:3]
    assert argv.split() == ["/usr/sbin/dockerd", "-p", "/var/run/docker.pid"]
    assert int(version.split()[2].split(".")[0]) >= 23, version  # has --validate
    assert python.startswith("Python 3.13")


def test_dockerd_validate_on_a_unit(cfg: LabConfig, running_lab: dict) -> None:
    unit = units(running_lab)[2]
    # Keys a site may put in daemon.json next to the runtime, incl. networking ones.
    good = json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}},
                       "default-runtime": "nvidia", "iptables": True, "bip": "172.30.0.1/24",
                       "log-opts": {"max-size": "10m"}})
    proc = ssh(cfg, unit["address"],
               f"echo '{good}' > /tmp/good.json && dockerd --validate --config-file=/tmp/good.json 2>&1; "
               "echo rc=$?; echo '{\"no-such-option\": 1}' > /tmp/bad.json; "
               "dockerd --validate --config-file=/tmp/bad.json 2>&1; echo rc=$?; "
               "echo '{\"runtimes\": ' > /tmp/broken.json; "
               "dockerd --validate --config-file=/tmp/broken.json 2>&1; echo rc=$?; "
               "rm -f /tmp/good.json /tmp/bad.json /tmp/broken.json")
    out = proc.stdout
    assert "configuration OK" in out and "rc=0" in out, out
    assert "don't match any configuration option: no-such-option" in out, out
    assert out.count("rc=1") == 2, out


def test_units_may_drop_caches(cfg: LabConfig, running_lab: dict) -> None:
    """`sync; sysctl -w vm.drop_caches=3` (after stopping vLLM) works on a unit; the rest
    of the host-wide /proc/sys stays read-only (rewriting a value with itself)."""
    unit = units(running_lab)[0]
    proc = ssh(cfg, unit["address"], "sync; sysctl -w vm.drop_caches=3")
    assert proc.returncode == 0 and "vm.drop_caches = 3" in proc.stdout, proc.stderr
    other = ssh(cfg, unit["address"], "sysctl -w vm.swappiness=$(cat /proc/sys/vm/swappiness)")
    assert other.returncode != 0 and "permission denied" in other.stderr.lower()


def test_emulator_image_serves_on_a_unit(cfg: LabConfig, running_lab: dict) -> None:
    """The engine image (the vLLM emulator) from the LAN mirror, run as the toolkit runs
    vLLM: nvidia runtime via daemon.json, host network, stand-in model from the store."""
    unit = units(running_lab)[0]  # a Thor: FP4 + EAGLE-3 head
    addr = unit["address"]
    image = f"{cfg.mirror}/vllm/vllm-openai:v0.26.0"
    model, head = "nvidia/Llama-3.1-8B-Instruct-FP4", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    hub = cfg.hf_store_dir / "hub"
    repos = [f"hub/models--{r.replace('/', '--')}" for r in (model, head)]
    assert all((cfg.hf_store_dir / r / "refs" / "main").is_file() for r in repos), hub
    tar = subprocess.Popen(["tar", "-C", str(cfg.hf_store_dir), "-cf", "-", *repos],
                           stdout=subprocess.PIPE)
    copy = subprocess.run(ssh_argv(cfg, addr, "mkdir -p /var/lib/specfleet/huggingface && "
                                              "tar -C /var/lib/specfleet/huggingface -xf -"),
                          stdin=tar.stdout, capture_output=True, timeout=120)
    tar.wait()
    assert copy.returncode == 0, copy.stderr
    daemon_json = json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime",
                                                      "runtimeArgs": []}},
                              "default-runtime": "nvidia"})
    setup = ssh(cfg, addr, f"echo '{daemon_json}' > /etc/docker/daemon.json && "
                           "dockerd --validate --config-file=/etc/docker/daemon.json && "
                           "service docker restart && "
                           "for i in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done; "
                           f"docker pull -q {image}", timeout=300)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    spec = json.dumps({"method": "eagle3", "model": head, "num_speculative_tokens": 5})
    run = ssh(cfg, addr,
              "docker rm -f sflab-test-vllm >/dev/null 2>&1; "
              "docker run -d --name sflab-test-vllm --runtime nvidia --network host --ipc host "
              "-e HF_HUB_OFFLINE=1 -e SPECFLEET_EMULATOR_TIME_SCALE=0.05 "
              "-v /var/lib/specfleet/huggingface:/root/.cache/huggingface "
              f"{image} vllm serve {model} --port 8000 --max-model-len 8192 "
              f"--speculative-config '{spec}'")
    assert run.returncode == 0, run.stderr
    try:
        health = ssh(cfg, addr, "for i in $(seq 120); do "
                                "curl -fsS -o /dev/null http://127.0.0.1:8000/health && echo ok && break; "
                                "sleep 0.5; done; curl -fsS http://127.0.0.1:8000/v1/models", timeout=180)
        logs = ssh(cfg, addr, "docker logs sflab-test-vllm 2>&1 | tail -20").stdout
        assert health.stdout.startswith("ok"), logs
        served = json.loads(health.stdout.split("\n", 1)[1])
        assert [m["id"] for m in served["data"]] == [model]
        assert "this process is NOT vLLM" in ssh(cfg, addr, "docker logs sflab-test-vllm 2>&1 | head -1").stdout
        metrics = ssh(cfg, addr, "curl -fsS http://127.0.0.1:8000/metrics").stdout
        assert "vllm:spec_decode_num_drafts_total" in metrics
    finally:
        ssh(cfg, addr, "docker rm -f sflab-test-vllm")


def test_ansible_ping(cfg: LabConfig, running_lab: dict, ansible_bin) -> None:
    proc = subprocess.run(
        [str(ansible_bin), "-i", str(cfg.inventory_dir), "all", "-m", "ping"],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={"ANSIBLE_HOST_KEY_CHECKING": "False", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(units(running_lab))


def test_up_again_changes_nothing(cfg: LabConfig, running_lab: dict) -> None:
    def container_ids() -> list[str]:
        return docker(cfg, ["ps", "-aq", "--no-trunc"]).stdout.split()

    ids = container_ids()
    state_before = cfg.state_file.read_text()
    result = lab.up(cfg, "mixed", len(units(running_lab)))
    assert result["changed"] is False
    assert container_ids() == ids
    assert cfg.state_file.read_text() == state_before


def test_down_leaves_nothing_behind(cfg: LabConfig, running_lab: dict) -> None:
    result = lab.down(cfg)
    assert result["changed"] is True and result["leftovers"] == []
    assert not cfg.state_file.exists()
    # Processes from earlier sessions may still be exiting (e.g. ssh masters); give the
    # kernel a moment, then compare with the snapshot from before `up`.
    time.sleep(1)
    after = snapshot()
    before = running_lab["before"]
    for key in before:
        assert after[key] == before[key], f"{key}: +{after[key] - before[key]} -{before[key] - after[key]}"
    assert lab.down(cfg)["changed"] is False  # safe to re-run
