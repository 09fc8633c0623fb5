"""Stock units (issue 16): `lab up --profile stock --units 3` gives units as flashed.

Login `nvidia` with a sudo password (vaulted in the lab inventory), no root login, no Docker,
Docker SDK or container toolkit, host keys checked against lab/build/known_hosts, and a LAN
apt mirror (with and without the lab's EMULATED nvidia-container-toolkit) the units can use.

The module needs the lab to itself: a lab that is up (another profile) is taken down first
(and noted), the stock lab is taken down at the end. Tests run in file order against it.
Without root they skip, unless CI=true: then they fail.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import quickstart
import yaml
from labtools import REPO
from specfleet_lab import aptmirror, inventory, lab
from specfleet_lab.config import LabConfig

from tests import hub_standin
from tests.conftest import MODELS_STATUS, lab_api_key, lab_decision, recap, trust_lab_host_keys, unavailable

pytestmark = pytest.mark.lab
UNITS = 3
NAMES = ["thor-01", "agxorin-jp6-01", "agxorin-jp72-01"]


def site_lane(test):
    """site.yml on the stock units (~4.5 min here): a slow lane that CI runs, which keeps the
    default run under 30 minutes; the rest of the module (~30 s) is in the default run."""
    return pytest.mark.slow(pytest.mark.ci(test))


@pytest.fixture(scope="module")
def stock_lab(cfg: LabConfig) -> Iterator[dict]:
    if os.geteuid() != 0:
        unavailable("the lab needs root (network namespaces, its own dockerd, iptables)")
    previous = lab.status(cfg)
    if previous["lab"] != "down":
        # Noted in the report (-rA shows it): this module needs a stock lab of its own.
        print(f"\ntest_stock_lab: taking down the {previous.get('profile')} lab that was up", file=sys.stderr)
        lab.down(cfg)
    started = time.monotonic()
    result = lab.up(cfg, "stock", UNITS)
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    print(f"\nstock lab up: {result}", file=sys.stderr)
    try:
        yield {"up": result, "status": lab.status(cfg), "took_down": previous.get("profile")}
    finally:
        # known_hosts keeps the units' current keys (thor-01's new ones after the rekey test,
        # trusted again there): each unit name keeps its keys for the next lab.
        lab.down(cfg)


def units(info: dict) -> list[dict]:
    return info["status"]["units"]


def address(info: dict, name: str) -> str:
    return next(u["address"] for u in units(info) if u["name"] == name)


def ssh(cfg: LabConfig, user: str, host: str, command: str, stdin: str | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess:
    """ssh as `user` with the lab key; host keys checked against the lab's known_hosts, under
    the unit's name as the inventory does (HostKeyAlias)."""
    name = next(u["name"] for u in lab.status(cfg)["units"] if u["address"] == host)
    argv = ["ssh", "-i", str(cfg.ssh_key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={cfg.known_hosts}", "-o", f"HostKeyAlias={name}",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10", f"{user}@{host}", command]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def ansible(ansible_bin: Path, *args: str, fresh: bool = False) -> subprocess.CompletedProcess:
    """`ansible -i inventory/lab ...` from the checkout, as a user runs it (ansible.cfg's
    vault client finds the become password). fresh: no reuse of ssh master connections
    (ansible.cfg's ControlPersist): a reused connection skips the host key check."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    env.pop("ANSIBLE_CONFIG", None)
    if fresh:
        env["ANSIBLE_SSH_ARGS"] = "-o ControlMaster=no -o ControlPath=none"
    return subprocess.run([str(ansible_bin), "-i", "inventory/lab", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def per_host(output: str) -> dict[str, str]:
    """host -> first output line of `ansible ... -m command` (`host | CHANGED | rc=0 >>`)."""
    found: dict[str, str] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if " | " in line and ">>" in line and i + 1 < len(lines):
            found[line.split(" | ")[0]] = lines[i + 1].strip()
    return found


def test_stock_lab_is_up(cfg: LabConfig, stock_lab: dict) -> None:
    status = stock_lab["status"]
    assert status["lab"] == "up" and status["stock"] is True and status["profile"] == "stock"
    assert [u["name"] for u in units(stock_lab)] == NAMES
    assert all(u["login"] == "nvidia" and u["state"] == "running" for u in units(stock_lab))
    assert status["apt_mirror"] == f"http://{cfg.controller_address}:{cfg.apt_mirror_port}/debian"
    hosts = (cfg.inventory_dir / "hosts.yml").read_text()
    assert "StrictHostKeyChecking" not in hosts and "/dev/null" not in hosts
    assert (cfg.inventory_dir / "group_vars/all/vault.yml").read_bytes().startswith(b"$ANSIBLE_VAULT;1.2;AES256;lab")
    for path in (cfg.unit_password_file, cfg.vault_password_file):
        assert path.stat().st_mode & 0o777 == 0o600


def test_host_keys_are_checked(cfg: LabConfig, stock_lab: dict, ansible_bin: Path) -> None:
    cfg.known_hosts.parent.mkdir(parents=True, exist_ok=True)
    cfg.known_hosts.write_text("")
    proc = ansible(ansible_bin, "all", "-m", "command", "-a", "whoami", fresh=True)
    assert proc.returncode != 0
    assert "Host key verification failed" in proc.stdout + proc.stderr, proc.stdout[-2000:]


def test_ansible_logs_in_as_nvidia(cfg: LabConfig, stock_lab: dict, ansible_bin: Path) -> None:
    trust_lab_host_keys()
    proc = ansible(ansible_bin, "all", "-m", "command", "-a", "whoami")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert per_host(proc.stdout) == {name: "nvidia" for name in NAMES}, proc.stdout


def test_units_are_stock(cfg: LabConfig, stock_lab: dict) -> None:
    for unit in units(stock_lab):
        proc = ssh(cfg, "nvidia", unit["address"],
                   "id; python3 -c 'import docker' 2>&1; echo docker-sdk=$?; command -v docker dockerd; "
                   "echo cli=$?; test -e /usr/bin/nvidia-container-runtime; echo shim=$?; "
                   "python3 -c 'import apt' && echo python3-apt=ok; "
                   "sudo -n true 2>&1; echo sudo=$?; cat /etc/apt/sources.list")
        out = proc.stdout
        assert proc.returncode == 0, proc.stderr
        assert "uid=1000(nvidia)" in out and "(sudo)" in out and "(video)" in out
        assert "docker-sdk=1" in out and "No module named 'docker'" in out
        assert "cli=1" in out and "shim=1" in out and "python3-apt=ok" in out
        # sudo wants the password (Debian's and Ubuntu's `%sudo ALL=(ALL:ALL) ALL`).
        assert "sudo=1" in out and "password is required" in out
        # Debian's own sources, unreachable from the lab: the mirror is not configured.
        assert "deb.debian.org" in out and str(cfg.apt_mirror_port) not in out


def test_root_cannot_log_in(cfg: LabConfig, stock_lab: dict) -> None:
    for unit in units(stock_lab):
        proc = ssh(cfg, "root", unit["address"], "true", timeout=60)
        assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stderr


def test_no_password_login_over_ssh(cfg: LabConfig, stock_lab: dict) -> None:
    proc = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={cfg.known_hosts}", "-o", "HostKeyAlias=thor-01",
         "-o", "PubkeyAuthentication=no",
         "-o", "PreferredAuthentications=password,keyboard-interactive", f"nvidia@{units(stock_lab)[0]['address']}",
         "true"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 255 and "Permission denied (publickey)" in proc.stderr, proc.stderr


def test_become_uses_the_vaulted_password(cfg: LabConfig, stock_lab: dict, ansible_bin: Path) -> None:
    proc = ansible(ansible_bin, "all", "-b", "-m", "command", "-a", "whoami")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert per_host(proc.stdout) == {name: "root" for name in NAMES}, proc.stdout


def apt_script(uri: str, suite: str, then: str) -> str:
    """apt-get against the mirror only, with private lists/cache dirs in a scratch
    directory: the unit's own apt configuration stays untouched (the bootstrap role
    configures the mirror, not the lab)."""
    return f"""set -e
