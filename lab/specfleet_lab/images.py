"""Lab images, built without any registry.

base    debootstrap --variant=minbase <suite> -> `docker import`, one per suite:
        specfleet-lab/base:bookworm (base/recipe.yml; engines: python 3.11) and
        specfleet-lab/base:trixie (base-trixie/recipe.yml; units: docker.io 26)
unit    trixie base rootfs + chroot `apt-get install` on the host -> `docker import`
        (specfleet-lab/unit-pkgs:trixie), then lab/images/unit/Dockerfile adds the lab
        files, built with `--network none`                         (specfleet-lab/unit:trixie)
stock   the same from lab/images/unit-stock: a unit as flashed (login nvidia, no Docker)
        (specfleet-lab/unit-stock-pkgs:trixie -> specfleet-lab/unit-stock:trixie)
engine  lab/emulator/Dockerfile FROM the bookworm base (`--network none`), tagged with the
        real image names of specfleet/data/images.yml; an image whose vLLM version the matrix
        knows gets a layer of its own that sets the version the emulator emulates
        (SPECFLEET_EMULATOR_VLLM_VERSION: the fields its SpeculativeConfig takes)
                                                                  (build_engine_images)

Each image carries the hash of its recipe (and its parent's) in a label; a build is
skipped when the label matches, so a second `lab up` costs one `docker inspect` per image.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from specfleet.catalog import load_catalog
from specfleet_lab.config import (
    BASE_IMAGE,
    RECIPE_LABEL,
    STOCK_UNIT_IMAGE,
    UNIT_BASE_IMAGE,
    UNIT_IMAGE,
    LabConfig,
)
from specfleet_lab.engine import DOCKER_CLI, docker, docker_env, docker_input
from specfleet_lab.sh import LabError, log, run, safe_rmtree

UNIT_PKGS_IMAGE = "specfleet-lab/unit-pkgs:trixie"
STOCK_PKGS_IMAGE = "specfleet-lab/unit-stock-pkgs:trixie"
# The lab's nvidia-container-runtime shim: ONE source file, packaged as the lab mirror's
# emulated nvidia-container-toolkit (aptmirror.py) and preinstalled in the root-login unit.
TOOLKIT_DIR = "nvidia-container-toolkit"
SHIM_REL = "usr/bin/nvidia-container-runtime"
# The lab's EMULATED page-cache bookkeeping: ONE source file in the shared unit rootfs,
# staged a second time as /usr/local/sbin/sysctl in both unit images. There it comes before
# /usr/sbin/sysctl on root's PATH and in sudo's secure_path, and, run under that name, it
# records every `sysctl -w vm.drop_caches=1|3` the toolkit runs (a write to the bind-mounted
# /proc/sys/vm/drop_caches itself cannot be observed). A copy, not a symlink: the context is
# staged file by file.
PAGE_CACHE_REL = "usr/lib/specfleet-lab/specfleet-lab-page-cache"
SYSCTL_WRAPPER_REL = "usr/local/sbin/sysctl"
# Debian suite -> (recipe directory under lab/images, image name).
BASES: dict[str, tuple[str, str]] = {
    "bookworm": ("base", BASE_IMAGE),
    "trixie": ("base-trixie", UNIT_BASE_IMAGE),
}
ENGINE_SUITE = "bookworm"


@dataclass
class BuildResult:
    image: str
    built: bool
    seconds: float
    recipe_hash: str


# ---- recipe hashing ------------------------------------------------------------------
def tree_hash(paths: list[Path], parent: str = "") -> str:
    """sha256 over parent hash + every file (relative name, mode bit x, content)."""
    digest = hashlib.sha256(parent.encode())
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts:
                continue
            rel = path.name if root.is_file() else str(path.relative_to(root))
            digest.update(rel.encode() + b"\0")
            digest.update(b"x" if path.stat().st_mode & 0o111 else b"-")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def image_label(cfg: LabConfig, image: str, label: str = RECIPE_LABEL) -> str | None:
    proc = docker(
        cfg,
        ["image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image],
        check=False,
    )
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


def image_current(cfg: LabConfig, image: str, recipe_hash: str) -> bool:
    return image_label(cfg, image) == recipe_hash


def image_id(cfg: LabConfig, image: str) -> str | None:
    proc = docker(cfg, ["image", "inspect", "--format", "{{.Id}}", image], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def drop_replaced(cfg: LabConfig, old_id: str | None, image: str) -> None:
    """After a rebuild, remove the previous build if nothing uses it any more, so the lab's
    data root does not fill with untagged images (rmi fails harmlessly if still in use)."""
    if old_id and old_id != image_id(cfg, image):
        docker(cfg, ["rmi", old_id], check=False)


# ---- rootfs helpers ----------------------------------------------------------------
def _load_recipe(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _sources_list(recipe: dict) -> str:
    """APT sources like the host's: release, updates and security of one suite."""
    suite, mirror = recipe["suite"], recipe["mirror"]
    security = recipe.get("security_mirror", "http://deb.debian.org/debian-security")
    return (
        f"deb {mirror} {suite} main\n"
        f"deb {mirror} {suite}-updates main\n"
        f"deb {security} {suite}-security main\n"
    )


