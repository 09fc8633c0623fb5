"""The fleet key's authorized_keys entries: built only with their forced command, an address and
an expiry, one per peer, named by their run, recognised (any run, and entries from before run
ids) and removed without touching other lines."""

from __future__ import annotations

import time

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import fleet_key as fk

PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFleet specfleet-fanout:run1"
ADMIN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAdmin admin@controller"
RRSYNC = "/usr/bin/rrsync -ro /var/lib/x/.specfleet/serve"
EXPIRY = "20250101120000"


def entry(run="run1", peers=("10.0.0.2",), public=PUBLIC):
    return fk.authorized_line(public, run, list(peers), RRSYNC, EXPIRY)


def test_the_entry_has_its_forced_command_address_and_expiry_and_names_its_run():
    line = fk.authorized_line(PUBLIC, "20250101T000000Z-abc123", ["10.0.0.2", "10.0.0.3"], RRSYNC, EXPIRY)
    assert line == (
        'restrict,expiry-time="20250101120000",from="10.0.0.2,10.0.0.3",'
        'command="/usr/bin/rrsync -ro /var/lib/x/.specfleet/serve" '
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFleet specfleet-fanout:20250101T000000Z-abc123"
    )
    assert fk.fleet_run(line) == "20250101T000000Z-abc123"


@pytest.mark.parametrize("command", ["", "   "])
def test_no_entry_without_a_forced_command(command):
    with pytest.raises(ValueError, match="never authorized without a forced command"):
        fk.authorized_line(PUBLIC, "run1", ["10.0.0.2"], command, EXPIRY)


@pytest.mark.parametrize("peers", [[], [""], ["10.0.0.2", " "]])
def test_no_entry_without_from(peers):
    """The old line dropped from= for an empty peer list: a key usable from anywhere."""
    with pytest.raises(ValueError, match="never authorized without from="):
        fk.authorized_line(PUBLIC, "run1", peers, RRSYNC, EXPIRY)


@pytest.mark.parametrize("expiry", ["", "2025010112", "20250101120000Z", '20250101120000"', "2025-01-01T12:00"])
def test_no_entry_without_an_expiry_old_openssh_reads(expiry):
    """YYYYMMDDHHMMSS only: OpenSSH before 9.1 (Ubuntu 22.04's 8.9) finds a Z suffix invalid and
    ignores the entry, and a quote would end the option."""
    with pytest.raises(ValueError, match="expiry-time"):
        fk.authorized_line(PUBLIC, "run1", ["10.0.0.2"], RRSYNC, expiry)


@pytest.mark.parametrize(
    ("public", "run", "peers", "command"),
    [
        (PUBLIC, "run 1", ["10.0.0.2"], RRSYNC),  # a run id that would split the comment
        (PUBLIC, "run1", ['10.0.0.2"', "x"], RRSYNC),  # a quote ends from="..."
        (PUBLIC, "run1", ["10.0.0.2,0.0.0.0/0"], RRSYNC),  # a comma adds an address
        (PUBLIC, "run1", ["10.0.0.2 x"], RRSYNC),  # a blank ends the options
        (PUBLIC, "run1", ["10.0.0.2"], 'rrsync -ro "/x"'),  # a quote ends command="..."
        ("not a key", "run1", ["10.0.0.2"], RRSYNC),
    ],
)
def test_bad_parts_are_refused(public, run, peers, command):
    with pytest.raises(ValueError):
        fk.authorized_line(public, run, peers, command, EXPIRY)


def test_expiry_time_is_the_units_clock_plus_the_lifetime_rounded_up():
    assert fk.expiry_time(0, 3600, time.gmtime) == "19700101010000"
    assert fk.expiry_time(1735732799.2, 1, time.gmtime) == "20250101120001"  # 12:00:00.2, up to :01
    assert fk.expiry_time(1735689600, 86400 + 59, time.gmtime) == "20250102000059"


@pytest.fixture
def zone(monkeypatch):
    """Sets the process's time zone (POSIX TZ: no tz database needed); restored afterwards."""

    def set_zone(tz: str) -> None:
        monkeypatch.setenv("TZ", tz)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def test_expiry_time_is_local_time_without_z(zone):
    """sshd reads expiry-time in the system time zone: the unit writes its own local time."""
    zone("JST-9")  # UTC+9
    assert fk.expiry_time(0, 3600) == "19700101100000"
    zone("EST5EDT,M3.2.0,M11.1.0")  # UTC-5, UTC-4 in summer
    assert fk.expiry_time(1735732800, 600) == "20250101071000"  # 12:10 UTC in winter
    assert fk.expiry_time(1751371200, 600) == "20250701081000"  # 12:10 UTC in summer


@pytest.mark.parametrize("lifetime", [0, -1])
def test_expiry_time_refuses_a_lifetime_that_is_over_already(lifetime):
    with pytest.raises(ValueError, match="must be positive"):
        fk.expiry_time(0, lifetime, time.gmtime)


