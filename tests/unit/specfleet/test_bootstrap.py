"""The bootstrap role's reading of `apt-cache policy`."""

from specfleet.bootstrap import candidates, uninstallable

# `apt-cache policy docker.io nvidia-container-toolkit rsync ghost` on a unit whose mirror has
# docker.io, knows the toolkit only from an old index (no candidate) and has no `ghost`.
POLICY = """\
docker.io:
  Installed: (none)
  Candidate: 26.1.5+dfsg1-9+b3
  Version table:
     26.1.5+dfsg1-9+b3 500
        500 http://10.213.77.1:3142/debian specfleet-lab/main amd64 Packages
nvidia-container-toolkit:
  Installed: (none)
  Candidate: (none)
  Version table:
rsync:
  Installed: 3.4.1+ds1-5
  Candidate: 3.4.1+ds1-5
  Version table:
 *** 3.4.1+ds1-5 100
        100 /var/lib/dpkg/status
"""


def test_candidates_per_package():
    assert candidates(POLICY) == {
        "docker.io": "26.1.5+dfsg1-9+b3",
        "nvidia-container-toolkit": None,
        "rsync": "3.4.1+ds1-5",
    }


def test_uninstallable_names_packages_without_candidate_and_unknown_ones_in_order():
    wanted = ["ghost", "docker.io", "nvidia-container-toolkit", "rsync"]
    assert uninstallable(wanted, POLICY) == ["ghost", "nvidia-container-toolkit"]


def test_architecture_qualified_request_is_read_by_its_name():
    assert uninstallable(["docker.io:arm64"], POLICY) == []


def test_nothing_is_installable_from_an_empty_answer():
    assert uninstallable(["rsync"], "") == ["rsync"]
