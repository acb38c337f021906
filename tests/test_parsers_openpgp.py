"""The OpenPGP packet reader behind the key pins (parsers.openpgp_fingerprints, parsers.keyring_fingerprints), on
every packet framing RFC 4880 4.2 allows, not only the one gpg happens to export.

gpg exports keys with old-format headers; other tools (Sequoia, keys re-exported by GnuPG 2.3+ or by a vendor's
signing service) write new-format ones. The same packets in each framing must give the fingerprints gpg itself reads
from those very bytes (`gpg --show-keys`), and a damaged stream an error naming where it broke."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from nodeforge.collection import parsers
from tests.test_parsers import gpg_fingerprints, refusal

OUTPUTS = Path(__file__).parent / "data" / "outputs"
KEYS = ("openpgp-key-rsa-with-subkey.asc", "openpgp-key-ed25519-fixture.asc")
KEYRING_EXPECTED = "a binary OpenPGP keyring of whole v4 key packets, as bytes or as their base64 text"


def _gpg(args: list[str], data: bytes, home: Path) -> str:
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["gpg", *args], input=data, capture_output=True, check=True, env=env).stdout.decode()


@pytest.fixture(scope="module")
def packets(tmp_path_factory) -> list[tuple[int, bytes]]:
    """(tag, body) of every packet of the two captured keys, one after the other, where gpg --list-packets finds
    them in the binary form gpg --dearmor writes."""
    home = tmp_path_factory.mktemp("gnupg")
    found = []
    for key in KEYS:
        binary = subprocess.run(
            ["gpg", "--dearmor"], input=(OUTPUTS / key).read_bytes(), capture_output=True, check=True
        ).stdout
        listing = _gpg(["--list-packets"], binary, home)
        for match in re.finditer(r"^# off=(\d+) ctb=\w+ tag=(\d+) hlen=(\d+) plen=(\d+)", listing, re.M):
            offset, tag, header, length = map(int, match.groups())
            found.append((tag, binary[offset + header : offset + header + length]))
    assert [tag for tag, _ in found] == [6, 13, 2, 14, 2, 6, 13, 2]
    return found


def new_format(tag: int, body: bytes, octets: int) -> bytes:
    """RFC 4880 4.2.2: one length octet (0-191), two (192-8383) or 0xFF and four."""
    size = len(body)
    if octets == 1:
        assert size < 192
        length = bytes([size])
    elif octets == 2:
        assert 192 <= size < 8384
        length = bytes([((size - 192) >> 8) + 192, (size - 192) & 0xFF])
    else:
        length = b"\xff" + size.to_bytes(4, "big")
    return bytes([0xC0 | tag]) + length + body


def old_format(tag: int, body: bytes, octets: int) -> bytes:
    """RFC 4880 4.2.1: the length type in the tag octet's low two bits (one, two or four octets)."""
    return bytes([0x80 | tag << 2 | {1: 0, 2: 1, 4: 2}[octets]]) + len(body).to_bytes(octets, "big") + body


def shortest_new(tag: int, body: bytes) -> bytes:
    return new_format(tag, body, 1 if len(body) < 192 else 2 if len(body) < 8384 else 5)


def shortest_old(tag: int, body: bytes) -> bytes:
    return old_format(tag, body, 1 if len(body) < 256 else 2)


FRAMINGS = {
    "new format, shortest lengths": shortest_new,
    "new format, five-octet lengths": lambda tag, body: new_format(tag, body, 5),
    "old format, shortest lengths": shortest_old,
    "old format, two-octet lengths": lambda tag, body: old_format(tag, body, 2),
    "old format, four-octet lengths": lambda tag, body: old_format(tag, body, 4),
    # A keyring written by two tools: the framing changes from packet to packet.
    "both formats, alternating": lambda tag, body: (shortest_new if len(body) % 2 else shortest_old)(tag, body),
}


@pytest.mark.parametrize("framing", FRAMINGS)
def test_each_framing_gives_the_fingerprints_gpg_reads_from_the_same_bytes(packets, framing, tmp_path):
    stream = b"".join(FRAMINGS[framing](tag, body) for tag, body in packets)
    expected = gpg_fingerprints(_gpg(["--with-colons", "--show-keys"], stream, tmp_path))
    assert len(expected["primary"]) == 2
    assert len(expected["subkeys"]) == 1
    assert parsers.keyring_fingerprints(stream) == expected


