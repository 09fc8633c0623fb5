"""The lab's LAN apt mirror: index and Release texts, the emulated toolkit's control file,
and (with the host's dpkg-deb and gpg, no lab needed) a real signed repository that the
host's apt-get accepts."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import time

import pytest
import yaml
from specfleet_lab import aptmirror, images
from specfleet_lab.config import LabConfig

CFG = LabConfig()

CONTROL = """Package: rsync
Version: 3.4.1+ds1-5
Architecture: amd64
Maintainer: Samuel Henrique <samueloph@debian.org>
Installed-Size: 839
Depends: libc6 (>= 2.38), init-system-helpers (>= 1.51)
Section: net
Priority: optional
Description: fast, versatile, remote (and local) file-copying tool
 rsync is a fast and versatile file-copying tool.
 .
 It is famous for its delta-transfer algorithm.
"""


def test_parse_control_keeps_continuation_lines():
    fields = dict(aptmirror.parse_control(CONTROL))
    assert fields["Package"] == "rsync"
    assert fields["Description"].splitlines() == [
        "fast, versatile, remote (and local) file-copying tool",
        " rsync is a fast and versatile file-copying tool.",
        " .",
        " It is famous for its delta-transfer algorithm.",
    ]
    assert aptmirror.format_control(aptmirror.parse_control(CONTROL)) == CONTROL


@pytest.mark.parametrize("bad", ["no colon here\n", " leading continuation\n", "Two Words: x\n"])
def test_parse_control_refuses_what_is_not_a_paragraph(bad):
    with pytest.raises(ValueError):
        aptmirror.parse_control(bad)


def test_packages_paragraph_puts_file_facts_before_the_description():
    text = aptmirror.packages_paragraph(CONTROL, "pool/main/r/rsync/rsync_3.4.1+ds1-5_amd64.deb", 1234, "a" * 32,
                                        "b" * 64)
    names = [name for name, _ in aptmirror.parse_control(text)]
    assert names[-5:] == ["Filename", "Size", "MD5sum", "SHA256", "Description"]
    fields = dict(aptmirror.parse_control(text))
    assert fields["Size"] == "1234" and fields["Filename"].startswith("pool/main/r/rsync/")
    assert text.endswith("delta-transfer algorithm.\n")


def test_packages_index_separates_stanzas_by_one_blank_line():
    index = aptmirror.packages_index(["Package: a\n", "Package: b\n\n"])
    assert index == "Package: a\n\nPackage: b\n"


@pytest.mark.parametrize(("package", "expected"), [
    ("rsync", "pool/main/r/rsync/f.deb"),
    ("libc6", "pool/main/libc/libc6/f.deb"),
    ("lib", "pool/main/l/lib/f.deb"),
])
def test_pool_path(package, expected):
    assert aptmirror.pool_path("main", package, "f.deb") == expected


def test_release_lists_every_index_with_both_hashes():
    files = {"main/binary-amd64/Packages": b"Package: a\n", "main/binary-amd64/Packages.gz": b"\x1f\x8bxyz"}
    text = aptmirror.release_text("specfleet-lab", ["main"], ["amd64"], files, 0.0)
    fields = dict(aptmirror.parse_control(text))
    assert fields["Suite"] == fields["Codename"] == "specfleet-lab"
    assert fields["Date"] == "Thu, 01 Jan 1970 00:00:00 UTC"
    assert fields["Components"] == "main" and fields["Architectures"] == "amd64"
    assert "EMULATED" in fields["Description"]
    for title, algo in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
        rows = [line.split() for line in fields[title].splitlines()[1:]]
        assert rows == [[algo(data).hexdigest(), str(len(data)), rel] for rel, data in sorted(files.items())]


def test_rfc1123_is_locale_independent():
    assert aptmirror.rfc1123(1764028800.0) == "Tue, 25 Nov 2025 00:00:00 UTC"


def test_toolkit_control_says_it_is_an_emulation():
    spec = aptmirror.toolkit_spec(CFG)
    control = aptmirror.toolkit_control(spec, 12)
    fields = dict(aptmirror.parse_control(control))
    assert fields["Package"] == "nvidia-container-toolkit"
    assert "EMULATION" in fields["Description"].splitlines()[0] and "NOT NVIDIA" in fields["Description"]
    assert "EMULATION" in fields["Maintainer"] and fields["Installed-Size"] == "12"
    # The lab's version sorts below NVIDIA's own 1.19.1-1.
    assert fields["Version"].startswith("1.19.1-1~")
    assert " ." in fields["Description"].splitlines()  # paragraph breaks as Debian writes them
    doc = aptmirror.toolkit_dir(CFG) / "files/usr/share/doc/nvidia-container-toolkit"
    assert any("EMULATION" in p.name for p in doc.iterdir())


def test_the_shim_has_one_source_used_by_the_root_unit_image():
    shim = aptmirror.toolkit_dir(CFG) / "files" / images.SHIM_REL
    assert "EMULATION SHIM" in shim.read_text() and os.access(shim, os.X_OK)
    root_context = images.context_files(CFG.images_dir, images.ROOT_UNIT)
    assert root_context[f"rootfs/{images.SHIM_REL}"] == shim
    assert not (CFG.images_dir / "unit" / "rootfs" / images.SHIM_REL).exists()
    stock_context = images.context_files(CFG.images_dir, images.STOCK_UNIT)
    assert f"rootfs/{images.SHIM_REL}" not in stock_context


def test_deb_filename_drops_the_epoch():
    assert aptmirror.deb_filename("docker.io", "1:26.1.5+dfsg1-9", "amd64") == "docker.io_26.1.5+dfsg1-9_amd64.deb"


def test_mirror_recipe_names_what_the_bootstrap_installs():
    recipe = yaml.safe_load((CFG.images_dir / "apt-mirror" / "recipe.yml").read_text())
    assert recipe["packages"] == ["docker.io", "docker-cli", "python3-docker", "rsync"]
    assert (recipe["suite"], recipe["component"]) == ("specfleet-lab", "main")


def test_stock_unit_recipe_lacks_what_the_mirror_brings():
    stock = yaml.safe_load((CFG.images_dir / "unit-stock" / "recipe.yml").read_text())["packages"]
    assert {"openssh-server", "python3", "python3-apt", "sudo"} <= set(stock)
    assert not {"docker.io", "docker-cli", "python3-docker", "nvidia-container-toolkit"} & set(stock)


@pytest.mark.skipif(not (shutil.which("gpg") and shutil.which("dpkg-deb") and shutil.which("apt-get")),
                    reason="needs gpg, dpkg-deb and apt-get (Debian host)")
def test_a_built_repository_passes_apt_signature_and_hash_checks(tmp_path):
    """The emulated toolkit in a repository written and signed by aptmirror, fetched by the
    host's apt-get (own state dirs; file:// source) with only the lab key trusted."""
    cfg = LabConfig(repo=tmp_path / "repo")
    shutil.copytree(CFG.images_dir / images.TOOLKIT_DIR, cfg.images_dir / images.TOOLKIT_DIR)
    fingerprint = aptmirror.ensure_signing_key(cfg)
    deb = aptmirror.read_deb(aptmirror.build_toolkit_deb(cfg, tmp_path / "debs"))
    assert deb.package == "nvidia-container-toolkit"
    contents = subprocess.run(["dpkg-deb", "--contents", str(deb.path)], capture_output=True, text=True,
                              check=True).stdout
    assert "root/root" in contents and "./usr/bin/nvidia-container-runtime" in contents
    root = tmp_path / "www" / "debian"
    aptmirror.write_repository(root, [deb], "specfleet-lab", "main", "amd64", time.time())
    aptmirror.sign_release(cfg, root / "dists" / "specfleet-lab", fingerprint)
    index = (root / "dists/specfleet-lab/main/binary-amd64/Packages").read_bytes()
    assert gzip.decompress((root / "dists/specfleet-lab/main/binary-amd64/Packages.gz").read_bytes()) == index
    assert (root / "pool/main/n/nvidia-container-toolkit" / deb.path.name).is_file()

    state = tmp_path / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/preferences.d"):
        (state / sub).mkdir(parents=True)
    (state / "etc/sources.list").write_text(
        aptmirror.sources_line(f"file://{root}", "specfleet-lab", ["main"], str(aptmirror.key_file(cfg))) + "\n")
    (state / "status").write_text("")
    opts = [f"-oDir::State::Lists={state}/lists", f"-oDir::Cache={state}/cache",
            f"-oDir::Etc::SourceList={state}/etc/sources.list",
            f"-oDir::Etc::SourceParts={state}/etc/sources.list.d",
            f"-oDir::Etc::Preferences={state}/etc/preferences",
            f"-oDir::Etc::PreferencesParts={state}/etc/preferences.d",
            f"-oDir::State::status={state}/status", "-oAPT::Sandbox::User=root", "-oDebug::NoLocking=1"]
    update = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=60)
    assert update.returncode == 0 and "W:" not in update.stderr and "E:" not in update.stderr, update.stderr
    show = subprocess.run(["apt-cache", *opts, "show", "nvidia-container-toolkit"], capture_output=True, text=True,
                          timeout=60)
    assert show.returncode == 0 and "EMULATION" in show.stdout, show.stderr

    # A Release that no longer matches its signature is refused.
    release = root / "dists/specfleet-lab/Release"
    release.write_text(release.read_text().replace("specfleet lab LAN mirror", "tampered"))
    inrelease = root / "dists/specfleet-lab/InRelease"
    inrelease.write_text(inrelease.read_text().replace("specfleet lab LAN mirror", "tampered"))
    shutil.rmtree(state / "lists")
    (state / "lists/partial").mkdir(parents=True)
    bad = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=60)
    assert "NO_PUBKEY" in bad.stderr or "BADSIG" in bad.stderr or "not signed" in bad.stderr \
        or "invalid" in bad.stderr.lower(), bad.stderr
