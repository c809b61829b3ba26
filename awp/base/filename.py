"""The one file-name sanitiser: a name another host chose, made safe to create and to show.

Used for every file awp writes under a name that came from elsewhere: files
received with ``awp send`` (``awp.store.blobs``) and files saved from board
posts with ``awp get --save`` (``awp.cli.board_files``). The rules:

- only the last path component is kept (either slash), so no name leaves
  the directory it is written in;
- every control, format and other invisible character (Unicode category
  ``C``: C0/C1 controls, the bidi overrides and isolates such as U+202E that
  make ``x‮txt.exe`` show as ``xexe.txt``, zero-width characters, BOMs,
  private-use and unassigned code points) and every line or paragraph
  separator becomes ``_``, so the name shown is the name on disk;
- a leading dot becomes ``_`` (no hidden files, no ``..``);
- at most ``max_bytes`` bytes of UTF-8, the extension kept when it is short;
- with ``ascii_only``, anything outside ``[A-Za-z0-9._-]`` becomes ``_`` too
  (the daemon's own blob paths).

Stdlib only, importing nothing of awp's.
"""

from __future__ import annotations

import unicodedata

#: Bytes kept of a name (most file systems allow 255).
NAME_BYTES = 200
_ASCII_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def _shown_char(ch: str, ascii_only: bool) -> str:
    if ascii_only:
        return ch if ch in _ASCII_OK else "_"
    cat = unicodedata.category(ch)
    return "_" if cat[0] == "C" or cat in ("Zl", "Zp") else ch


def safe_name(name: object, *, fallback: str = "file", ascii_only: bool = False,
              max_bytes: int = NAME_BYTES) -> str:
    """One plain file name from ``name`` (see the module's rules); ``fallback`` when empty."""
    text = str(name or "").replace("\\", "/").rsplit("/", 1)[-1]
    text = unicodedata.normalize("NFC", text[: max_bytes * 4])
    text = "".join(_shown_char(c, ascii_only) for c in text).strip()
    while text.startswith("."):
        text = "_" + text[1:]
    if not text:
        return fallback
    raw = text.encode("utf-8")
    if len(raw) > max_bytes:
        stem, dot, ext = text.rpartition(".")
        if dot and 0 < len(ext.encode()) <= 16:
            keep = max_bytes - len(ext.encode()) - 1
            text = stem.encode()[:keep].decode("utf-8", "ignore") + "." + ext
        else:
            text = raw[:max_bytes].decode("utf-8", "ignore")
    return text
