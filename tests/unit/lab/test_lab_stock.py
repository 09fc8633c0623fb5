"""Stock lab units (issue 16): inventory for stock vs root-login units, the vaulted become
password and its client, persisted host keys and known_hosts lines, the unit tar's owners,
profiles and state. No lab needed."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from specfleet_lab import hostkeys, images, inventory, lab, state
from specfleet_lab.config import LabConfig
from specfleet_lab.fixtures import ROOT_LOGIN, STOCK_LOGIN, files_tar, unit_tar
from specfleet_lab.profiles import Unit, expand, load_kinds, profile_is_stock

REPO = Path(__file__).resolve().parents[3]
CLIENT = REPO / "lab" / "vault-password-client"
KINDS = load_kinds(LabConfig().profiles_dir)
MIRROR = {"uri": "http://10.213.77.1:3142/debian", "suite": "specfleet-lab", "components": ["main"],
          "key": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQGNBGk\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"}


def cfg_in(tmp_path: Path) -> LabConfig:
    """A config whose build, inventory and state live under tmp_path (recipes stay the repo's)."""
    return LabConfig(repo=tmp_path, var_dir=tmp_path / "var")


def record(name: str, address: str, login: str) -> dict:
    return {"name": name, "kind_id": "thor-t5000-r38.2", "device_class": "thor", "address": address,
            "container": f"sflab-{name}", "volume": f"sflab-{name}-docker", "netns": f"sflab-{name}",
            "login": login}


def test_stock_profile_and_flag():
    cfg = LabConfig()
    assert profile_is_stock(cfg.profiles_dir, "stock")
    assert not profile_is_stock(cfg.profiles_dir, "mixed") and not profile_is_stock(cfg.profiles_dir, "workshop")
    # Same kinds as the mixed fleet.
    assert [u.kind_id for u in expand(cfg, "stock", 9)] == [u.kind_id for u in expand(cfg, "mixed", 9)]


def test_state_keeps_the_stock_setting(tmp_path):
    path = tmp_path / "state.json"
    state.save(path, state.LabState(profile="mixed", stock=True))
    assert state.load(path).stock is True
    # A state written before stock units existed loads as root-login.
    path.write_text('{"profile": "mixed", "units_requested": 3}')
    assert state.load(path).stock is False


def test_ssh_checks_host_keys_against_the_lab_known_hosts(tmp_path):
    cfg = cfg_in(tmp_path)
    args = inventory.ssh_common_args(cfg, "thor-01")
    assert f"UserKnownHostsFile={tmp_path}/lab/build/known_hosts" in args
    # Under the unit's name: lab addresses are reused by every profile, names are not.
    assert "HostKeyAlias=thor-01" in args
    assert "StrictHostKeyChecking" not in args and "/dev/null" not in args


def test_root_and_stock_host_vars(tmp_path):
    cfg = cfg_in(tmp_path)
    root = inventory.host_vars(cfg, record("thor-01", "10.213.77.10", "root"))
    stock = inventory.host_vars(cfg, record("thor-02", "10.213.77.11", "nvidia"))
    assert root["ansible_user"] == "root" and "specfleet_lab_stock" not in root
    assert stock["ansible_user"] == "nvidia" and stock["specfleet_lab_stock"] is True
    assert "ansible_become_password" not in stock  # only in the vault
    # A record from before stock units (no login) is a root-login unit.
    old = record("thor-03", "10.213.77.12", "root")
    del old["login"]
    assert inventory.host_vars(cfg, old)["ansible_user"] == "root"


def test_group_vars_name_the_apt_mirror(tmp_path):
    data = inventory.group_vars_all(cfg_in(tmp_path), "stock", None, MIRROR)
    assert data["specfleet_bootstrap_apt_mirror"] == MIRROR
    assert data["specfleet_lab_apt_mirror_no_toolkit"] == "http://10.213.77.1:3142/debian-no-toolkit"
    text = inventory.dump_with_comments(data, inventory.ALL_COMMENTS)
    # The armored key is a literal block, read back unchanged.
    assert "key: |" in text
    assert yaml.safe_load(text)["specfleet_bootstrap_apt_mirror"]["key"] == MIRROR["key"]
    assert "EMULATED nvidia-container-toolkit" in text


def test_root_lab_inventory_keeps_all_yml(tmp_path):
    cfg = cfg_in(tmp_path)
    inventory.write_inventory(cfg, "mixed", [record("thor-01", "10.213.77.10", "root")], None, MIRROR)
    group_vars = cfg.inventory_dir / "group_vars"
    assert (group_vars / "all.yml").is_file() and not (group_vars / "all").exists()
    assert inventory.all_vars_file(cfg) == group_vars / "all.yml"
    assert "known_hosts" in (cfg.inventory_dir / "hosts.yml").read_text().splitlines()[2]
    inventory.remove_inventory(cfg)
    assert not cfg.inventory_dir.exists()


def test_stock_lab_inventory_vaults_the_become_password(tmp_path):
    from ansible.parsing.vault import VaultLib, VaultSecret

    cfg = cfg_in(tmp_path)
    # A root-login lab's all.yml must not survive next to all/ (Ansible would ignore it).
    inventory.write_inventory(cfg, "mixed", [record("thor-01", "10.213.77.10", "root")], None, MIRROR)
    inventory.write_inventory(cfg, "stock", [record("thor-01", "10.213.77.10", "nvidia")], None, MIRROR,
                              become_password="s3cret-sudo", vault_password="vault-pw")
    group_vars = cfg.inventory_dir / "group_vars"
    assert not (group_vars / "all.yml").exists()
    assert inventory.all_vars_file(cfg) == group_vars / "all" / "main.yml"
    main = yaml.safe_load((group_vars / "all" / "main.yml").read_text())
    assert main["specfleet_bootstrap_apt_mirror"]["uri"] == MIRROR["uri"]
    vault = group_vars / "all" / "vault.yml"
    raw = vault.read_bytes()
    assert raw.startswith(b"$ANSIBLE_VAULT;1.2;AES256;lab") and b"s3cret" not in raw
    assert vault.stat().st_mode & 0o777 == 0o600
    plain = VaultLib([("lab", VaultSecret(b"vault-pw"))]).decrypt(raw)
    assert yaml.safe_load(plain) == {"ansible_become_password": "s3cret-sudo"}
    with pytest.raises(ValueError):
        inventory.write_inventory(cfg, "stock", [], become_password="x")
    inventory.remove_inventory(cfg)
    assert not cfg.inventory_dir.exists()


def test_ansible_reads_the_vaulted_become_password(tmp_path):
    """ansible-inventory with the vault client resolves the stock unit's become password."""
    cfg = cfg_in(tmp_path)
    inventory.write_inventory(cfg, "stock", [record("thor-01", "10.213.77.10", "nvidia")], None, MIRROR,
                              become_password="s3cret-sudo", vault_password="vault-pw")
    client = tmp_path / "client"
    client.write_text("#!/bin/sh\necho vault-pw\n")
    client.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_CONFIG"] = str(tmp_path / "none.cfg")
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(cfg.inventory_dir),
         "--vault-id", f"lab@{client}", "--host", "thor-01"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    hostvars = yaml.safe_load(proc.stdout)
    assert hostvars["ansible_become_password"] == "s3cret-sudo"
    assert hostvars["ansible_user"] == "nvidia"
    assert hostvars["specfleet_bootstrap_apt_mirror"]["suite"] == "specfleet-lab"


def run_client(script: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=30)


def test_vault_client_prints_the_lab_password_or_a_placeholder(tmp_path):
    assert os.access(CLIENT, os.X_OK)
    # A copy beside a build/ of its own (the client reads build/vault-password next to it).
    script = tmp_path / "vault-password-client"
    script.write_text(CLIENT.read_text())
    script.chmod(0o755)
    no_lab = run_client(script, "--vault-id", "lab")
    assert no_lab.returncode == 0 and no_lab.stdout == "no-lab-is-up\n"
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "vault-password").write_text("the-lab-password\n")
    up = run_client(script, "--vault-id", "lab")
    assert up.returncode == 0 and up.stdout == "the-lab-password\n"
    other = run_client(script, "--vault-id", "prod")
    assert other.returncode == 0 and other.stdout == "no-lab-is-up\n"


