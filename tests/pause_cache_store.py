"""Run the cache_store module (its main(), as Ansible would) in this process, and stop it,
alive, just before a chosen file system step, for a test to SIGKILL it there.

    python tests/pause_cache_store.py ARGS_JSON STEP

ARGS_JSON is a file holding the module's arguments. STEP names an ``os`` function (rename,
replace, unlink...): its first call on a path below the store's ``root`` (or relative to a
directory's descriptor, as shutil.rmtree removes a tree) prints ``paused STEP PATH`` on
stdout and sleeps until the process is killed. A run that never reaches the step prints
the module's result instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# This tree's controller and collection, whatever checkout the venv's editable install names.
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from ansible.module_utils.testing import patch_module_args  # noqa: E402


def pause_before(step: str, root: str) -> None:
    real = getattr(os, step)

    def paused(*args, **kwargs):
        path = os.fspath(args[0])
        if "dir_fd" in kwargs or os.path.abspath(path).startswith(root + os.sep):
            print(f"paused {step} {path}", flush=True)
            while True:
                time.sleep(60)
        return real(*args, **kwargs)

    setattr(os, step, paused)


def main() -> None:
    args = json.loads(Path(sys.argv[1]).read_text())
    spec = importlib.util.spec_from_file_location("cache_store", REPO / "plugins" / "modules" / "cache_store.py")
    cache_store = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cache_store)
    pause_before(sys.argv[2], os.path.abspath(args["root"]))
    with patch_module_args(args):
        cache_store.main()


if __name__ == "__main__":
    main()
