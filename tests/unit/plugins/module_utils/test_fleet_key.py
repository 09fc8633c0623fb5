"""The fleet key's authorized_keys entry: built only with its forced command, named by its run,
recognised (any run, and entries from before run ids) and removed without touching other lines."""

from __future__ import annotations

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import fleet_key as fk

PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFleet specfleet-fanout:run1"
ADMIN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAdmin admin@controller"
RRSYNC = "/usr/bin/rrsync -ro /var/lib/x/.specfleet/serve"


def test_the_entry_has_its_forced_command_and_names_its_run():
    line = fk.authorized_line(PUBLIC, "20250101T000000Z-abc123", ["10.0.0.2", "10.0.0.3"], RRSYNC)
    assert line == (
        'restrict,from="10.0.0.2,10.0.0.3",command="/usr/bin/rrsync -ro /var/lib/x/.specfleet/serve" '
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFleet specfleet-fanout:20250101T000000Z-abc123"
    )
    assert fk.fleet_run(line) == "20250101T000000Z-abc123"


@pytest.mark.parametrize("command", ["", "   "])
def test_no_entry_without_a_forced_command(command):
    with pytest.raises(ValueError, match="never authorized without a forced command"):
        fk.authorized_line(PUBLIC, "run1", ["10.0.0.2"], command)


@pytest.mark.parametrize(
    ("public", "run", "peers", "command"),
    [
        (PUBLIC, "run 1", [], RRSYNC),  # a run id that would split the comment
        (PUBLIC, "run1", ['10.0.0.2"', "x"], RRSYNC),  # a quote ends from="..."
        (PUBLIC, "run1", ["10.0.0.2,0.0.0.0/0"], RRSYNC),  # a comma adds an address
        (PUBLIC, "run1", [], 'rrsync -ro "/x"'),  # a quote ends command="..."
        ("not a key", "run1", [], RRSYNC),
    ],
)
def test_bad_parts_are_refused(public, run, peers, command):
    with pytest.raises(ValueError):
        fk.authorized_line(public, run, peers, command)


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
    installed = fk.with_fleet_entry(AUTHORIZED, fk.authorized_line(PUBLIC, "run1", [], RRSYNC))
    assert installed.startswith(AUTHORIZED) and installed.count("\n") == AUTHORIZED.count("\n") + 1
    kept, removed = fk.without_fleet_entries(installed)
    assert kept == AUTHORIZED
    assert [fk.fleet_run(entry) for entry in removed] == ["run1"]
    assert fk.without_fleet_entries(kept) == (AUTHORIZED, [])  # nothing more to remove


def test_a_new_run_replaces_every_earlier_entry():
    stale = (
        AUTHORIZED
        + 'restrict,from="10.0.0.2" ssh-ed25519 AAAAold specfleet-fanout\n'
        + f'restrict,command="{RRSYNC}" ssh-ed25519 AAAAolder specfleet-fanout:run0\n'
    )
    line = fk.authorized_line(PUBLIC, "run1", [], RRSYNC)
    assert fk.with_fleet_entry(stale, line) == AUTHORIZED + line + "\n"


def test_a_file_without_a_final_newline_keeps_its_last_line():
    line = fk.authorized_line(PUBLIC, "run1", [], RRSYNC)
    assert fk.with_fleet_entry(ADMIN, line) == f"{ADMIN}\n{line}\n"
    assert fk.with_fleet_entry("", line) == line + "\n"


def test_key_comment_names_the_run_and_refuses_what_a_comment_cannot_hold():
    assert fk.key_comment("20250101T000000Z-abc123") == "specfleet-fanout:20250101T000000Z-abc123"
    for bad in ("", "a b", "x" * 65, "a\nb"):
        with pytest.raises(ValueError):
            fk.key_comment(bad)
