"""`specfleet store`: fill the controller-side stores on a connected machine, before the event.

The units never fetch anything themselves: the roles copy what the controller holds. Two
commands put it there, each in the place and layout its role reads:

- ``store add REPO_ID`` downloads a Hugging Face repo with ``huggingface_hub`` into
  ``STORE/hub`` (the hub cache layout, ``models--org--name/{blobs,snapshots,refs}``, that
  roles/specfleet_hf_cache copies) and writes its manifest with the code `specfleet cache
  manifest` runs. The manifest says "this entry is complete": it is taken away while the
  download may change the entry and written again, atomically, only after it finished.
- ``store tiktoken`` downloads the encodings roles/specfleet_tiktoken installs, verifying each
  file's sha256 before it is renamed into place.

What these commands need from the roles (the default store and encodings directories, the
encodings and their checksums, the URL prefix) is read from the roles' own defaults/main.yml,
in the collection beside the controller's module_utils: one source for the role and the CLI.
An inventory that sets its own specfleet_tiktoken_encodings (``store tiktoken -i``) is the
table the role checks on its units, so the command checks the same one.

A gated repo's token comes from the environment (HF_TOKEN, read by huggingface_hub itself);
it is never taken on a command line and never printed.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml
from ansible_collections.specfleet.fleet.plugins.module_utils import unit_layout
from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import replacing, write_file
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import sha256_file

from specfleet import cache
from specfleet.variables import shown

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

HUB_SUBDIR = "hub"  # the store's entries, as roles/specfleet_hf_cache reads them
HUB_SITE = "https://huggingface.co"

# The collection's root (roles/, plugins/, playbooks/): module_utils sits at plugins/module_utils.
COLLECTION_ROOT = Path(unit_layout.__file__).resolve().parents[2]

# The roles name their controller folders below specfleet_files_dir, unset files/ beside the
# playbooks' folder (the checkout's files/); the CLI runs in the folder that holds files/ (the
# checkout, or the event folder whose inventory sets specfleet_files_dir: "{{ inventory_dir }}/files").
FILES_DIR_DEFAULT = "{{ specfleet_files_dir | default(playbook_dir ~ '/../files') }}/"
FILES_DIR = "files/"

# Errors of the filesystem that mean "this store cannot be written", not "the download failed".
_STORE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR}

# An encoding is one small file (o200k_base is 3.6 MB); a mirror streaming more than this is
# broken, and stopping early keeps it from filling the disk before the checksum refuses it.
TIKTOKEN_MAX_BYTES = 64 * 2**20

_SHA256 = re.compile(r"[0-9a-f]{64}")
_ENCODING_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class StoreError(Exception):
    """A failure to report in one line, and the exit code it means."""

    def __init__(self, message: str, code: int = EXIT_FAILED):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- the roles' defaults


def role_defaults(role: str) -> dict[str, Any]:
    return yaml.safe_load((COLLECTION_ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def checkout_path(value: str, variable: str) -> str:
    """``files/hf-store`` for a role default ``{{ specfleet_files_dir | default(...) }}/hf-store``."""
    if not value.startswith(FILES_DIR_DEFAULT) or "{{" in value[len(FILES_DIR_DEFAULT) :]:
        raise ValueError(f"{variable}: {value!r} is not a path below {FILES_DIR_DEFAULT!r}")
    return FILES_DIR + value[len(FILES_DIR_DEFAULT) :]


def default_store() -> str:
    return checkout_path(role_defaults("specfleet_hf_cache")["specfleet_hf_cache_store"], "specfleet_hf_cache_store")


def default_image_store() -> str:
    return checkout_path(role_defaults("specfleet_image")["specfleet_image_store"], "specfleet_image_store")


def default_tiktoken_dir() -> str:
    source = role_defaults("specfleet_tiktoken")["specfleet_tiktoken_source_dir"]
    return checkout_path(source, "specfleet_tiktoken_source_dir")


# ---------------------------------------------------------------- the store's directories


def prepare_dirs(dirs: Sequence[Path]) -> list[Path]:
    """Create ``dirs`` and prove each takes a new file, before anything is downloaded: a
    store that cannot be written fails here, with nothing written. Directories this call
    created are removed again when a later one fails; else they are returned, outermost first."""
    created: list[Path] = []
    for directory in dirs:
        try:
            missing = [path for path in (directory, *directory.parents) if not path.exists()]
            created += reversed(missing)  # outermost first: removed in reverse, each is empty by then
            directory.mkdir(parents=True, exist_ok=True)
            # Creating a file is the test that holds: os.access answers for the real uid, from the
            # mode bits, and cannot know what an ACL, a read-only mount or a network filesystem refuses.
            with tempfile.TemporaryFile(dir=directory):
                pass
        except OSError as exc:
            remove_empty(created)
            reason = exc.strerror or exc
            raise StoreError(f"{directory}: cannot write here ({reason}); nothing was written", EXIT_BAD_INPUT) from exc
    return created


def remove_empty(created: Sequence[Path]) -> None:
    """Remove the directories of ``created`` (outermost first) that are empty, innermost first."""
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:
            pass  # holds something now, or gone already


# ---------------------------------------------------------------- Hugging Face repos


def access_refused(repo_id: str, status: int) -> str:
    """What to do when the Hub refuses a repo: 401 without a (valid) token, 403 with one whose
    account may not read it (the licence not accepted, or the request not yet approved)."""
    licence = f"{HUB_SITE}/{repo_id}"
    if status == 403:
        return (
            f"{repo_id}: the Hub refused the token in HF_TOKEN (403): its account may not read this gated repo. "
            f"Accept the licence at {licence} with that account (and wait for approval if the repo asks for it), "
            "or set HF_TOKEN to a read token of an account that did. Nothing was added to the store."
        )
    return (
        f"{repo_id}: the Hub refused access without a valid token ({status}): the repo is gated or private, or "
        f"does not exist. Accept its licence at {licence} with your Hugging Face account and set HF_TOKEN to a "
        "read token of that account. Nothing was added to the store."
    )


def repo_missing(repo_id: str) -> str:
    return (
        f"{repo_id}: no such model repo on the Hub (404); check the id, as in {HUB_SITE}/{repo_id}. "
        "Nothing was added to the store."
    )


def hub_failure(repo_id: str, revision: str | None, store: Path, exc: BaseException) -> StoreError | None:
    """The one-line report of a failed download, or None for a failure nobody anticipated
    (which then shows its traceback)."""
    import httpx2
    from huggingface_hub import constants, errors

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, errors.RevisionNotFoundError):
        return StoreError(f"{repo_id}: the Hub has no revision {revision!r} of this repo. Nothing was added.")
    if isinstance(exc, errors.HfHubHTTPError) and status in (401, 403):
        # Gated (GatedRepoError), private, or for a caller without a token even missing: the Hub
        # answers 401 then rather than say whether the repo exists.
        return StoreError(access_refused(repo_id, status))
    if isinstance(exc, errors.RepositoryNotFoundError):
        return StoreError(repo_missing(repo_id))
    if isinstance(exc, errors.HfHubHTTPError):
        return StoreError(f"{repo_id}: the Hub answered HTTP {status}; try again later. Nothing was added.")
    unreachable = (errors.LocalEntryNotFoundError, errors.IncompleteSnapshotError, httpx2.TransportError)
    if isinstance(exc, unreachable):
        cause = exc.__cause__ or exc
        return StoreError(
            f"{repo_id}: the Hub at {constants.ENDPOINT} could not be reached ({type(cause).__name__}); "
            "what was downloaded stays in the store and the next run resumes it. No manifest was written."
        )
    if isinstance(exc, OSError) and exc.errno in _STORE_ERRNOS:
        return StoreError(
            f"{store}: cannot write the store ({exc.strerror}: {exc.filename}); no manifest was written",
            EXIT_BAD_INPUT,
        )
    return None


def links_leaving(entry: Path) -> list[str]:
    """Symlinks below ``entry`` that point outside it (or anywhere absolute). A role copies one
    entry to a unit, where such a link would dangle."""
    leaving = []
    for directory, subdirs, names in os.walk(entry):
        for name in subdirs + names:
            path = Path(directory, name)
            if not path.is_symlink():
                continue
            target = os.readlink(path)
            inside = os.path.normpath(os.path.join(os.path.relpath(directory, entry), target))
            if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
                leaving.append(f"{path.relative_to(entry)} -> {target}")
    return sorted(leaving)


def pin_main(entry: Path, commit: str) -> None:
    """Point ``refs/main`` at ``commit``. The units serve offline with the default revision,
    which huggingface_hub resolves through refs/main (and specfleet_hf_cache links TensorRT-LLM's
    checkpoints through it), so a repo added at another revision must be found there."""
    ref = entry / "refs" / "main"
    ref.parent.mkdir(parents=True, exist_ok=True)
    write_file(ref, commit)  # no newline, as huggingface_hub writes refs


def _hub_without_shared_blobs() -> None:
    """Turn huggingface_hub's shared blob store off: for Xet files it keeps one copy per cache
    in STORE/hub/blobs/ and makes a repo's blobs/<etag> a link to it, outside the repo's
    folder, which is all a role copies to a unit. (huggingface_hub is imported when a command
    needs it: every other `specfleet` command would pay for it otherwise.)"""
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_SHARED_BLOBS = True


def entry_listing(entry: Path) -> dict[str, tuple[int, int, str | None]]:
    """Every path below ``entry`` with its size, mtime and link target: what tells whether a
    download changed the entry (huggingface_hub only adds files and renames them into place)."""
    listing: dict[str, tuple[int, int, str | None]] = {}
    for directory, subdirs, names in os.walk(entry):
        for name in subdirs + names:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            target = os.readlink(path) if os.path.islink(path) else None
            listing[os.path.relpath(path, entry)] = (info.st_size, info.st_mtime_ns, target)
    return listing


def download(repo_id: str, revision: str | None, store: Path) -> str:
    """Download ``repo_id`` into ``STORE/hub``; the commit it is at. Resumes: files already
    there are not fetched again, and a file is renamed into place only once complete."""
    from huggingface_hub import snapshot_download

    try:
        snapshot = snapshot_download(repo_id, revision=revision, cache_dir=store / HUB_SUBDIR)
    except Exception as exc:
        failure = hub_failure(repo_id, revision, store, exc)
        if failure is None:
            raise
        raise failure from exc
    commit = Path(snapshot).name
    if revision not in (None, "main"):
        pin_main(store / HUB_SUBDIR / cache.hf_repo_dir(repo_id), commit)
    return commit


# A Hub revision: a 40-hex commit, a pull request's ref, or a branch or tag name as git's
# check-ref-format allows one. huggingface_hub writes a revision it resolves to refs/<revision>
# below the store, so one with '..' or a leading '/' would be written outside it.
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_PR_REF = re.compile(r"^refs/pr/[1-9][0-9]*$")
_REF_NAME_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def revision_problem(revision: str) -> str | None:
    """Why ``revision`` is not a branch, a tag, a commit or a pull request ref, else None."""
    if _COMMIT.match(revision) or _PR_REF.match(revision):
        return None
    if (not revision or len(revision) > 255 or _REF_NAME_FORBIDDEN.search(revision) or revision == "@"
            or revision.startswith(("-", "/")) or revision.endswith(("/", ".", ".lock"))
            or any(part.startswith(".") for part in revision.split("/"))):
        return (f"--revision {shown(revision)}: not a branch, tag or commit (a 40-hex commit, refs/pr/N, or a "
                "name without '..', blanks, '~^:?*[\\', a leading '-' or '/', or a part starting with '.')")
    return None


def add_repo(repo_id: str, store: Path, revision: str | None) -> dict[str, Any]:
    """Download ``repo_id`` into ``store`` and write its manifest; a summary of what the
    store now holds for it."""
    _hub_without_shared_blobs()
    from huggingface_hub import constants
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise StoreError(f"{repo_id!r}: not a Hugging Face repo id (org/name): {exc}", EXIT_BAD_INPUT) from exc
    if revision is not None and (problem := revision_problem(revision)):
        raise StoreError(problem, EXIT_BAD_INPUT)
    if constants.HF_HUB_OFFLINE:
        raise StoreError("HF_HUB_OFFLINE is set: `store add` downloads; unset it", EXIT_BAD_INPUT)
    created = prepare_dirs([store / HUB_SUBDIR, store / cache.MANIFESTS])
    name = cache.hf_repo_dir(repo_id)
    entry = store / HUB_SUBDIR / name
    locks = store / HUB_SUBDIR / ".locks"
    created += [path for path in (entry, locks, locks / name) if not path.exists()]
    manifest_file = cache.manifest_path(store, name)
    # The download may change the entry: until it has finished, no manifest may claim the
    # entry is complete (a role would copy a half-updated tree as verified). The old manifest
    # is held aside, and put back when a failed download left the entry as it was (the Hub
    # refused, a mistyped revision), so a failed retry does not lose a good entry.
    held = manifest_file.with_name(f".{manifest_file.name}.held")
    held.unlink(missing_ok=True)  # left by a killed run: the entry may have changed since
    before = entry_listing(entry)
    if manifest_file.exists():
        manifest_file.replace(held)
    try:
        commit = download(repo_id, revision, store)
    except BaseException:  # Ctrl-C too
        if held.exists() and entry_listing(entry) == before:
            held.replace(manifest_file)
        remove_unfetched(created, entry)
        raise
    finally:
        held.unlink(missing_ok=True)
    leaving = links_leaving(entry)
    if leaving:
        raise StoreError(f"{entry}: links out of the entry ({', '.join(leaving[:3])}); no manifest was written")
    manifest = cache.write_manifest(store, HUB_SUBDIR, name)
    return {
        "repo": repo_id, "name": name, "revision": commit, "id": manifest["id"], "files": len(manifest["files"]),
        "bytes": sum(f["size"] for f in manifest["files"].values()), "manifest": str(manifest_file),
    }


def remove_unfetched(created: Sequence[Path], entry: Path) -> None:
    """After a failed download, what this command made that holds no byte of the repo: a new
    entry without blobs (the Hub refused, no such repo or revision), huggingface_hub's lock
    files for it, and the store's empty directories. A download that failed midway keeps its
    blobs, complete or partial: the next run resumes from them."""
    if entry in created and not any((entry / "blobs").iterdir() if (entry / "blobs").is_dir() else ()):
        shutil.rmtree(entry, ignore_errors=True)
    locks = entry.parent / ".locks" / entry.name
    if locks in created:
        shutil.rmtree(locks, ignore_errors=True)  # lock files only, of this repo
    remove_empty(created)


def run_command(command: str, args: argparse.Namespace, work: Callable[[], Any], text: Callable[[Any], str]) -> int:
    """One `specfleet store` command: ``work`` does it; its result printed as JSON (--format json)
    or as ``text`` gives it; a StoreError is one line on stderr and its exit code."""
    try:
        result = work()
    except StoreError as exc:
        print(f"specfleet store {command}: {exc}", file=sys.stderr)
        return exc.code
    print(json.dumps(result, indent=2) if args.format == "json" else text(result))
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    return run_command(
        "add", args, lambda: add_repo(args.repo_id, Path(args.store), args.revision),
        lambda summary: (f"{summary['repo']} at {summary['revision']}: {summary['files']} files, "
                         f"{summary['bytes'] / 2**30:.2f} GiB in {Path(args.store) / HUB_SUBDIR / summary['name']}; "
                         f"manifest {summary['manifest']} ({summary['id']})"))


# ---------------------------------------------------------------- tiktoken encodings


@dataclass(frozen=True)
class Encoding:
    name: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name}.tiktoken"  # what the role reads from specfleet_tiktoken_source_dir


def tiktoken_table(listed: Any = None) -> tuple[list[Encoding], str]:
    """The encodings roles/specfleet_tiktoken installs and the URL prefix they are published
    under, from the role's defaults (the one list of them); ``listed``: an inventory's own
    specfleet_tiktoken_encodings instead, the table the role then checks on its units."""
    defaults = role_defaults("specfleet_tiktoken")
    table = defaults["specfleet_tiktoken_encodings"] if listed is None else listed
    if not isinstance(table, list) or not all(isinstance(e, dict) and {"name", "sha256"} <= set(e) for e in table):
        raise ValueError(f"specfleet_tiktoken_encodings: {table!r} is not a list of {{name, sha256}}")
    encodings = [Encoding(str(e["name"]), str(e["sha256"])) for e in table]
    prefix = str(defaults["specfleet_tiktoken_url_prefix"])
    for encoding in encodings:
        if not _ENCODING_NAME.fullmatch(encoding.name) or not _SHA256.fullmatch(encoding.sha256):
            raise ValueError(f"specfleet_tiktoken_encodings: {encoding} is not a file name and a sha256")
    if "{{" in prefix:
        raise ValueError(f"specfleet_tiktoken_url_prefix: {prefix!r} is templated; the CLI reads it literally")
    return encodings, prefix


def inventory_table(variables: dict[str, dict[str, Any]], inventory: str) -> Any:
    """The specfleet_tiktoken_encodings an inventory sets for its hosts (None: it sets none, the
    role's defaults apply). Hosts that disagree are refused: one folder holds one table. An
    inventory without hosts is refused too (a wrong path, not an event without units)."""
    if not variables:
        raise StoreError(f"{inventory}: no hosts", EXIT_BAD_INPUT)
    tables: dict[str, list[str]] = {}
    for host, host_vars in variables.items():
        if "specfleet_tiktoken_encodings" in host_vars:
            tables.setdefault(json.dumps(host_vars["specfleet_tiktoken_encodings"], sort_keys=True), []).append(host)
    if len(tables) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in tables.values())
        raise StoreError(f"{inventory}: specfleet_tiktoken_encodings differs between hosts ({groups}); "
                         "give each table its own inventory and --dir", EXIT_BAD_INPUT)
    return json.loads(next(iter(tables))) if tables else None


def encoding_url(prefix: str, encoding: Encoding) -> str:
    return prefix + ("" if prefix.endswith("/") else "/") + encoding.filename


def has_checksum(path: Path, expected: str) -> bool:
    return path.is_file() and sha256_file(str(path)) == expected


def mismatch_message(filename: str, expected: str, got: str, url: str) -> str:
    return f"{filename}: sha256 {got}, expected {expected} (from {url}); the download was discarded"


def copy_verified(source: IO[bytes], target: Path, expected: str, url: str, limit: int = TIKTOKEN_MAX_BYTES) -> None:
    """Write ``source`` to ``target`` only if its sha256 is ``expected``: the bytes land in a
    temporary file beside it and are renamed into place after the check, so ``target`` is
    either the verified file or untouched, and a refused download leaves nothing behind."""
    digest = hashlib.sha256()
    size = 0
    with replacing(target, 0o644, binary=True) as out:  # an error inside leaves target untouched
        for chunk in iter(lambda: source.read(1 << 20), b""):
            size += len(chunk)
            if size > limit:
                raise StoreError(f"{target.name}: more than {limit} bytes from {url}; not an encoding")
            digest.update(chunk)
            out.write(chunk)
        if digest.hexdigest() != expected:
            raise StoreError(mismatch_message(target.name, expected, digest.hexdigest(), url))


Opener = Callable[[str], IO[bytes]]


def _open_url(url: str) -> IO[bytes]:
    return urllib.request.urlopen(url, timeout=60)


def fetch_tiktoken(
    directory: Path, prefix: str, encodings: Sequence[Encoding], opener: Opener = _open_url
) -> list[dict]:
    """Put every encoding in ``directory``, skipping those already there with the right
    sha256; what happened to each."""
    prepare_dirs([directory])
    results = []
    for encoding in encodings:
        target = directory / encoding.filename
        url = encoding_url(prefix, encoding)
        if has_checksum(target, encoding.sha256):
            results.append({"name": encoding.name, "file": str(target), "result": "present"})
            continue
        try:
            with opener(url) as response:
                copy_verified(response, target, encoding.sha256, url)
        except urllib.error.HTTPError as exc:
            raise StoreError(f"{encoding.filename}: {url} answered HTTP {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise StoreError(f"{encoding.filename}: cannot fetch {url} ({reason})") from exc
        except OSError as exc:  # writing the file: the directory passed prepare_dirs, so a full disk
            raise StoreError(f"{target}: cannot write ({exc.strerror or exc})", EXIT_BAD_INPUT) from exc
        results.append({"name": encoding.name, "file": str(target), "result": "downloaded"})
    return results


def tiktoken_command(args: argparse.Namespace) -> list[dict[str, str]]:
    listed = None
    if args.inventory:
        from specfleet.inventory import host_variables

        try:
            variables = host_variables(args.inventory)
        except Exception as exc:  # Ansible's own parse errors: one line, not a traceback
            raise StoreError(f"{args.inventory}: cannot read the inventory ({exc})", EXIT_BAD_INPUT) from exc
        listed = inventory_table(variables, args.inventory)
    try:
        encodings, prefix = tiktoken_table(listed)
    except ValueError as exc:
        raise StoreError(f"{args.inventory or 'roles/specfleet_tiktoken'}: {exc}", EXIT_BAD_INPUT) from exc
    if args.url_prefix:
        if not args.url_prefix.startswith(("http://", "https://")):
            raise StoreError(f"--url-prefix {args.url_prefix!r}: not an http(s) URL", EXIT_BAD_INPUT)
        prefix = args.url_prefix
    return fetch_tiktoken(Path(args.dir), prefix, encodings)


def cmd_tiktoken(args: argparse.Namespace) -> int:
    return run_command("tiktoken", args, lambda: tiktoken_command(args),
                       lambda results: "\n".join(f"{result['file']}: {result['result']}" for result in results))


def image_command(args: argparse.Namespace) -> dict[str, Any]:
    tarball = Path(args.tarball)
    if not tarball.is_file():
        raise StoreError(f"{tarball}: no such tarball (make it with `docker save -o {tarball} IMAGE`)", EXIT_BAD_INPUT)
    if args.part_mib < 1:
        raise StoreError(f"--part-mib {args.part_mib}: must be at least 1", EXIT_BAD_INPUT)
    try:
        return cache.store_image(tarball, Path(args.store), args.part_mib << 20)
    except ValueError as exc:
        raise StoreError(str(exc), EXIT_BAD_INPUT) from exc
    except OSError as exc:
        raise StoreError(f"{args.store}: cannot write the entry ({exc.strerror or exc})", EXIT_BAD_INPUT) from exc


def cmd_image(args: argparse.Namespace) -> int:
    return run_command(
        "image", args, lambda: image_command(args),
        lambda result: (f"{args.tarball}: {'cut into' if result['changed'] else 'already in the store as'} "
                        f"{args.store}/{cache.IMAGE_SUBDIR}/{result['name']} ({result['parts']} parts, "
                        f"{result['bytes']} bytes, manifest {result['id']})"))


# ---------------------------------------------------------------- command line


def register(subparsers: argparse._SubParsersAction) -> None:
    store_default, tiktoken_default = default_store(), default_tiktoken_dir()
    parser = subparsers.add_parser(
        "store",
        help="fill the controller's stores (models, tiktoken encodings) on a connected machine",
        description="Download what the units will need into the controller's stores, where the roles "
        "copy it from. Run it in the folder that holds files/ (the checkout, or the folder whose files/ "
        "your inventory's specfleet_files_dir names): the default directories are the roles' defaults below it.",
    )
    commands = parser.add_subparsers(dest="store_command", required=True)

    add = commands.add_parser(
        "add",
        help="download a Hugging Face repo into the model store and write its manifest",
        description="Download REPO_ID with huggingface_hub into STORE/hub (hub cache layout, what "
        "specfleet_hf_cache copies) and write STORE/manifests/models--ORG--NAME.json as `specfleet cache "
        "manifest` does. Resumes a partial download. Gated repos: accept the licence on huggingface.co and "
        "set HF_TOKEN in the environment (never on the command line). Exit 1 when the Hub refuses or does "
        "not have the repo, 2 when the store cannot be written.",
    )
    add.add_argument("repo_id", metavar="REPO_ID", help="Hugging Face model repo, org/name")
    add.add_argument(
        "--store", default=store_default, metavar="DIR",
        help=f"model store (default {store_default}, relative to the current directory: the "
        "specfleet_hf_cache_store default, specfleet_files_dir/hf-store)",
    )
    add.add_argument(
        "--revision", metavar="REV",
        help="branch, tag or commit to download (default main); refs/main then points at it, as the units "
        "serve the default revision",
    )
    add.add_argument("--format", choices=("text", "json"), default="text")
    add.set_defaults(func=cmd_add)

    image = commands.add_parser(
        "image",
        help="cut a `docker save` tarball into the image store, for the unit-to-unit fan-out",
        description="Make TARBALL the entry STORE/images/NAME (NAME: the file name without .tar) of parts "
        "of equal size and write its manifest, as specfleet_image does before it fans an image out unit to "
        "unit: units pass each verified part on while they receive the rest, and load the image with "
        "`cat part-* | docker load`. Nothing is done when the entry was cut from this file already (same "
        "size and modification time). The entry appears whole or not at all.",
    )
    image.add_argument("tarball", metavar="TARBALL", help="docker save output, e.g. files/images/NAME.tar")
    image_store_default = default_image_store()
    image.add_argument(
        "--store", default=image_store_default, metavar="DIR",
        help=f"image store (default {image_store_default}, relative to the current directory: the "
        "specfleet_image_store default, specfleet_files_dir/image-store)",
    )
    image.add_argument("--part-mib", type=int, default=64, metavar="MIB",
                       help="size of each part in MiB (default %(default)s)")
    image.add_argument("--format", choices=("text", "json"), default="text")
    image.set_defaults(func=cmd_image)

    tiktoken = commands.add_parser(
        "tiktoken",
        help="download the tiktoken encodings specfleet_tiktoken installs, sha256-verified",
        description="Download each encoding of specfleet_tiktoken_encodings (the role's defaults, or the "
        "inventory's with -i) from specfleet_tiktoken_url_prefix into DIR, keeping a file only when its sha256 "
        "is the listed one; files already there with the right sha256 are not fetched again.",
    )
    tiktoken.add_argument(
        "--dir", default=tiktoken_default, metavar="DIR",
        help=f"encodings directory (default {tiktoken_default}, relative to the current directory: the "
        "specfleet_tiktoken_source_dir default, specfleet_files_dir/tiktoken)",
    )
    tiktoken.add_argument(
        "-i", "--inventory", metavar="INVENTORY",
        help="the encodings and sha256 this inventory's specfleet_tiktoken_encodings lists (the table the role "
        "checks on its units), where it sets one; else the role's",
    )
    tiktoken.add_argument(
        "--url-prefix", metavar="URL",
        help="fetch from this prefix instead (a site mirror); the checksums stay the table's",
    )
    tiktoken.add_argument("--format", choices=("text", "json"), default="text")
    tiktoken.set_defaults(func=cmd_tiktoken)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specfleet")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["store", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