d=$(mktemp -d /tmp/sflab-apt-XXXXXX); chmod 755 "$d"
mkdir -p "$d/lists/partial" "$d/archives/partial" "$d/parts"
chown _apt "$d/lists/partial" "$d/archives/partial" 2>/dev/null || true
cp /tmp/sflab-mirror-key.asc "$d/key.asc"; chmod 644 "$d/key.asc"
echo "deb [signed-by=$d/key.asc] {uri} {suite} main" > "$d/sources.list"
apt() {{ apt-get -q -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts="$d/parts" \\
  -o Dir::State::Lists="$d/lists" -o Dir::Cache::Archives="$d/archives" "$@"; }}
apt update
{then}
"""


def sudo_on(cfg: LabConfig, host: str, script: str, timeout: float = 600) -> subprocess.CompletedProcess:
    password = cfg.unit_password_file.read_text().strip()
    return ssh(cfg, "nvidia", host, f"sudo -S -p '' sh -c {shlex.quote(script)}", stdin=password + "\n",
               timeout=timeout)


def put_key(cfg: LabConfig, host: str) -> None:
    key = aptmirror.key_file(cfg).read_text()
    proc = ssh(cfg, "nvidia", host, "cat > /tmp/sflab-mirror-key.asc", stdin=key)
    assert proc.returncode == 0, proc.stderr


def test_mirror_serves_the_toolkit(cfg: LabConfig, stock_lab: dict) -> None:
    host = address(stock_lab, "thor-01")
    put_key(cfg, host)
    uri = aptmirror.uri(cfg)
    proc = sudo_on(cfg, host, apt_script(uri, "specfleet-lab", """
