"""What a stock unit has and can install: dpkg's and apt's own answers, read for the bootstrap role."""

from __future__ import annotations

import re

# `apt-cache policy NAME...` prints, per package apt knows, a block
#   NAME:
#     Installed: (none)
#     Candidate: 26.1.5+dfsg1-9
# and nothing at all (a notice on stderr) for a name no source lists.
_BLOCK = re.compile(r"^(\S+):\s*$")
_CANDIDATE = re.compile(r"^\s+Candidate:\s*(\S+)\s*$")


def candidates(policy_output: str) -> dict[str, str | None]:
    """Package -> the version apt would install (None for `(none)`), per `apt-cache policy`."""
    found: dict[str, str | None] = {}
    package = None
    for line in policy_output.splitlines():
        block = _BLOCK.match(line)
        if block:
            package = block.group(1)
            found.setdefault(package, None)
            continue
        candidate = _CANDIDATE.match(line)
        if candidate and package is not None:
            found[package] = None if candidate.group(1) == "(none)" else candidate.group(1)
    return found


def uninstallable(packages: list[str], policy_output: str) -> list[str]:
    """The packages, in their order, that no apt source offers a version of."""
    offered = candidates(policy_output)
    # apt-cache names an architecture-qualified request without its architecture.
    return [name for name in packages if offered.get(name.split(":", 1)[0]) is None]
