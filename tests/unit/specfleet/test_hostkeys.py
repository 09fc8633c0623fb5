"""`specfleet hostkeys`: which unit is known, new or changed, and the lines it writes."""

import base64
import hashlib
import hmac

import pytest

from specfleet import hostkeys

KEY_A = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + b"A" * 36).decode()
KEY_B = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519" + b"B" * 36).decode()
RSA = base64.b64encode(b"\x00\x00\x00\x07ssh-rsa" + b"R" * 64).decode()


def test_ssh_config_names_the_unit_as_ssh_looks_it_up():
    config = hostkeys.parse_ssh_config("hostname 10.0.0.5\nport 22\nuserknownhostsfile ~/.ssh/kh /etc/ssh/kh2\n")
    assert hostkeys.known_hosts_name(config) == "10.0.0.5"
    assert hostkeys.known_hosts_file(config).name == "kh"
    assert hostkeys.known_hosts_name({"hostname": "u1", "port": "2222"}) == "[u1]:2222"
    assert hostkeys.known_hosts_name({"hostname": "u1", "port": "22", "hostkeyalias": "thor-01"}) == "thor-01"


def test_keyscan_and_lookup_lines_are_read_as_type_and_key():
    text = f"# 10.0.0.5:22 SSH-2.0-OpenSSH_9.6\n10.0.0.5 ssh-ed25519 {KEY_A}\n@cert-authority * ssh-rsa {RSA}\n"
    assert hostkeys.parse_keys(text) == [("ssh-ed25519", KEY_A)]
    assert hostkeys.parse_keys(f"@revoked 10.0.0.5 ssh-ed25519 {KEY_B}") == [("@revoked", KEY_B)]


@pytest.mark.parametrize(
    ("known", "scanned", "status"),
    [
        ([], [("ssh-ed25519", KEY_A)], hostkeys.ADDED),
        ([("ssh-ed25519", KEY_A)], [("ssh-ed25519", KEY_A), ("ssh-rsa", RSA)], hostkeys.KNOWN),
        ([("ssh-ed25519", KEY_A)], [("ssh-ed25519", KEY_B)], hostkeys.CHANGED),
        # Only a key of another type known: ssh would not accept the unit silently either.
        ([("ssh-rsa", RSA)], [("ssh-ed25519", KEY_A)], hostkeys.CHANGED),
        ([("@revoked", KEY_A)], [("ssh-ed25519", KEY_A)], hostkeys.CHANGED),
        ([("ssh-ed25519", KEY_A)], [], hostkeys.UNREACHABLE),
    ],
)
def test_compare(known, scanned, status):
    assert hostkeys.compare(known, scanned) == status


def test_fingerprint_is_openssh_sha256():
    expected = base64.b64encode(hashlib.sha256(base64.b64decode(KEY_A)).digest()).decode().rstrip("=")
    assert hostkeys.fingerprint(KEY_A) == "SHA256:" + expected


def test_lines_plain_and_hashed_as_ssh_hashes_them():
    assert hostkeys.known_hosts_lines("[u1]:2222", [("ssh-ed25519", KEY_A)], hashed=False) == [
        f"[u1]:2222 ssh-ed25519 {KEY_A}"
    ]
    salt = bytes(range(20))
    (line,) = hostkeys.known_hosts_lines("u1", [("ssh-ed25519", KEY_A)], hashed=True, salt=salt)
    mac = base64.b64encode(hmac.new(salt, b"u1", hashlib.sha1).digest()).decode()
    assert line == f"|1|{base64.b64encode(salt).decode()}|{mac} ssh-ed25519 {KEY_A}"
