"""The lab's LAN apt mirror: a real, signed apt repository served over plain HTTP.

At an event the units are offline; the organisers bring a package mirror. The lab's stands
in for it: `lab up` builds it (once; again only when its inputs change) and serves it from
the controller's lab address, the only address a unit can reach.

    lab/build/apt-mirror/
      gnupg/                 the lab's signing key (made once, no passphrase, lab only)
      mirror-key.asc         its public key, armored (the inventory's mirror `key`)
      debs/<download hash>/  Debian trixie .debs: lab/images/apt-mirror/recipe.yml's
                             packages + every dependency a stock unit lacks, downloaded
                             by `apt-get install --download-only` in a chroot of the stock
                             unit's rootfs (the way images.py installs packages)
      toolkit/               the lab's EMULATED nvidia-container-toolkit .deb (dpkg-deb)
      www/                   what the HTTP server serves:
        debian/              dists/<suite>/{Release,InRelease,Release.gpg},
                             dists/<suite>/main/binary-<arch>/Packages(.gz), pool/
        debian-no-toolkit/   the same without nvidia-container-toolkit
      inputs.json            the hash of what www/ was built from

The index and Release texts are built by the pure functions below (unit-tested); gpg only
signs. The server is `python3 -m http.server`, started by the lab and recorded in its state
(so `lab down` stops it, like the registry).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specfleet_lab import images
from specfleet_lab.config import LabConfig
from specfleet_lab.engine import process_alive
from specfleet_lab.sh import LabError, log, run, safe_rmtree
from specfleet_lab.state import LabState

# Bump when the layout or the index format this module writes changes (forces a rebuild).
FORMAT = "1"
WITH_TOOLKIT = "debian"
WITHOUT_TOOLKIT = "debian-no-toolkit"
TOOLKIT_PACKAGE = "nvidia-container-toolkit"
ORIGIN = "specfleet-lab"
LABEL = "specfleet lab LAN mirror"
DESCRIPTION = (
    "specfleet LAB apt mirror: Debian trixie packages for stock lab units, and the lab's EMULATED "
    "nvidia-container-toolkit (not NVIDIA software)"
)
KEY_UID = "specfleet lab apt mirror (LAB ONLY, not NVIDIA, not Debian) <lab-mirror@specfleet.invalid>"
SERVER_ROLE = "apt-mirror"
# RFC 1123 names, independent of the host's locale (Release's Date field).
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class Deb:
    """One .deb of the repository: its control paragraph and file facts."""

    path: Path
    control: str
    size: int
    md5: str
    sha256: str

    @property
    def package(self) -> str:
        return control_field(self.control, "Package")


# ---- pure: control files, indexes, Release ----------------------------------------------
def parse_control(text: str) -> list[tuple[str, str]]:
    """A deb822 paragraph as (field, value) pairs in order; continuation lines (leading
    space) stay part of their field's value, joined with newlines."""
    fields: list[tuple[str, str]] = []
    for line in text.rstrip("\n").split("\n"):
        if not line.strip() and not fields:
            continue
        if line[:1] in (" ", "\t"):
            if not fields:
                raise ValueError(f"continuation line before any field: {line!r}")
            name, value = fields[-1]
            fields[-1] = (name, f"{value}\n{line}")
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or " " in name:
            raise ValueError(f"not a control field: {line!r}")
        fields.append((name, value.strip()))
    return fields


def control_field(text: str, name: str) -> str:
    for key, value in parse_control(text):
        if key.lower() == name.lower():
            return value
    raise KeyError(name)


def format_control(fields: list[tuple[str, str]]) -> str:
    return "".join(f"{name}: {value}\n" if value else f"{name}:\n" for name, value in fields)


def pool_path(component: str, package: str, filename: str) -> str:
    """Debian's pool layout: pool/<component>/<l or libX>/<package>/<file>."""
    prefix = package[:4] if package.startswith("lib") and len(package) > 3 else package[:1]
    return f"pool/{component}/{prefix}/{package}/{filename}"