def _import_rootfs(cfg: LabConfig, rootfs: Path, image: str, changes: list[str]) -> None:
    """Stream a rootfs directory into `docker import` (numeric owners, no temp tarball)."""
    tar = subprocess.Popen(
        ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
        stdout=subprocess.PIPE,
    )
    argv = [DOCKER_CLI, "import"]
    for change in changes:
        argv += ["--change", change]
    imp = subprocess.run(
        [*argv, "-", image],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        env={**os.environ, **docker_env(cfg)},
    )
    assert tar.stdout is not None
    tar.stdout.close()
    if tar.wait() != 0 or imp.returncode != 0:
        raise LabError(f"docker import {image} failed: {imp.stderr.strip()}")


def export_image(cfg: LabConfig, image: str, dest: Path) -> None:
    """Unpack an image's filesystem into dest (docker create + export, no container run)."""
    cid = docker(cfg, ["create", "--network", "none", image, "/bin/true"]).stdout.strip()
    try:
        exp = subprocess.Popen(
            [DOCKER_CLI, "export", cid],
            stdout=subprocess.PIPE,
            env={**os.environ, **docker_env(cfg)},
        )
        untar = subprocess.run(
            ["tar", "-C", str(dest), "--numeric-owner", "-xf", "-"],
            stdin=exp.stdout,
            capture_output=True,
            text=True,
        )
        assert exp.stdout is not None
        exp.stdout.close()
        if exp.wait() != 0 or untar.returncode != 0:
            raise LabError(f"export of {image} failed: {untar.stderr.strip()}")
    finally:
        docker(cfg, ["rm", "-f", cid], check=False)


@contextmanager
def chroot_for_apt(rootfs: Path) -> Iterator[dict[str, str]]:
    """Prepare rootfs for apt-get run in a chroot with the host's network; yields the env.

    policy-rc.d (exit 101) stops package scripts from starting sshd/dockerd: in a chroot
    they would run on the host. /proc is mounted for the maintainer scripts and always
    unmounted again; device nodes apt needs are created as plain nodes. Afterwards the
    rootfs has no resolv.conf content, no apt lists and no policy-rc.d of ours.
    """
    policy = rootfs / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    shutil.copyfile("/etc/resolv.conf", rootfs / "etc/resolv.conf")
    for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
        node = rootfs / "dev" / name
        if not node.exists():
            run(["mknod", "-m", "666", str(node), "c", "1", str(minor)])
    proc_dir = rootfs / "proc"
    proc_dir.mkdir(exist_ok=True)
    run(["mount", "-t", "proc", "proc", str(proc_dir)])
    try:
        yield {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    finally:
        run(["umount", str(proc_dir)], check=False)
    policy.unlink()
    (rootfs / "etc/resolv.conf").write_text("")
    shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)


def _chroot_apt_install(rootfs: Path, packages: list[str]) -> None:
    """apt-get install inside a chroot, using the host's network (see chroot_for_apt)."""
    with chroot_for_apt(rootfs) as env:
        run(["chroot", str(rootfs), "apt-get", "update"], env=env, timeout=600)
        run(
            ["chroot", str(rootfs), "apt-get", "install", "-y", "--no-install-recommends", *packages],
            env=env,
            timeout=1800,
        )
        run(["chroot", str(rootfs), "apt-get", "clean"], env=env)


def work_dir(cfg: LabConfig, name: str) -> Path:
    base = cfg.var_dir / "build"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))


# ---- base ----------------------------------------------------------------------------
def _base(suite: str) -> tuple[str, str]:
    if suite not in BASES:
        raise LabError(f"no base recipe for Debian {suite!r} (known: {', '.join(BASES)})")
    return BASES[suite]


def base_recipe_hash(cfg: LabConfig, suite: str = ENGINE_SUITE) -> str:
    return tree_hash([cfg.images_dir / _base(suite)[0]])


