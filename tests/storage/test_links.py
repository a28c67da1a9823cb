"""Signed download links: round trip, expiry, tampering, foreign secrets, the secret file."""

from __future__ import annotations

import stat

import pytest

from ragtopics.storage.links import LINK_PREFIX, LinkError, LinkSigner, load_or_create_secret

SECRET = b"k" * 32
NOW = 1_700_000_000.0


def token_of(link: str) -> str:
    assert link.startswith(LINK_PREFIX)
    return link[len(LINK_PREFIX) :]


def flip(text: str, index: int) -> str:
    """``text`` with the character at ``index`` replaced by a different base64url character."""
    replacement = "A" if text[index] != "A" else "B"
    return text[:index] + replacement + text[index + 1 :]


def test_signed_link_verifies_back_to_the_path():
    signer = LinkSigner(SECRET)
    link = signer.sign("topic-1/doc-2/abcd/Report Q3 é.pdf", now=NOW)
    assert link.startswith("/files/")
    assert signer.verify(token_of(link), now=NOW + 599) == "topic-1/doc-2/abcd/Report Q3 é.pdf"


def test_default_ttl_is_about_ten_minutes():
    assert LinkSigner(SECRET).ttl_s == 600


def test_expired_link_is_refused():
    signer = LinkSigner(SECRET, ttl_s=600)
    token = token_of(signer.sign("t/d/h/a.txt", now=NOW))
    with pytest.raises(LinkError, match="expired"):
        signer.verify(token, now=NOW + 601)


@pytest.mark.parametrize("part", ["payload", "signature"])
@pytest.mark.parametrize("where", ["first", "last"])
def test_one_changed_character_is_refused(part, where):
    signer = LinkSigner(SECRET)
    payload, signature = token_of(signer.sign("t/d/h/a.txt", now=NOW)).split(".")
    if part == "payload":
        payload = flip(payload, 0 if where == "first" else -1)
    else:
        signature = flip(signature, 0 if where == "first" else -1)
    with pytest.raises(LinkError, match="invalid signature"):
        signer.verify(f"{payload}.{signature}", now=NOW)


def test_link_signed_with_another_secret_is_refused():
    token = token_of(LinkSigner(b"x" * 32).sign("t/d/h/a.txt", now=NOW))
    with pytest.raises(LinkError, match="invalid signature"):
        LinkSigner(SECRET).verify(token, now=NOW)


@pytest.mark.parametrize("token", ["", "nodot", ".sig", "payload.", "a.b.c", "ü.ü", "%%%.###"])
def test_malformed_token_is_refused(token):
    with pytest.raises(LinkError, match="malformed|invalid signature"):
        LinkSigner(SECRET).verify(token, now=NOW)


def test_validly_signed_garbage_payload_is_malformed():
    signer = LinkSigner(SECRET)
    payload = "bm90IGpzb24"  # base64url of "not json"
    token = f"{payload}.{signer._signature(payload)}"
    with pytest.raises(LinkError, match="malformed"):
        signer.verify(token, now=NOW)


def test_link_error_is_a_product_error():
    from ragtopics.errors import RagTopicsError

    assert issubclass(LinkError, RagTopicsError)


def test_secret_file_is_created_with_mode_600_and_reused(tmp_path):
    path = tmp_path / "keys" / "link.secret"
    first = load_or_create_secret(path)
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == first
    assert load_or_create_secret(path) == first
    assert [p.name for p in path.parent.iterdir()] == ["link.secret"]  # no temporary file left behind
    # A link signed before a "restart" still verifies after it.
    token = token_of(LinkSigner(first).sign("t/d/h/a.txt", now=NOW))
    assert LinkSigner(load_or_create_secret(path)).verify(token, now=NOW) == "t/d/h/a.txt"


def test_secret_file_of_wrong_size_is_refused(tmp_path):
    from ragtopics.errors import ConfigurationError

    path = tmp_path / "link.secret"
    path.write_bytes(b"short")
    with pytest.raises(ConfigurationError, match="5 bytes"):
        load_or_create_secret(path)


def test_empty_secret_or_bad_ttl_is_refused():
    with pytest.raises(ValueError):
        LinkSigner(b"")
    with pytest.raises(ValueError):
        LinkSigner(SECRET, ttl_s=0)