@pytest.mark.parametrize(
    ("size", "first_length_octet"),
    [
        (0, 0),  # one length octet: 0-191
        (191, 191),
        (192, 192),  # two: 192-8383, the first octet 192-223
        (447, 192),
        (448, 193),
        (8383, 223),
        (8384, 0xFF),  # five: 0xFF and four octets
    ],
)
def test_new_format_lengths_at_each_boundary_of_rfc_4880(packets, size, first_length_octet):
    """A user ID packet of each boundary length between the primary key and its subkey: read at the wrong length,
    the subkey would be missed or the stream misread."""
    key = next(body for tag, body in packets if tag == 6)
    subkey = next(body for tag, body in packets if tag == 14)
    padding = shortest_new(13, b"u" * size)
    assert padding[1] == first_length_octet
    alone = parsers.keyring_fingerprints(shortest_new(6, key) + shortest_new(14, subkey))
    found = parsers.keyring_fingerprints(shortest_new(6, key) + padding + shortest_new(14, subkey))
    assert found == alone
    assert (len(found["primary"]), len(found["subkeys"])) == (1, 1)


@pytest.mark.parametrize(
    "header", [b"\xcd\x00", b"\xcd\xff\x00\x00\x00\x00", b"\xb4\x00", b"\xb5\x00\x00", b"\xb6\x00\x00\x00\x00"]
)
def test_an_empty_packet_ending_the_keyring_is_read(packets, header):
    """A header whose length octets end the data exactly, with no body: a whole packet, not one cut short."""
    key = next(body for tag, body in packets if tag == 6)
    assert parsers.keyring_fingerprints(shortest_old(6, key) + header) == parsers.keyring_fingerprints(
        shortest_old(6, key)
    )


# A v4 EdDSA key packet body: version, creation time, algorithm 22, the curve's OID, a 263-bit point (0x40 || 32).
ED25519 = bytes.fromhex("046b04852516092b06010401da470f01010740") + bytes(32)


@pytest.mark.parametrize(
    ("data", "message", "line", "expected"),
    [
        # The tag octet alone: no length octet follows.
        (b"\xc6", "a packet header cut short at byte 0", "c6", KEYRING_EXPECTED),
        # A five-octet length with two of its octets, after a whole packet: the error says where.
        (old_format(13, b"abc", 1) + b"\xcd\xff\x00\x00", "a packet header cut short at byte 5", "cdff0000",
         KEYRING_EXPECTED),
        (b"\x99\x01", "a packet header cut short at byte 0", "9901", KEYRING_EXPECTED),
        (b"\x9a\x00\x00\x01", "a packet header cut short at byte 0", "9a000001", KEYRING_EXPECTED),
        # 224-254: a partial body length, which only literal and encrypted data may use.
        (b"\xcd\xe0" + b"u" * 40, "partial-length OpenPGP packets do not occur in public keys",
         "cde0" + "75" * 14, ""),
        (b"\xcd\xfe" + b"u" * 4, "partial-length OpenPGP packets do not occur in public keys", "cdfe75757575", ""),
        (b"\xb7" + b"u" * 40, "indeterminate-length OpenPGP packets do not occur in public keys", "b7" + "75" * 15,
         ""),
        # Bit 7 clear: not a packet at all (here, past a whole user ID packet).
        (old_format(13, b"abc", 1) + b"\x7f" + b"u" * 30, "not an OpenPGP packet stream (byte 5)", "7f" + "75" * 15,
         KEYRING_EXPECTED),
        # The header promises more than follows.
        (new_format(6, ED25519, 1)[:-2], "a packet of 51 bytes cut short after 49 at byte 0",
         new_format(6, ED25519, 1)[:16].hex(), KEYRING_EXPECTED),
        (old_format(13, b"abc", 1) + new_format(14, ED25519, 5)[:30], "a packet of 51 bytes cut short after 24 at "
         "byte 5", new_format(14, ED25519, 5)[:16].hex(), KEYRING_EXPECTED),
        # Key packets of another version, and an empty one.
        (new_format(6, b"\x03" + ED25519[1:], 1), "OpenPGP key packet version 3: only v4 keys are read",
         ("03" + ED25519[1:16].hex()), ""),
        (old_format(14, b"\x05" + ED25519[1:], 1), "OpenPGP key packet version 5: only v4 keys are read",
         ("05" + ED25519[1:16].hex()), ""),
        (b"\xc6\x00", "OpenPGP key packet version ?: only v4 keys are read", "", ""),
    ],
)  # fmt: skip
def test_a_damaged_keyring_is_refused_naming_the_reader_what_broke_and_where(data, message, line, expected):
    assert refusal(parsers.keyring_fingerprints, data) == (
        "keyring_fingerprints",
        message,
        line,
        expected,
    )