def test_ansible_cfg_names_the_client():
    text = (REPO / "ansible.cfg").read_text()
    assert "vault_identity_list = lab@lab/vault-password-client" in text.splitlines()


def test_host_keys_persist_per_unit_and_rekey_replaces_them(tmp_path):
    cfg = cfg_in(tmp_path)
    files, private = hostkeys.unit_files(cfg, "thor-01")
    assert set(private) == {f"/etc/ssh/ssh_host_{t}_key" for t in hostkeys.KEY_TYPES}
    assert set(files) == private | {f"{p}.pub" for p in private}
    directory = cfg.host_keys_dir / "thor-01"
    assert directory.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in directory.iterdir())
    before = hostkeys.public_keys(cfg, "thor-01")
    assert [k.split()[0] for k in before] == ["ssh-rsa", "ecdsa-sha2-nistp256", "ssh-ed25519"]
    assert hostkeys.unit_files(cfg, "thor-01")[0] == files  # made once
    hostkeys.regenerate(cfg, "thor-01")
    after = hostkeys.public_keys(cfg, "thor-01")
    assert len(after) == 3 and not set(after) & set(before)
    assert sorted(p.name for p in cfg.host_keys_dir.iterdir()) == ["thor-01"]  # no scratch left
    with pytest.raises(Exception, match="not a unit name"):
        hostkeys.unit_dir(cfg, "../etc")


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def unit() -> Unit:
    return Unit("thor-01", 0, "thor-t5000-r38.2", KINDS["thor-t5000-r38.2"], "10.213.77.10")