def packages_paragraph(control: str, filename: str, size: int, md5: str, sha256: str) -> str:
    """A Packages stanza: the .deb's control fields, with the file's location, size and
    hashes before the Description (where dpkg-scanpackages puts them)."""
    fields = [(k, v) for k, v in parse_control(control) if k not in ("Filename", "Size", "MD5sum", "SHA256")]
    extra = [("Filename", filename), ("Size", str(size)), ("MD5sum", md5), ("SHA256", sha256)]
    at = next((i for i, (k, _v) in enumerate(fields) if k == "Description"), len(fields))
    return format_control(fields[:at] + extra + fields[at:])


def packages_index(paragraphs: list[str]) -> str:
    """Stanzas separated by one blank line, as apt reads them."""
    return "\n".join(p.rstrip("\n") + "\n" for p in paragraphs)


def rfc1123(epoch: float) -> str:
    t = time.gmtime(epoch)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC")


def release_text(
    suite: str, components: list[str], architectures: list[str], files: dict[str, bytes], date: float,
) -> str:
    """dists/<suite>/Release: identity, then MD5Sum and SHA256 of every index file (paths
    relative to dists/<suite>/); apt refuses indexes whose hash is not listed here."""
    head = [
        ("Origin", ORIGIN),
        ("Label", LABEL),
        ("Suite", suite),
        ("Codename", suite),
        ("Date", rfc1123(date)),
        ("Architectures", " ".join(architectures)),
        ("Components", " ".join(components)),
        ("Description", DESCRIPTION),
    ]
    width = max((len(str(len(data))) for data in files.values()), default=1)
    out = format_control(head)
    for title, algo in (("MD5Sum", hashlib.md5), ("SHA256", hashlib.sha256)):
        out += f"{title}:\n"
        for rel in sorted(files):
            data = files[rel]
            out += f" {algo(data).hexdigest()} {len(data):>{width}} {rel}\n"
    return out


def toolkit_control(spec: dict[str, Any], installed_size_kib: int) -> str:
    """DEBIAN/control of the emulated toolkit from lab/images/nvidia-container-toolkit/package.yml."""
    body = str(spec["description"]).rstrip("\n").split("\n")
    description = spec["summary"] + "".join(f"\n {line if line.strip() else '.'}" for line in body)
    fields = [
        ("Package", spec["package"]),
        ("Version", str(spec["version"])),
        ("Architecture", spec["architecture"]),
        ("Maintainer", spec["maintainer"]),
        ("Installed-Size", str(installed_size_kib)),
        ("Depends", spec["depends"]),
        ("Section", spec["section"]),
        ("Priority", spec["priority"]),
        ("Description", description),
    ]
    return format_control(fields)


def deb_filename(package: str, version: str, arch: str) -> str:
    """Debian's file name: the version without its epoch."""
    return f"{package}_{version.split(':', 1)[-1]}_{arch}.deb"


def sources_line(uri: str, suite: str, components: list[str], keyring: str) -> str:
    """The one-line apt source a unit would use for this mirror."""
    return f"deb [signed-by={keyring}] {uri} {suite} {' '.join(components)}"


def digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


# ---- recipe and inputs ------------------------------------------------------------------
def recipe(cfg: LabConfig) -> dict[str, Any]:
    return yaml.safe_load((cfg.images_dir / "apt-mirror" / "recipe.yml").read_text()) or {}


def toolkit_dir(cfg: LabConfig) -> Path:
    return cfg.images_dir / images.TOOLKIT_DIR


def toolkit_spec(cfg: LabConfig) -> dict[str, Any]:
    return yaml.safe_load((toolkit_dir(cfg) / "package.yml").read_text())


def uri(cfg: LabConfig, variant: str = WITH_TOOLKIT) -> str:
    return f"http://{cfg.apt_mirror_address}/{variant}"


def key_file(cfg: LabConfig) -> Path:
    return cfg.apt_mirror_dir / "mirror-key.asc"


def www_dir(cfg: LabConfig) -> Path:
    return cfg.apt_mirror_dir / "www"