def test_a_damaged_armored_key_is_refused_by_the_armored_reader():
    armored = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxgA=\n-----END PGP PUBLIC KEY BLOCK-----\n"  # b"\xc6\x00"
    with pytest.raises(parsers.ParseError) as refused:
        parsers.openpgp_fingerprints(armored)
    assert (refused.value.tool, refused.value.message) == (
        "openpgp_fingerprints",
        "OpenPGP key packet version ?: only v4 keys are read",
    )
    not_base64 = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nx\u00e9gA=\n-----END PGP PUBLIC KEY BLOCK-----\n"
    with pytest.raises(parsers.ParseError) as refused:
        parsers.openpgp_fingerprints(not_base64)
    assert (refused.value.tool, refused.value.line, refused.value.expected) == (
        "openpgp_fingerprints",
        "-----BEGIN PGP PUBLIC KEY BLOCK-----",
        KEYRING_EXPECTED,
    )
    assert refused.value.message.startswith("not base64 (")


def test_a_five_octet_length_of_16_mib_and_more_is_read_whole(packets):
    """The four length octets all count: a packet of 2**24 bytes (its first length octet 1) read at its length."""
    key = next(body for tag, body in packets if tag == 6)
    big = new_format(13, b"u" * 2**24, 5)
    assert big[1:6] == b"\xff\x01\x00\x00\x00"
    assert parsers.keyring_fingerprints(shortest_new(6, key) + big) == parsers.keyring_fingerprints(
        shortest_new(6, key)
    )


KEY_EXPECTED = "an ASCII-armored OpenPGP public key block (-----BEGIN PGP PUBLIC KEY BLOCK----- ... END ...)"


def test_armor_headers_are_skipped_and_text_after_the_block_ignored():
    """RFC 4880 6.2: armor headers (Version:, Comment:, ...) before the blank line are no base64; what follows the
    END line (a signature's trailer, an HTML footer) is no key."""
    armored = (OUTPUTS / KEYS[1]).read_text()
    begin = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"
    headed = armored.replace(begin, begin + "Version: GnuPG v2\nComment: nodeforge fixture\nHash: SHA256\n", 1)
    assert headed != armored
    assert parsers.openpgp_fingerprints(headed + "</pre></body>\n") == parsers.openpgp_fingerprints(armored)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("<html><body>404 Not Found</body></html>\n", ""),
        # A block with armor headers and nothing else.
        ("-----BEGIN PGP PUBLIC KEY BLOCK-----\nComment: empty\n-----END PGP PUBLIC KEY BLOCK-----\n",
         "-----BEGIN PGP PUBLIC KEY BLOCK-----"),
    ],
)  # fmt: skip
def test_what_holds_no_key_is_refused_naming_the_block(text, line):
    assert refusal(parsers.openpgp_fingerprints, text) == (
        "openpgp_fingerprints",
        "not an ASCII-armored OpenPGP public key block",
        line,
        KEY_EXPECTED,
    )


def test_armor_without_the_blank_line_after_begin_is_read():
    """Some key servers and hand-pasted keys drop the blank line that ends the (empty) armor headers."""
    armored = (OUTPUTS / KEYS[1]).read_text()
    begin = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n"
    assert armored.startswith(begin + "\n")
    assert parsers.openpgp_fingerprints(armored.replace(begin + "\n", begin, 1)) == parsers.openpgp_fingerprints(
        armored
    )


def test_dearmor_writes_the_keyring_gpg_dearmor_writes():
    both = "".join((OUTPUTS / key).read_text() for key in KEYS)
    dearmored = subprocess.run(["gpg", "--dearmor"], input=both.encode(), capture_output=True, check=True).stdout
    assert parsers.openpgp_dearmor(both) == dearmored
    with pytest.raises(parsers.ParseError, match="not an ASCII-armored OpenPGP public key block"):
        parsers.openpgp_dearmor("<html>not a key</html>")