def build_base_image(cfg: LabConfig, suite: str = ENGINE_SUITE, force: bool = False) -> BuildResult:
    recipe_dir, image = _base(suite)
    recipe_hash = base_recipe_hash(cfg, suite)
    if not force and image_current(cfg, image, recipe_hash):
        return BuildResult(image, False, 0.0, recipe_hash)
    recipe = _load_recipe(cfg.images_dir / recipe_dir / "recipe.yml")
    if recipe.get("suite") != suite:
        raise LabError(f"{recipe_dir}/recipe.yml is for {recipe.get('suite')!r}, expected {suite!r}")
    old_id = image_id(cfg, image)
    started = time.monotonic()
    work = work_dir(cfg, f"base-{suite}")
    rootfs = work / "rootfs"
    try:
        log.info("debootstrap %s (%s) from %s", recipe["suite"], recipe["variant"], recipe["mirror"])
        run(
            [
                "debootstrap",
                f"--variant={recipe['variant']}",
                f"--include={','.join(recipe.get('include', []))}",
                recipe["suite"],
                str(rootfs),
                recipe["mirror"],
            ],
            timeout=1800,
        )
        (rootfs / "etc/apt/sources.list").write_text(_sources_list(recipe))
        (rootfs / "etc/resolv.conf").write_text("")
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        _import_rootfs(
            cfg,
            rootfs,
            image,
            [
                'CMD ["/bin/bash"]',
                "ENV LANG=C.UTF-8",
                f"LABEL {RECIPE_LABEL}={recipe_hash}",
                "LABEL org.specfleet.lab.emulated=true",
            ],
        )
    finally:
        safe_rmtree(str(work))
    drop_replaced(cfg, old_id, image)
    return BuildResult(image, True, time.monotonic() - started, recipe_hash)


# ---- unit ----------------------------------------------------------------------------
@dataclass(frozen=True)
class UnitFlavour:
    """One unit image: its recipe directory (recipe.yml with the packages, Dockerfile,
    rootfs/), the intermediate image with the packages, the image, and what its build
    context takes from elsewhere (the root-login unit's rootfs; single-source files)."""

    recipe_dir: str
    pkgs_image: str
    image: str
    # Files of lab/images/unit/rootfs the context starts from (None: not used), minus these.
    shared_rootfs_excludes: tuple[str, ...] | None = None
    # Context path under rootfs/ -> source path under lab/images.
    extra_files: dict[str, str] = field(default_factory=dict)


ROOT_UNIT = UnitFlavour(
    recipe_dir="unit",
    pkgs_image=UNIT_PKGS_IMAGE,
    image=UNIT_IMAGE,
    # The root-login unit keeps its runtime shim preinstalled (the stock unit gets it from
    # the lab mirror's emulated nvidia-container-toolkit package).
    extra_files={
        SHIM_REL: f"{TOOLKIT_DIR}/files/{SHIM_REL}",
        SYSCTL_WRAPPER_REL: f"unit/rootfs/{PAGE_CACHE_REL}",
    },
)
STOCK_UNIT = UnitFlavour(
    recipe_dir="unit-stock",
    pkgs_image=STOCK_PKGS_IMAGE,
    image=STOCK_UNIT_IMAGE,
    # Same init, fstab and motd as the root-login unit. Not its /etc/default/docker (a
    # docker.io conffile: present beforehand, dpkg would ask about it on install; the stock
    # unit's ulimit workaround is an LSB init hook instead) nor its README.
    shared_rootfs_excludes=("etc/default/docker", "etc/specfleet-lab/README"),
    extra_files={SYSCTL_WRAPPER_REL: f"unit/rootfs/{PAGE_CACHE_REL}"},
)
UNIT_FLAVOURS = {"root": ROOT_UNIT, "stock": STOCK_UNIT}


def unit_suite(cfg: LabConfig, flavour: UnitFlavour = ROOT_UNIT) -> str:
    """The Debian suite a unit image is built on (`base:` in its recipe.yml)."""
    return str(_load_recipe(cfg.images_dir / flavour.recipe_dir / "recipe.yml").get("base", "trixie"))


def unit_pkgs_hash(cfg: LabConfig, flavour: UnitFlavour = ROOT_UNIT) -> str:
    parent = base_recipe_hash(cfg, unit_suite(cfg, flavour))
    return tree_hash([cfg.images_dir / flavour.recipe_dir / "recipe.yml"], parent=parent)