apt install --download-only -y nvidia-container-toolkit
ls "$d/archives"
# What the bootstrap installs resolves from the mirror alone (recommends included).
apt install -s docker.io docker-cli python3-docker rsync nvidia-container-toolkit | grep -c '^Inst '
"""))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "nvidia-container-toolkit_1.19.1-1~specfleetlab1_all.deb" in proc.stdout
    assert "W:" not in proc.stderr and "E:" not in proc.stderr, proc.stderr


def test_mirror_without_the_toolkit(cfg: LabConfig, stock_lab: dict) -> None:
    host = address(stock_lab, "agxorin-jp6-01")
    put_key(cfg, host)
    uri = aptmirror.uri(cfg, aptmirror.WITHOUT_TOOLKIT)
    proc = sudo_on(cfg, host, apt_script(uri, "specfleet-lab", """
apt-cache -o Dir::State::Lists="$d/lists" -o Dir::Etc::SourceList="$d/sources.list" \\
  -o Dir::Etc::SourceParts="$d/parts" policy docker.io | grep -q Candidate
if apt install --download-only -y nvidia-container-toolkit; then echo FOUND; else echo NOT-FOUND; fi
"""))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "NOT-FOUND" in proc.stdout and "Unable to locate package nvidia-container-toolkit" in proc.stderr


def test_docker_installed_from_the_mirror_starts_and_is_supervised(cfg: LabConfig, stock_lab: dict) -> None:
    """What the bootstrap will do, by hand: docker.io's postinst starts dockerd (invoke-rc.d,
    allowed by the unit's policy-rc.d), the lab's init restarts it when it dies, and the
    toolkit's runtime is the lab's emulation."""
    host = address(stock_lab, "agxorin-jp72-01")
    put_key(cfg, host)
    proc = sudo_on(cfg, host, apt_script(aptmirror.uri(cfg), "specfleet-lab", """