def test_root_unit_tar_is_as_before():
    tar = members(unit_tar(unit(), "ssh-ed25519 AAAA lab", {"/etc/ssh/ssh_host_ed25519_key": b"k"},
                           private={"/etc/ssh/ssh_host_ed25519_key"}))
    assert tar["root"].mode == 0o700 and tar["root/.ssh"].mode == 0o700
    assert tar["root/.ssh/authorized_keys"].mode == 0o600
    assert all(m.uid == 0 and m.gid == 0 for m in tar.values())
    assert tar["etc/ssh/ssh_host_ed25519_key"].mode == 0o600
    assert tar["etc/specfleet-lab/gpu.json"].mode == 0o644
    assert not any(name.startswith("home") for name in tar)


def test_stock_unit_tar_authorizes_nvidia_only():
    tar = members(unit_tar(unit(), "ssh-ed25519 AAAA lab", login=STOCK_LOGIN))
    assert not any(name.startswith("root") for name in tar)
    key = tar["home/nvidia/.ssh/authorized_keys"]
    assert (key.uid, key.gid, key.mode) == (1000, 1000, 0o600)
    assert (tar["home/nvidia/.ssh"].uid, tar["home/nvidia/.ssh"].mode) == (1000, 0o700)
    assert (tar["home/nvidia"].uid, tar["home/nvidia"].mode) == (1000, 0o750)
    assert (tar["home"].uid, tar["home"].mode) == (0, 0o755)
    assert tar["opt/specfleet-lab/jetson/etc/nv_tegra_release"].uid == 0
    assert ROOT_LOGIN.user == "root" and STOCK_LOGIN.uid == 1000


def test_files_tar_modes():
    tar = members(files_tar({"/etc/ssh/a_key": b"x", "/etc/ssh/a_key.pub": b"y"}, {"/etc/ssh/a_key"}))
    assert tar["etc/ssh/a_key"].mode == 0o600 and tar["etc/ssh/a_key.pub"].mode == 0o644
    assert tar["etc/ssh"].mode == 0o755


def test_stock_image_context():
    cfg = LabConfig()
    files = images.context_files(cfg.images_dir, images.STOCK_UNIT)
    assert files["Dockerfile"] == cfg.images_dir / "unit-stock" / "Dockerfile"
    # The shared init, with the stock unit's own README, no /etc/default/docker (a conffile).
    assert files["rootfs/usr/local/sbin/specfleet-lab-init"].parent.parent.parent.parent.parent.name == "unit"
    assert files["rootfs/etc/specfleet-lab/README"].is_relative_to(cfg.images_dir / "unit-stock")
    assert "rootfs/etc/default/docker" not in files and "recipe.yml" not in files
    assert "rootfs/usr/sbin/policy-rc.d" in files
    root = images.context_files(cfg.images_dir, images.ROOT_UNIT)
    assert "rootfs/etc/default/docker" in root and "rootfs/usr/sbin/policy-rc.d" not in root
    assert images.unit_recipe_hash(cfg, images.STOCK_UNIT) != images.unit_recipe_hash(cfg, images.ROOT_UNIT)