def test_each_peer_gets_its_own_entry_from_its_own_address():
    peers = [("10.0.0.11", "ssh-ed25519 AAAAkey11"), ("10.0.0.12", "ssh-ed25519 AAAAkey12 c"),
             ("fd00::13", "ssh-ed25519 AAAAkey13")]
    lines = fk.peer_entries(peers, "run1", RRSYNC, EXPIRY)
    assert [fk.split_entry(line)[2] for line in lines] == ["AAAAkey11", "AAAAkey12", "AAAAkey13"]
    assert [fk.split_entry(line)[0] for line in lines] == [
        f'restrict,expiry-time="{EXPIRY}",from="{address}",command="{RRSYNC}"'
        for address in ("10.0.0.11", "10.0.0.12", "fd00::13")]
    assert {fk.fleet_run(line) for line in lines} == {"run1"}
    assert fk.peer_entries([], "run1", RRSYNC, EXPIRY) == []


def test_rrsync_command_quotes_a_path_and_refuses_what_authorized_keys_cannot_hold():
    assert fk.rrsync_command("/usr/bin/rrsync", "/var/lib/a b/serve") == "/usr/bin/rrsync -ro '/var/lib/a b/serve'"
    with pytest.raises(ValueError):
        fk.rrsync_command("/usr/bin/rrsync", '/var/lib/a"b')


def test_split_entry_reads_options_with_quoted_blanks():
    line = f'restrict,command="{RRSYNC}" ssh-ed25519 AAAAkey some comment'
    assert fk.split_entry(line) == (f'restrict,command="{RRSYNC}"', "ssh-ed25519", "AAAAkey", "some comment")
    assert fk.split_entry(ADMIN) == ("", "ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIAdmin", "admin@controller")
    assert fk.split_entry("# a comment") is None
    assert fk.split_entry("   ") is None
    assert fk.split_entry("ssh-ed25519") is None


@pytest.mark.parametrize(
    ("line", "run"),
    [
        ("ssh-ed25519 AAAAkey specfleet-fanout", ""),  # the entries of releases before run ids
        ('restrict,from="10.0.0.2" ssh-ed25519 AAAAkey specfleet-fanout', ""),  # the old fail-open one
        (f'restrict,command="{RRSYNC}" ssh-ed25519 AAAAkey specfleet-fanout:r-2', "r-2"),
        (ADMIN, None),
        ("ssh-ed25519 AAAAkey admin specfleet-fanout", None),  # someone else's key, our word later
        ('command="/opt/specfleet-fanout" ssh-ed25519 AAAAkey ops', None),
        ("ssh-ed25519 AAAAkey specfleet-fanout-other", None),
        ("# specfleet-fanout", None),
    ],
)
def test_fleet_entries_are_recognised_by_their_comment(line, run):
    assert fk.fleet_run(line) == run


AUTHORIZED = f"# admins\n{ADMIN}\n\nssh-rsa AAAAB3other ops@laptop\n"


def test_install_then_remove_leaves_the_file_as_it_was():
    lines = fk.peer_entries([("10.0.0.2", PUBLIC), ("10.0.0.3", ADMIN)], "run1", RRSYNC, EXPIRY)
    installed = fk.with_fleet_entries(AUTHORIZED, lines)
    assert installed == AUTHORIZED + lines[0] + "\n" + lines[1] + "\n"
    kept, removed = fk.without_fleet_entries(installed)
    assert kept == AUTHORIZED and removed == lines
    assert [fk.fleet_run(entry) for entry in removed] == ["run1", "run1"]
    assert fk.without_fleet_entries(kept) == (AUTHORIZED, [])  # nothing more to remove


@pytest.mark.parametrize("line", [ADMIN, "# specfleet-fanout:run1", entry() + "\n" + ADMIN, ""])
def test_only_fleet_entries_are_added(line):
    """What with_fleet_entries adds, without_fleet_entries removes again: nothing else goes in."""
    with pytest.raises(ValueError, match="not one fleet key entry"):
        fk.with_fleet_entries(AUTHORIZED, [entry(), line])


def test_a_new_run_replaces_every_earlier_entry():
    stale = (
        AUTHORIZED
        + 'restrict,from="10.0.0.2" ssh-ed25519 AAAAold specfleet-fanout\n'
        + f'restrict,command="{RRSYNC}" ssh-ed25519 AAAAolder specfleet-fanout:run0\n'
    )
    line = entry()
    assert fk.with_fleet_entries(stale, [line]) == AUTHORIZED + line + "\n"
    assert fk.with_fleet_entries(stale, []) == AUTHORIZED  # a lone unit: no entry at all


def test_a_file_without_a_final_newline_keeps_its_last_line():
    line = entry()
    assert fk.with_fleet_entries(ADMIN, [line]) == f"{ADMIN}\n{line}\n"
    assert fk.with_fleet_entries("", [line]) == line + "\n"


def test_key_comment_names_the_run_and_refuses_what_a_comment_cannot_hold():
    assert fk.key_comment("20250101T000000Z-abc123") == "specfleet-fanout:20250101T000000Z-abc123"
    for bad in ("", "a b", "x" * 65, "a\nb"):
        with pytest.raises(ValueError):
            fk.key_comment(bad)