def download_hash(cfg: LabConfig, arch: str) -> str:
    """What the downloaded .debs depend on: the stock unit's packages (and base), the list."""
    return digest(FORMAT, arch, images.unit_pkgs_hash(cfg, images.STOCK_UNIT), json.dumps(recipe(cfg)["packages"]))


def mirror_hash(cfg: LabConfig, arch: str, fingerprint: str) -> str:
    data = recipe(cfg)
    toolkit = images.tree_hash([toolkit_dir(cfg)])
    return digest(FORMAT, download_hash(cfg, arch), toolkit, fingerprint, data["suite"], data["component"])


def group_vars(cfg: LabConfig) -> dict[str, Any]:
    """`specfleet_bootstrap_apt_mirror` for the inventory (the bootstrap role's input)."""
    data = recipe(cfg)
    return {
        "uri": uri(cfg),
        "suite": data["suite"],
        "components": [data["component"]],
        "key": key_file(cfg).read_text(),
    }


# ---- building ---------------------------------------------------------------------------
def dpkg_arch() -> str:
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def _gpg(home: Path, *args: str) -> str:
    return run(["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback",
                "--passphrase", "", *args]).stdout


@contextmanager
def _gpg_home(cfg: LabConfig) -> Iterator[Path]:
    """A working copy of the lab's keyring in a short /tmp directory, copied back after.

    gpg needs its agent for secret keys, and the agent's socket lives in the home
    directory: under a deep checkout the path exceeds the 108 bytes a Unix socket may
    have, and the agent fails to start. The agent started here is ours: ended on exit."""
    keep = cfg.apt_mirror_dir / "gnupg"
    keep.mkdir(parents=True, exist_ok=True)
    keep.chmod(0o700)
    home = Path(tempfile.mkdtemp(prefix="sflab-gpg-", dir="/tmp"))
    try:
        shutil.copytree(keep, home, dirs_exist_ok=True, ignore=shutil.ignore_patterns("S.*", "*.lock"))
        home.chmod(0o700)
        yield home
        run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
        shutil.copytree(home, keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("S.*", "*.lock"))
    finally:
        run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
        shutil.rmtree(home, ignore_errors=True)


def ensure_signing_key(cfg: LabConfig) -> str:
    """The lab's mirror signing key (made once); returns its fingerprint and keeps
    mirror-key.asc (the armored public key) current."""
    with _gpg_home(cfg) as home:
        if not _fingerprints(home):
            log.info("generating the lab apt mirror's signing key")
            _gpg(home, "--quick-gen-key", KEY_UID, "rsa3072", "sign", "never")
        fingerprint = _fingerprints(home)[0]
        armored = _gpg(home, "--armor", "--export", fingerprint)
    key = key_file(cfg)
    if not key.exists() or key.read_text() != armored:
        key.write_text(armored)
    return fingerprint


def _fingerprints(home: Path) -> list[str]:
    out = run(["gpg", "--homedir", str(home), "--batch", "--with-colons", "--list-secret-keys"],
              check=False).stdout
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")][:1]


def build_toolkit_deb(cfg: LabConfig, out_dir: Path) -> Path:
    """The lab's EMULATED nvidia-container-toolkit .deb, with dpkg-deb (root-owned files)."""
    spec = toolkit_spec(cfg)
    files = toolkit_dir(cfg) / "files"
    with tempfile.TemporaryDirectory(prefix="sflab-toolkit-") as scratch:
        stage = Path(scratch) / "pkg"
        shutil.copytree(files, stage, symlinks=False)
        sums = []
        size = 0
        for path in sorted(p for p in stage.rglob("*") if p.is_file()):
            path.chmod(0o755 if os.access(path, os.X_OK) else 0o644)
            data = path.read_bytes()
            size += len(data)
            sums.append(f"{hashlib.md5(data).hexdigest()}  {path.relative_to(stage)}\n")
        for directory in [stage, *(p for p in stage.rglob("*") if p.is_dir())]:
            directory.chmod(0o755)
        (stage / "DEBIAN").mkdir(mode=0o755)
        (stage / "DEBIAN" / "control").write_text(toolkit_control(spec, max(1, math.ceil(size / 1024))))
        (stage / "DEBIAN" / "md5sums").write_text("".join(sums))
        out_dir.mkdir(parents=True, exist_ok=True)
        deb = out_dir / deb_filename(spec["package"], str(spec["version"]), spec["architecture"])
        run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(deb)])
    return deb