DEBIAN_FRONTEND=noninteractive apt install -y docker.io docker-cli python3-docker nvidia-container-toolkit
for i in $(seq 60); do docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && break; sleep 1; done
echo server=$(docker version --format '{{.Server.Version}}')
python3 -c 'import docker; print("sdk", docker.__version__)'
nvidia-container-runtime --version | head -1
kill -9 "$(cat /var/run/docker.pid)"
sleep 1
for i in $(seq 60); do docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && break; sleep 1; done
echo restarted=$(docker version --format '{{.Server.Version}}')
"""), timeout=900)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "server=2" in out and "restarted=2" in out and "sdk " in out, out[-2000:]
    assert "specfleet lab EMULATION shim" in out


def site(ansible_bin: Path, runs: Path, *extra: str) -> subprocess.CompletedProcess:
    """`ansible-playbook -i inventory/lab playbooks/site.yml`, as the README runs it: no flags,
    the become password from the lab's Vault."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "SPECFLEET_RUNS_DIR": str(runs)}
    env.pop("ANSIBLE_CONFIG", None)
    return subprocess.run([str(ansible_bin.with_name("ansible-playbook")), "-i", "inventory/lab",
                           "playbooks/site.yml", *extra], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=3600, check=False)


def decisions(run_dir: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in (run_dir / "units").glob("*.json")}


@pytest.fixture(scope="module")
def rolled_out(stock_lab: dict, ansible_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """site.yml twice on the stock units: the bootstrap installs from the mirror, then the
    whole mission runs as `nvidia` with become."""
    trust_lab_host_keys()
    # The units still without the engine (a test above installed it on one by hand).
    lacking = {unit["name"] for unit in units(stock_lab)
               if ssh(LabConfig(), "nvidia", unit["address"], "dpkg-query -W docker.io").returncode != 0}
    runs = tmp_path_factory.mktemp("runs")
    first = site(ansible_bin, runs)
    first_run = max(runs.iterdir())
    second = site(ansible_bin, runs)
    return {"first": first, "second": second, "first_run": first_run, "runs": runs, "lacking": lacking}


@site_lane
def test_site_installs_from_the_mirror_and_rolls_out(cfg: LabConfig, stock_lab: dict, rolled_out: dict) -> None:
    first = rolled_out["first"]
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-2000:]
    # The units that lacked the engine installed it (the bootstrap's install task changed them).
    assert "thor-01" in rolled_out["lacking"]
    install = next(chunk for chunk in first.stdout.split("TASK [")
                   if chunk.startswith("specfleet.fleet.specfleet_bootstrap : Install them]"))
    assert {name for name in NAMES if f"changed: [{name}]" in install} == rolled_out["lacking"], install
    # The stock units reach the decisions the root-login lab's units of the same kinds reach
    # (tests/conftest.py LAB_DECISIONS): EAGLE-3 kept on AGX Orin and on Thor.
    records = decisions(rolled_out["first_run"])
    assert {name: (r["decision"], r["method"]) for name, r in records.items()} == {
        name: (lab_decision(name), "eagle3") for name in NAMES}, {name: r["reasons"] for name, r in records.items()}
    for unit in units(stock_lab):
        proc = ssh(cfg, "nvidia", unit["address"],
                   "dpkg-query -W -f '${Package} ${db:Status-Status}\\n' docker.io nvidia-container-toolkit "
                   "python3-docker rsync; cat /etc/apt/sources.list.d/specfleet-mirror.list")
        assert proc.returncode == 0, proc.stderr
        assert [line.split()[1] for line in proc.stdout.splitlines()[:4]] == ["installed"] * 4, proc.stdout
        assert aptmirror.uri(cfg) in proc.stdout


@site_lane
def test_second_site_run_changes_nothing_on_the_units(rolled_out: dict) -> None:
    second = rolled_out["second"]
    assert second.returncode == 0, second.stdout[-6000:]
    # Only the controller writes (the run's report folder, `changed: [unit -> localhost]`).
    on_units = re.findall(r"^changed: \[([^\]\s]+)\]", second.stdout, re.MULTILINE)
    assert on_units == [], second.stdout[-6000:]
    assert all(recap(second.stdout)[name]["failed"] == 0 for name in NAMES)


