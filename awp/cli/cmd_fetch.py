"""``awp fetch``: verified bytes of a bulk file a peer sent, by range."""

from __future__ import annotations

import typer

from .common import CliError, command, daemon, home_of, home_opt, json_opt, note, out_json


@command("fetch", short_help="Get verified bytes (a range) of a bulk file a peer sent")
def fetch_cmd(
    peer: str = typer.Argument(..., metavar="PEER", help="the peer that sent the file"),
    file: str = typer.Argument(..., metavar="FILE",
                               help="the file's ref or root hash (a prefix of 8+ hex digits)"),
    byte_range: str = typer.Option(None, "--range", metavar="A-B",
                                   help="bytes A to B inclusive; A- to the end; -N the last N"),
    output: str = typer.Option(None, "-o", "--output", metavar="PATH",
                               help="write here (default stdout, unless it is a terminal)"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Get verified bytes of a bulk file a peer sent, whole or a range of it.

    Each piece is checked against the hashes the peer's message carried
    before a byte of it is written: pieces we already hold come from our
    copy, the others from the peer.  It works for a file refused whole (over
    the disk quota, say).  With -o the bytes go to PATH.part first and
    take the name PATH only once every one arrived.

    \b
    Examples:
      awp fetch builder 9f2c41d0 --range 0-1048575 -o head.bin
      awp fetch builder b_01J... --range -4096 | xxd | tail
    """
    import hashlib
    import os
    import sys

    if output is None and (as_json or sys.stdout.isatty()):
        raise CliError("awp fetch writes bytes: give -o PATH"
                       + (" with --json" if as_json else " (stdout is a terminal)"))
    client = daemon(home_of(home), timeout=None)
    body = {"peer": peer, "file": file}
    if byte_range:
        body["range"] = byte_range
    headers, pieces = client.download("/v1/fetch", body, timeout=60.0, read_timeout=120.0)
    want = int(headers.get("x-awp-length", "-1"))
    digest, got = hashlib.sha256(), 0
    part = output + ".part" if output else None
    sink = open(part, "wb") if part else sys.stdout.buffer  # noqa: SIM115 (closed below)
    try:
        for piece in pieces:
            sink.write(piece)
            digest.update(piece)
            got += len(piece)
        sink.flush()
    except (ConnectionError, OSError) as e:
        if part:
            sink.close()
            os.unlink(part)
        raise CliError(f"the transfer broke after {got} of {want} bytes ({e});"
                       " the daemon log says why") from None
    if part:
        os.fsync(sink.fileno())
        sink.close()
        if got != want:
            os.unlink(part)
            raise CliError(f"got {got} bytes, expected {want}")
        os.replace(part, output)
    elif got != want:
        raise CliError(f"got {got} bytes, expected {want}")
    res = {"peer": peer, "ref": headers.get("x-awp-ref", ""), "root": headers.get("x-awp-root", ""),
           "range": headers.get("x-awp-range", ""), "bytes": got, "sha256": digest.hexdigest(),
           "path": os.path.abspath(output) if output else ""}
    if as_json:
        out_json(res)
    elif output:
        note(f"{got} verified bytes ({res['range']}) of {res['ref']} written to {output}")