def context_files(images_dir: Path, flavour: UnitFlavour) -> dict[str, Path]:
    """The unit's `docker build` context: relative path -> source file. Later sources win:
    shared rootfs, then the flavour's own directory (Dockerfile, rootfs/), then extras."""
    files: dict[str, Path] = {}

    def add_tree(root: Path, prefix: str, skip: tuple[str, ...] = ()) -> None:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            rel = str(path.relative_to(root))
            if rel not in skip:
                files[f"{prefix}{rel}"] = path

    if flavour.shared_rootfs_excludes is not None:
        add_tree(images_dir / ROOT_UNIT.recipe_dir / "rootfs", "rootfs/", flavour.shared_rootfs_excludes)
    # recipe.yml is the pkgs image's input (its hash is the parent hash), not the context's.
    add_tree(images_dir / flavour.recipe_dir, "", ("recipe.yml",))
    for rel, source in flavour.extra_files.items():
        files[f"rootfs/{rel}"] = images_dir / source
    return dict(sorted(files.items()))


def files_hash(files: dict[str, Path], parent: str = "") -> str:
    """sha256 over parent hash + every file (relative name, mode bit x, content)."""
    digest = hashlib.sha256(parent.encode())
    for rel, path in sorted(files.items()):
        digest.update(rel.encode() + b"\0")
        digest.update(b"x" if path.stat().st_mode & 0o111 else b"-")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def unit_recipe_hash(cfg: LabConfig, flavour: UnitFlavour = ROOT_UNIT) -> str:
    return files_hash(context_files(cfg.images_dir, flavour), parent=unit_pkgs_hash(cfg, flavour))


def stage_context(files: dict[str, Path], dest: Path) -> None:
    """Copy the context files into dest, keeping the executable bit."""
    for rel, source in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o755 if source.stat().st_mode & 0o111 else 0o644)


def build_unit_pkgs_image(cfg: LabConfig, force: bool = False, flavour: UnitFlavour = ROOT_UNIT) -> BuildResult:
    """Base + the unit's Debian packages (the slow, network-using part of the unit image)."""
    image = flavour.pkgs_image
    recipe_hash = unit_pkgs_hash(cfg, flavour)
    if not force and image_current(cfg, image, recipe_hash):
        return BuildResult(image, False, 0.0, recipe_hash)
    recipe = _load_recipe(cfg.images_dir / flavour.recipe_dir / "recipe.yml")
    base_image = _base(unit_suite(cfg, flavour))[1]
    old_id = image_id(cfg, image)
    started = time.monotonic()
    work = work_dir(cfg, flavour.recipe_dir)
    rootfs = work / "rootfs"
    rootfs.mkdir()
    try:
        export_image(cfg, base_image, rootfs)
        _chroot_apt_install(rootfs, recipe["packages"])
        # Host keys come from lab/build/host-keys per unit name (lab.py); ssh-keygen -A in
        # the unit's init makes them only where the lab did not (e.g. under Molecule).
        for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        _import_rootfs(
            cfg,
            rootfs,
            image,
            ['CMD ["/bin/bash"]', "ENV LANG=C.UTF-8", f"LABEL {RECIPE_LABEL}={recipe_hash}"],
        )
    finally:
        safe_rmtree(str(work))
    drop_replaced(cfg, old_id, image)
    return BuildResult(image, True, time.monotonic() - started, recipe_hash)


def build_unit_image(cfg: LabConfig, force: bool = False, flavour: UnitFlavour = ROOT_UNIT) -> BuildResult:
    """A unit image: its pkgs image + the staged context via a `--network none` build."""
    pkgs = build_unit_pkgs_image(cfg, force=force, flavour=flavour)
    recipe_hash = unit_recipe_hash(cfg, flavour)
    if not force and image_current(cfg, flavour.image, recipe_hash):
        return BuildResult(flavour.image, False, pkgs.seconds, recipe_hash)
    old_id = image_id(cfg, flavour.image)
    started = time.monotonic()
    work = work_dir(cfg, f"{flavour.recipe_dir}-context")
    try:
        stage_context(context_files(cfg.images_dir, flavour), work)
        docker(
            cfg,
            [
                "build",
                "--network",
                "none",
                "--build-arg",
                f"PKGS_IMAGE={flavour.pkgs_image}",
                "--label",
                f"{RECIPE_LABEL}={recipe_hash}",
                "-t",
                flavour.image,
                str(work),
            ],
            timeout=1800,
        )
    finally:
        safe_rmtree(str(work))
    drop_replaced(cfg, old_id, flavour.image)
    return BuildResult(flavour.image, True, pkgs.seconds + time.monotonic() - started, recipe_hash)