def download_debs(cfg: LabConfig, dest: Path) -> list[Path]:
    """The recipe's packages and their missing dependencies, from Debian trixie, resolved
    against the stock unit's rootfs (exported from its pkgs image) in a chroot."""
    packages = [str(p) for p in recipe(cfg)["packages"]]
    images.build_unit_pkgs_image(cfg, flavour=images.STOCK_UNIT)
    work = images.work_dir(cfg, "apt-mirror")
    rootfs = work / "rootfs"
    rootfs.mkdir()
    try:
        images.export_image(cfg, images.STOCK_PKGS_IMAGE, rootfs)
        archives = rootfs / "var/cache/apt/archives"
        for old in archives.glob("*.deb"):
            old.unlink()
        with images.chroot_for_apt(rootfs) as env:
            run(["chroot", str(rootfs), "apt-get", "update"], env=env, timeout=600)
            # --reinstall: a named package the stock unit has already (rsync) is still
            # downloaded, so the mirror offers everything the recipe names.
            run(["chroot", str(rootfs), "apt-get", "install", "--download-only", "--reinstall", "-y",
                 "--no-install-recommends", *packages], env=env, timeout=1800)
        debs = sorted(archives.glob("*.deb"))
        if not debs:
            raise LabError("apt-get --download-only fetched no packages for the lab mirror")
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for deb in debs:
            shutil.copyfile(deb, tmp / deb.name)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        safe_rmtree(str(work))
    return sorted(dest.glob("*.deb"))


def read_deb(path: Path) -> Deb:
    control = run(["dpkg-deb", "--field", str(path)]).stdout
    data = path.read_bytes()
    return Deb(path, control, len(data), hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest())


def write_repository(root: Path, debs: list[Deb], suite: str, component: str, arch: str, date: float) -> None:
    """One repository: pool/ (hard links to the cached .debs), the Packages index for
    binary-<arch> (Architecture: all packages included, as Debian does) and Release."""
    paragraphs = []
    for deb in sorted(debs, key=lambda d: (d.package, d.path.name)):
        rel = pool_path(component, deb.package, deb.path.name)
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(deb.path, target)
        except OSError:
            shutil.copyfile(deb.path, target)
        paragraphs.append(packages_paragraph(deb.control, rel, deb.size, deb.md5, deb.sha256))
    index = packages_index(paragraphs).encode()
    binary = f"{component}/binary-{arch}"
    dist = root / "dists" / suite
    (dist / binary).mkdir(parents=True, exist_ok=True)
    packed = gzip.compress(index, mtime=int(date))
    (dist / binary / "Packages").write_bytes(index)
    (dist / binary / "Packages.gz").write_bytes(packed)
    release = release_text(suite, [component], [arch], {f"{binary}/Packages": index,
                                                       f"{binary}/Packages.gz": packed}, date)
    (dist / "Release").write_text(release)


def sign_release(cfg: LabConfig, dist: Path, fingerprint: str) -> None:
    """InRelease (clear-signed) and Release.gpg (detached), SHA512 digests: trixie's apt
    (sqv) refuses SHA1 signatures."""
    release = str(dist / "Release")
    with _gpg_home(cfg) as home:
        _gpg(home, "--yes", "--local-user", fingerprint, "--digest-algo", "SHA512",
             "--clearsign", "--output", str(dist / "InRelease"), release)
        _gpg(home, "--yes", "--local-user", fingerprint, "--digest-algo", "SHA512",
             "--armor", "--detach-sign", "--output", str(dist / "Release.gpg"), release)


