"""``awp verify-release``: check a downloaded release before installing it.

Reads ``SHA256SUMS`` and ``SHA256SUMS.sig`` beside the files, checks the
signature against the release keys we trust, then each file's SHA-256.  The
files are opened without following a symbolic link, and read in pieces, so a
hostile download can neither point us elsewhere nor make us hold it whole.
"""

from __future__ import annotations

import os

import typer

from .common import CliError, command, out

PIECE = 1 << 20


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise CliError(f"{path}: missing") from None
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror})") from None


def _small(path: str, limit: int) -> bytes:
    fd = _open(path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CliError(f"{path}: over {limit} bytes, not a release's")
    return data


def _sha256(path: str) -> str:
    import hashlib

    fd = _open(path)
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while piece := f.read(PIECE):
            h.update(piece)
    return h.hexdigest()


@command("verify-release", short_help="Check a release's signed checksums before installing it")
def verify_release(
    path: str = typer.Argument(..., metavar="DIR|FILE",
                               help="a release directory, or one file of it"),
    key: list[str] = typer.Option([], "--key", metavar="KEY",
                                  help="trust this release key (ed25519:...) too (repeatable)"),
) -> None:
    """Check SHA256SUMS.sig against the release keys, then every file's SHA-256.

    Given a directory, every file SHA256SUMS lists is checked; given one
    file, that file (SHA256SUMS and its signature are read beside it).
    Exit status: 0 when the signature and every checked file are good, 1
    naming each file that is missing or changed, or what is wrong with the
    signature.

    \b
    Examples:
      awp verify-release dist/
      awp verify-release dist/awp_peer-0.5.0-py3-none-any.whl --key ed25519:Fcy_...DE4
    """
    from ..wire.keys import KeyError_, decode_key
    from ..wire.release import (
        MAX_SIG_BYTES,
        MAX_SUMS_BYTES,
        RELEASE_KEYS,
        SIG,
        SUMS,
        ReleaseError,
        check_sig,
        parse_sums,
    )

    for k in key:
        try:
            decode_key(k)
        except KeyError_ as e:
            raise CliError(f"--key {k}: {e}", 2) from None
    trusted = RELEASE_KEYS | set(key)
    if not trusted:
        raise CliError("no release key to check against: give the key the release was"
                       " signed with, --key ed25519:... (README.md, \"Checking a download\")", 2)
    one = None
    folder = path
    if not os.path.isdir(path):
        folder, one = os.path.split(os.path.abspath(path))
    sums = _small(os.path.join(folder, SUMS), MAX_SUMS_BYTES)
    sig = _small(os.path.join(folder, SIG), MAX_SIG_BYTES)
    try:
        signer = check_sig(sig.decode("utf-8", "replace"), sums, trusted)
        listed = parse_sums(sums.decode("utf-8", "replace"))
    except ReleaseError as e:
        raise CliError(f"{folder}: {e}") from None
    if one is not None:
        if one not in listed:
            raise CliError(f"{path}: not listed in {os.path.join(folder, SUMS)}")
        listed = {one: listed[one]}
    bad = []
    for name, want in listed.items():
        where = os.path.join(folder, name)
        try:
            got = _sha256(where)
        except CliError as e:
            bad.append(str(e))
            continue
        if got != want:
            bad.append(f"{where}: changed (SHA-256 {got[:16]}..., SHA256SUMS says"
                       f" {want[:16]}...)")
    if bad:
        raise CliError("; ".join(bad))
    out(f"good: {len(listed)} file(s) match SHA256SUMS, signed by {signer}")