def build_stock_unit_image(cfg: LabConfig, force: bool = False) -> BuildResult:
    return build_unit_image(cfg, force=force, flavour=STOCK_UNIT)


# ---- engine images -------------------------------------------------------------------
def engine_refs() -> list[str]:
    """Image refs the plan may choose (specfleet/data/images.yml), which the emulator stands
    in for; pin-only entries are real lab images of their own (the vLLM-CPU engine)."""
    return [image.ref for image in load_catalog().images if not image.pin_only]


def engine_vllm_versions() -> dict[str, str]:
    """ref -> the vLLM version the matrix gives it, for the vLLM images that have one (the
    emulator then emulates that version; the others, its default)."""
    return {image.ref: image.vllm_version for image in load_catalog().images
            if not image.pin_only and image.backend == "vllm" and image.vllm_version}


def version_layer(version: str) -> bytes:
    """The Dockerfile of an engine image that emulates vLLM ``version``."""
    return (f"FROM {ENGINE_LOCAL}\n"
            f"ENV SPECFLEET_EMULATOR_VLLM_VERSION={version}\n"
            f"LABEL org.specfleet.lab.emulated-vllm-version={version}\n").encode()


def mirror_ref(ref: str, mirror: str) -> str:
    """`ghcr.io/nvidia-ai-iot/vllm:tag` -> `<mirror>/nvidia-ai-iot/vllm:tag`.

    The first path component is a registry host when it has a dot, a colon or is
    `localhost` (Docker's rule); Docker Hub refs keep their whole path.
    """
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        ref = rest
    return f"{mirror}/{ref}"


def engine_image_hash(cfg: LabConfig) -> str:
    return tree_hash([cfg.emulator_dir], parent=base_recipe_hash(cfg, ENGINE_SUITE))


ENGINE_LOCAL = "specfleet-lab/engine:current"


def build_engine_images(cfg: LabConfig, force: bool = False) -> tuple[BuildResult, list[str]]:
    """Build the vLLM emulator image once and tag it with every real ref from images.yml.

    The content is lab/emulator/ (stdlib-Python vLLM emulator, entrypoint
    `specfleet-emulator-entrypoint`) built FROM the bookworm base with `--network none`.
    Returns the build result and the local tags (real names, e.g. vllm/vllm-openai:v0.26.0);
    registry.push_engine_images() puts them behind the LAN mirror.
    """
    if not (cfg.emulator_dir / "Dockerfile").exists():
        raise LabError(f"{cfg.emulator_dir}/Dockerfile is missing: the engine image is the vLLM emulator")
    recipe_hash = engine_image_hash(cfg)
    refs = engine_refs()
    started = time.monotonic()
    built = force or not image_current(cfg, ENGINE_LOCAL, recipe_hash)
    # What a rebuild replaces: the old build and its version layers (its children).
    old_id = image_id(cfg, ENGINE_LOCAL) if built else None
    old_layers = {ref: image_id(cfg, ref) for ref in engine_vllm_versions() if ref in refs} if built else {}
    if built:
        docker(
            cfg,
            [
                "build",
                "--network",
                "none",
                "--build-arg",
                f"BASE_IMAGE={_base(ENGINE_SUITE)[1]}",
                "--label",
                f"{RECIPE_LABEL}={recipe_hash}",
                "--label",
                "org.specfleet.lab.emulated=true",
                "-t",
                ENGINE_LOCAL,
                str(cfg.emulator_dir),
            ],
            timeout=1800,
        )
    # The real names on the new build first, so the old one is no longer tagged anywhere; then
    # the old version layers go before the old build itself.
    _tag_engine_refs(cfg, refs)
    for ref, old_layer in old_layers.items():
        drop_replaced(cfg, old_layer, ref)
    drop_replaced(cfg, old_id, ENGINE_LOCAL)
    return BuildResult(ENGINE_LOCAL, built, time.monotonic() - started, recipe_hash), refs


def _tag_engine_refs(cfg: LabConfig, refs: list[str]) -> None:
    """Each real name on the emulator: its version layer where the matrix gives it a vLLM
    version (cached by the build: a second call adds nothing), the emulator itself otherwise."""
    versions = engine_vllm_versions()
    for ref in refs:
        if ref in versions:
            docker_input(cfg, ["build", "--network", "none", "-q", "-t", ref, "-"], version_layer(versions[ref]))
        else:
            docker(cfg, ["tag", ENGINE_LOCAL, ref])