def ensure_mirror(cfg: LabConfig, force: bool = False) -> dict[str, Any]:
    """Build the mirror tree unless inputs.json shows it current; return what happened."""
    started = time.monotonic()
    arch = dpkg_arch()
    fingerprint = ensure_signing_key(cfg)
    wanted = mirror_hash(cfg, arch, fingerprint)
    stamp = cfg.apt_mirror_dir / "inputs.json"
    current = json.loads(stamp.read_text()) if stamp.exists() else {}
    if not force and current.get("hash") == wanted and www_dir(cfg).is_dir():
        return {"built": False, "seconds": 0.0, "hash": wanted, "packages": current.get("packages", 0)}
    data = recipe(cfg)
    cache = cfg.apt_mirror_dir / "debs" / download_hash(cfg, arch)
    downloaded = False
    if force or not cache.is_dir() or not any(cache.glob("*.deb")):
        for stale in (cfg.apt_mirror_dir / "debs").glob("*"):
            if stale != cache:
                shutil.rmtree(stale, ignore_errors=True)
        download_debs(cfg, cache)
        downloaded = True
    toolkit = build_toolkit_deb(cfg, cfg.apt_mirror_dir / "toolkit")
    debian = [read_deb(p) for p in sorted(cache.glob("*.deb"))]
    toolkit_deb = read_deb(toolkit)
    now = time.time()
    staging = Path(tempfile.mkdtemp(prefix="www-", dir=cfg.apt_mirror_dir))
    try:
        for variant, debs in ((WITH_TOOLKIT, [*debian, toolkit_deb]), (WITHOUT_TOOLKIT, debian)):
            root = staging / variant
            write_repository(root, debs, data["suite"], data["component"], arch, now)
            sign_release(cfg, root / "dists" / data["suite"], fingerprint)
        staging.chmod(0o755)
        _swap_in(staging, www_dir(cfg))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result = {"built": True, "downloaded": downloaded, "seconds": round(time.monotonic() - started, 1),
              "hash": wanted, "packages": len(debian) + 1}
    stamp.write_text(json.dumps({"hash": result["hash"], "packages": result["packages"], "built": now}) + "\n")
    return result


def _swap_in(new: Path, target: Path) -> None:
    """Replace target by new with renames, so a running server never sees half a tree."""
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)


# ---- serving ----------------------------------------------------------------------------
def server_argv(cfg: LabConfig) -> list[str]:
    """The stdlib HTTP server (an offline event would run apt-cacher-ng or a plain web
    server); bound to the controller's lab address only, so nothing else can reach it."""
    return ["/usr/bin/python3", "-m", "http.server", str(cfg.apt_mirror_port),
            "--bind", cfg.controller_address, "--directory", str(www_dir(cfg))]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def start_server(cfg: LabConfig, state: LabState, timeout: float = 20.0) -> None:
    """Serve www/ unless the state shows our server running; recorded in the state."""
    entry = state.processes.get(SERVER_ROLE)
    if entry and process_alive(entry):
        return
    probe = f"{uri(cfg)}/dists/{recipe(cfg)['suite']}/InRelease"
    if _answers(probe):
        raise LabError(f"{cfg.apt_mirror_address} is served by something that is not the lab")
    cfg.var_dir.mkdir(parents=True, exist_ok=True)
    logfile = cfg.var_dir / "apt-mirror.log"
    with open(logfile, "ab") as logf:
        proc = subprocess.Popen(server_argv(cfg), stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, start_new_session=True)
    state.processes[SERVER_ROLE] = {
        "pid": proc.pid,
        "match": f"http.server {cfg.apt_mirror_port} --bind {cfg.controller_address}",
        "addr": cfg.apt_mirror_address,
    }
    deadline = time.monotonic() + timeout
    while not _answers(probe):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise LabError(f"the apt mirror did not come up on {cfg.apt_mirror_address}; see {logfile}")
        time.sleep(0.2)
    log.info("apt mirror on http://%s (pid %d)", cfg.apt_mirror_address, proc.pid)