@pytest.mark.parametrize(("argv", "code"), [
    (["--quiet", "docker", "start"], 0), (["docker", "restart", "2"], 0),
    (["ssh", "restart"], 101), (["containerd", "start"], 101), ([], 101),
])
def test_stock_policy_rc_d_allows_only_docker(argv, code):
    script = LabConfig().images_dir / "unit-stock" / "rootfs/usr/sbin/policy-rc.d"
    assert subprocess.run(["sh", str(script), *argv], check=False).returncode == code


def test_ulimit_hook_makes_the_docker_init_script_limits_best_effort(tmp_path):
    hook = LabConfig().images_dir / "unit-stock" / "rootfs/usr/lib/lsb/init-functions.d/05-specfleet-lab"
    # As /etc/init.d/docker does it: `set -e`, then a hard limit this host cannot grant.
    proc = subprocess.run(["sh", "-c", f"set -e; . {hook}; ulimit -n 99999999; echo survived"],
                          capture_output=True, text=True, check=False)
    assert proc.stdout == "survived\n", proc.stderr


def test_already_up_refuses_a_change_of_stock(tmp_path, monkeypatch):
    cfg = cfg_in(tmp_path)
    st = state.LabState(profile="mixed", units_requested=3, stock=False, complete=True)
    with pytest.raises(lab.LabError, match="stock units off"):
        lab._already_up(cfg, st, "mixed", 3, None, False, True, lambda _m: None)
    monkeypatch.setattr(lab, "status", lambda _cfg: {"units": []})
    assert lab._already_up(cfg, st, "mixed", 3, None, False, False, lambda _m: None)["changed"] is False


def test_a_killed_runs_state_is_a_leftover_and_a_live_lab_is_not(tmp_path):
    """The lab tests clear what a killed run or a reboot left (CI's machine may start with
    such a state file) and never a lab with anything of it still running."""
    # Its own run folder too: a lab that is up on this machine must not answer for these units.
    cfg = LabConfig(repo=tmp_path, var_dir=tmp_path / "var", run_dir=tmp_path / "run")
    unit = {"name": "thor-01", "device_class": "thor", "kind_id": "thor-t5000", "address": "10.213.77.10",
            "container": "sflab-thor-01"}
    gone = {"pid": 2**22 + 1, "match": "dockerd --host=unix:///nowhere"}
    state.save(cfg.state_file, state.LabState(profile="mixed", units_requested=1, complete=True,
                                              processes={"dockerd": gone}, units=[unit]))
    status = lab.status(cfg)
    assert status["lab"] == "degraded" and lab.is_leftover(status)
    alive = {"pid": os.getpid(), "match": "python"}
    state.save(cfg.state_file, state.LabState(profile="mixed", units_requested=1, complete=True,
                                              processes={"dockerd": gone, "apt-mirror": alive},
                                              units=[unit]))
    assert not lab.is_leftover(lab.status(cfg))
    assert not lab.is_leftover({"lab": "down", "units": [], "processes": {}})


def test_the_lab_unpins_the_shipped_digests_its_emulated_images_cannot_carry(tmp_path):
    """images.yml pins Thor's and Orin JetPack 6's images by digest; the lab serves its emulator
    under those tags with digests of its own, so its inventory replaces each pinned entry (same
    name, LAB-labelled) with one without a digest, and the plan for a lab unit takes it."""
    from specfleet import catalog, policy

    shipped = {image.name: image for image in catalog.load_catalog().images}
    data = inventory.group_vars_all(cfg_in(tmp_path), "stock", None, MIRROR)
    unpinned = data["specfleet_images"]
    pinned = {name for name, image in shipped.items() if image.digest}
    assert {"upstream-vllm-0.26-cu130", "nvidia-ai-iot-vllm-0.14-orin"} <= pinned
    assert {entry["name"] for entry in unpinned} == pinned
    for entry in unpinned:
        assert entry["digest"] is None and entry["ref"] == shipped[entry["name"]].ref
        assert entry["source"].startswith("LAB: ")
    merged = policy.merge({"specfleet_images": unpinned})
    assert policy.validate(merged, catalog.load_catalog()) == []
    lab_images = catalog.load_catalog().with_images(unpinned)
    assert all(image.digest is None for image in lab_images.images if image.name in pinned)
    # Their lines stay under yamllint's 120 (the rest of the file holds this machine's paths,
    # checked on a real lab by test_lab_data).
    written = inventory.dump_with_comments({"specfleet_images": unpinned}, inventory.ALL_COMMENTS)
    assert "LAB setting" in written and max(len(line) for line in written.splitlines()) <= 120