QUICKSTART_UNIT = "thor-01"
QUICKSTART_REPOS = ("nvidia/Llama-3.1-8B-Instruct-FP4", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")


@site_lane
def test_the_readmes_real_fleet_quick_start_as_an_unprivileged_user(
        cfg: LabConfig, stock_lab: dict, rolled_out: dict) -> None:
    """Every block of the README's "Your own fleet", as written, by a user without root: the
    locked controller packages (the venv then equal to requirements/controller.txt), the
    collection that came with the package, the event folder's own ansible.cfg, inventory and
    vaulted sudo password, host keys into the user's known_hosts, the stores filled by
    `specfleet store`, site.yml by its FQCN. The unit was rolled out by the checkout's site.yml
    above, from the lab's own store: the user's store holds the same files (plus the Hub's tree
    listing), and the earlier decision stands (a re-run does not measure again)."""
    steps = quickstart.blocks((REPO / "README.md").read_text())
    assert [(b.language, b.file) for b in steps] == [
        ("sh", None), ("ini", "~/event/ansible.cfg"), ("yaml", "~/event/inventory.yml"), ("sh", None),
        ("sh", None), ("sh", None)], steps
    install, config, readme_inventory, trust, fill, evening = steps
    lab_vars = yaml.safe_load(inventory.all_vars_file(cfg).read_text())
    store = Path(lab_vars["specfleet_hf_cache_store"])
    hub_repos = {repo_id: hub_standin.repo_from_hub_cache(store / "hub" / f"models--{repo_id.replace('/', '--')}",
                                                          repo_id) for repo_id in QUICKSTART_REPOS}
    user = quickstart.fresh_user()
    home = Path(user.pw_dir)
    try:
        quickstart.PIP_CACHE.mkdir(parents=True, exist_ok=True)
        quickstart.give(quickstart.PIP_CACHE, user)
        clone = home / "specfleet"
        quickstart.copy_checkout(clone, user)
        quickstart.install_ssh_key(cfg.ssh_key, user)
        with hub_standin.serving(hub_repos) as (hub, endpoint), \
                quickstart.serving_directory(Path(lab_vars["specfleet_tiktoken_source_dir"])) as encodings:
            env = quickstart.environment(user, HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1",
                                         HF_HUB_DISABLE_PROGRESS_BARS="1")

            def run(block: quickstart.Block, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess:
                script = re.sub(r"^(specfleet store tiktoken .*)$", rf"\1 --url-prefix {encodings}", block.text,
                                flags=re.M)
                result = quickstart.run_as(user, script, cwd, env, stdin)
                assert result.returncode == 0, block.text + result.stdout[-6000:] + result.stderr[-4000:]
                return result

            whoami = quickstart.run_as(user, "id -u", home, env)
            assert whoami.stdout.strip() == str(user.pw_uid) != "0"
            run(install, clone)
            # The venv the README makes is the lock, package for package (`pip freeze --all`).
            frozen = quickstart.run_as(user, "python scripts/lib/lockfile.py check requirements/controller.txt",
                                       clone, env)
            assert frozen.returncode == 0, frozen.stderr
            # One install: the collection came with the package, into the venv's site-packages.
            listed = quickstart.run_as(user, "ansible-galaxy collection list specfleet.fleet", home, env)
            site = rf"{re.escape(str(home))}/\.venvs/specfleet/lib/python3\.\d+/site-packages"
            assert re.search(rf"^# {site}/ansible_collections$", listed.stdout, re.M), listed.stdout

            # The event folder: the README's files, and the lab's own settings beside them.
            event = home / "event"
            (event / "group_vars" / "all").mkdir(parents=True)
            (event / "host_vars").mkdir()
            (event / "ansible.cfg").write_text(config.text)
            units = {QUICKSTART_UNIT: address(stock_lab, QUICKSTART_UNIT)}
            (event / "inventory.yml").write_text(quickstart.event_inventory(readme_inventory.text, units))
            lab_all, lab_host = quickstart.lab_layer(cfg.inventory_dir, QUICKSTART_UNIT)
            (event / "group_vars" / "all" / "lab.yml").write_text(yaml.safe_dump(lab_all))
            (event / "host_vars" / f"{QUICKSTART_UNIT}.yml").write_text(yaml.safe_dump(lab_host))
            quickstart.give(event, user)

            password = cfg.unit_password_file.read_text().strip()
            trusted = run(trust, home, stdin=password + "\n")
            vaulted = (event / "group_vars" / "all" / "vault.yml").read_text()
            assert vaulted.startswith("ansible_become_password: !vault |") and password not in vaulted
            line = next(line for line in trusted.stdout.splitlines() if line.startswith(QUICKSTART_UNIT + " "))
            assert line.split()[1] == "added" and trusted.stdout.count("SHA256:") >= 3, trusted.stdout
            known = subprocess.run(["ssh-keygen", "-F", units[QUICKSTART_UNIT], "-f", str(home / ".ssh/known_hosts")],
                                   capture_output=True, text=True, check=False)
            assert known.returncode == 0, known.stdout + known.stderr  # hashed names, as Debian's ssh_config asks

            filled = run(fill, home)
            assert all(repo_id in filled.stdout for repo_id in QUICKSTART_REPOS), filled.stdout[-4000:]
            assert hub.count("hub", "/resolve/") > 0
            mine = event / "files" / "hf-store"
            for repo_id in QUICKSTART_REPOS:
                name = f"models--{repo_id.replace('/', '--')}"
                got, lab_made = (json.loads((where / "manifests" / f"{name}.json").read_text())
                                 for where in (mine, store))
                # The lab's files, byte for byte, plus huggingface_hub's cached tree listing of the
                # commit (trees/<commit>.json, read by offline lookups), which the lab's store lacks.
                extra = set(got["files"]) - set(lab_made["files"])
                assert extra == {f"trees/{hub_repos[repo_id].commit}.json"}, (repo_id, extra)
                assert {path: got["files"][path] for path in lab_made["files"]} == lab_made["files"], repo_id
                assert got["symlinks"] == lab_made["symlinks"], repo_id
            tiktoken_dir = Path(lab_vars["specfleet_tiktoken_source_dir"])
            assert {p.name: p.read_bytes() for p in (event / "files" / "tiktoken").iterdir()} == {
                p.name: p.read_bytes() for p in tiktoken_dir.iterdir() if p.suffix == ".tiktoken"}

            evening_run = run(evening, home)
        out = evening_run.stdout
        assert recap(out)[QUICKSTART_UNIT]["failed"] == 0, out[-4000:]
        run_dir = max((event / "runs").iterdir())
        record = decisions(run_dir)[QUICKSTART_UNIT]
        assert (record["decision"], record["method"]) == (lab_decision(QUICKSTART_UNIT), "eagle3"), record
        # The report, as `specfleet report --latest --format md` printed it after the playbook, then
        # `specfleet status`: the unit's release record (0600, root's) read through become.
        after = out[out.rindex("PLAY RECAP"):].split("\n", 2)[2]
        assert (run_dir / "report.md").is_file() and QUICKSTART_UNIT in after
        # Kept: status shows the unit serving speculatively, read from its record.
        assert "speculative" in after and "(record" not in after and "UNREACHABLE" not in after, after[-3000:]
        # The event's first run made its own API key into Vault beside the inventory, and the unit,
        # decided before under the lab's key, now serves /v1 with the event's key only.
        key_file = event / ".specfleet" / "api_key.yml"
        assert key_file.read_text().startswith("$ANSIBLE_VAULT;"), key_file
        viewed = quickstart.run_as(user, f"ansible-vault view {key_file}", event, env)
        assert viewed.returncode == 0, viewed.stderr
        event_key = yaml.safe_load(viewed.stdout)["specfleet_api_key"]
        assert event_key not in out and event_key != lab_api_key()
        unit = address(stock_lab, QUICKSTART_UNIT)
        statuses = [ssh(cfg, "nvidia", unit, MODELS_STATUS, stdin=f"Authorization: Bearer {key}\n").stdout
                    for key in (event_key, lab_api_key())]
        assert statuses == ["200", "401"], statuses
    finally:
        quickstart.remove_user()


@site_lane
def test_a_unit_whose_mirror_lacks_the_toolkit_fails_in_prepare_and_the_others_go_on(
        cfg: LabConfig, stock_lab: dict, rolled_out: dict, ansible_bin: Path) -> None:
    host = "agxorin-jp72-01"
    # The unit loses its toolkit and is pointed at a mirror without one (its own host_vars).
    purge = sudo_on(cfg, address(stock_lab, host), "dpkg --purge nvidia-container-toolkit")
    assert purge.returncode == 0, purge.stderr
    host_vars = cfg.inventory_dir / "host_vars" / f"{host}.yml"
    host_vars.parent.mkdir(exist_ok=True)
    mirror = {**yaml.safe_load(inventory.all_vars_file(cfg).read_text())["specfleet_bootstrap_apt_mirror"],
              "uri": aptmirror.uri(cfg, aptmirror.WITHOUT_TOOLKIT)}
    host_vars.write_text(yaml.safe_dump({"specfleet_bootstrap_apt_mirror": mirror}))
    try:
        result = site(ansible_bin, rolled_out["runs"])
    finally:
        host_vars.unlink()
    assert result.returncode == 2, result.stdout[-6000:]
    run_dir = max(rolled_out["runs"].iterdir())
    records = decisions(run_dir)
    failed = records[host]
    assert failed["decision"] == "failed", failed
    reason = json.dumps(failed)
    assert "cannot install nvidia-container-toolkit" in reason and "debian-no-toolkit" in reason, reason
    assert {name: records[name]["decision"] for name in NAMES if name != host} == {
        name: lab_decision(name) for name in NAMES if name != host}


def test_rekeyed_unit_is_refused_until_trusted_again(cfg: LabConfig, stock_lab: dict, ansible_bin: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "specfleet_lab.cli", "rekey", "thor-01"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    new_lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in new_lines] == ["thor-01"] * 3, proc.stdout
    assert not any(line.split()[2] in cfg.known_hosts.read_text() for line in new_lines)
    # The host-key step refuses the unit, naming it, and trusts nothing new.
    before = cfg.known_hosts.read_text()
    step = subprocess.run([sys.executable, "-m", "specfleet.cli", "hostkeys", "-i", "inventory/lab"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert step.returncode == 1, step.stdout + step.stderr
    assert "not trusted: thor-01" in step.stderr, step.stderr
    assert "CHANGED" in next(line for line in step.stdout.splitlines() if line.startswith("thor-01 ")), step.stdout
    assert cfg.known_hosts.read_text() == before
    refused = ansible(ansible_bin, "thor-01", "-m", "command", "-a", "whoami", fresh=True)
    assert refused.returncode != 0
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stdout + refused.stderr, refused.stdout[-2000:]
    # The other units keep their keys.
    others = ansible(ansible_bin, "all:!thor-01", "-m", "command", "-a", "whoami", fresh=True)
    assert others.returncode == 0, others.stdout[-2000:]
    # What the refusal says to do once the unit is known to have been re-flashed.
    subprocess.run(["ssh-keygen", "-R", "thor-01", "-f", str(cfg.known_hosts)], capture_output=True, check=True)
    trust_lab_host_keys()
    again = ansible(ansible_bin, "thor-01", "-m", "command", "-a", "whoami", fresh=True)
    assert again.returncode == 0 and per_host(again.stdout) == {"thor-01": "nvidia"}, again.stdout[-2000:]


def test_down_stops_the_mirror_and_keeps_host_keys(cfg: LabConfig, stock_lab: dict) -> None:
    keys = {name: (cfg.host_keys_dir / name / "ssh_host_ed25519_key.pub").read_text() for name in NAMES}
    result = lab.down(cfg)
    assert result["leftovers"] == []
    assert any(p.startswith("apt-mirror(") for p in result["removed"]["processes"]), result["removed"]
    assert not (cfg.inventory_dir / "hosts.yml").exists() and not (cfg.inventory_dir / "group_vars/all").exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(aptmirror.uri(cfg) + "/dists/specfleet-lab/InRelease", timeout=2)
    # Kept for the next `lab up`: a known_hosts entry stays valid.
    assert {name: (cfg.host_keys_dir / name / "ssh_host_ed25519_key.pub").read_text() for name in NAMES} == keys
    # Up again, the same units at the same addresses, for the module's tests that run after this
    # one (its site lanes, when the module runs alone).
    lab.up(cfg, "stock", UNITS)
    assert [(u["name"], u["address"]) for u in lab.status(cfg)["units"]] == [
        (u["name"], u["address"]) for u in units(stock_lab)]
