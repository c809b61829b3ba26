"""Sealed links: end-to-end encryption of a connection after ``auth`` (sans-I/O).

A link may cross a middlebox that reads it: a sandbox platform's HTTPS
front end terminates TLS and forwards a WebSocket in the clear, and plain
TCP is plain.  Two peers that both offer the ``seal`` extension put a fresh
X25519 public key in their ``hello`` (field ``seal``); each side's ``auth``
signature covers both hello lines, so those keys are bound to both identity
keys and both nonces, and a party in the middle that swaps one breaks the
signature.  Every byte after a side's own ``auth`` line is then sealed.

The construction uses libsodium through PyNaCl and nothing of our own:

1. ``crypto_kx`` session keys between the two ephemeral keys (the dialer
   is the kx client), giving one key per direction;
2. each key is bound to the transcript: ``BLAKE2b-256(key=kx_key,
   data=transcript, person="awp-seal-v1-d2l" or "awp-seal-v1-l2d")``, where
   the transcript is ``BLAKE2b-256("awp-seal-v1" || be32(len d) || d ||
   be32(len l) || l)`` over the exact dialer (d) and listener (l) hello
   lines as sent, without their newlines;
3. each direction is one ``crypto_secretstream_xchacha20poly1305`` stream:
   its 24-byte header first, then records of ``be32(len c) || c`` with at
   most :data:`MAX_RECORD` bytes of plaintext each.  A half-close is a
   record tagged FINAL; a stream that ends without it was cut.

secretstream numbers its records internally, so a flipped, dropped,
injected, reordered or replayed byte fails authentication and ends the
link; nothing decrypted is ever passed on unauthenticated.
"""

from __future__ import annotations

import struct

from nacl import bindings as _nb
from nacl.public import PrivateKey

from .b64 import b64decode_any, b64url

__all__ = [
    "MAX_RECORD",
    "Ephemeral",
    "SEAL_CAP",
    "SEAL_POLICIES",
    "Opener",
    "SealError",
    "Sealer",
    "derive_keys",
    "parse_seal_key",
    "transcript_hash",
]

SEAL_CAP = "seal"
# The configured policy (``policy.seal`` / ``AWP_SEAL``): never offer; seal when
# the peer offers it too; refuse plain links that are not local; refuse them all.
SEAL_POLICIES = ("off", "prefer", "require-remote", "require")
MAX_RECORD = 64 * 1024  # plaintext bytes per record; a reader holds at most one
_CONTEXT = b"awp-seal-v1"
_PERSON_D2L = b"awp-seal-v1-d2l"  # dialer to listener; BLAKE2b takes 16 bytes of person
_PERSON_L2D = b"awp-seal-v1-l2d"
_HEADER = _nb.crypto_secretstream_xchacha20poly1305_HEADERBYTES
_ABYTES = _nb.crypto_secretstream_xchacha20poly1305_ABYTES
_TAG_MESSAGE = _nb.crypto_secretstream_xchacha20poly1305_TAG_MESSAGE
_TAG_FINAL = _nb.crypto_secretstream_xchacha20poly1305_TAG_FINAL
_LEN = struct.Struct(">I")


class SealError(Exception):
    """Sealed bytes that do not authenticate, or a sealed stream cut short."""


class Ephemeral:
    """One connection's X25519 key pair; the public half goes in our hello."""

    __slots__ = ("_sk", "public")

    def __init__(self, secret: bytes | None = None) -> None:
        sk = PrivateKey(secret) if secret is not None else PrivateKey.generate()
        self._sk = bytes(sk)
        self.public = bytes(sk.public_key)

    @property
    def text(self) -> str:
        return b64url(self.public)

    def keys(self, peer_public: bytes, *, dialer: bool, transcript: bytes) -> tuple[bytes, bytes]:
        """``(tx, rx)`` for this side; see :func:`derive_keys`."""
        return derive_keys(self._sk, self.public, peer_public, dialer=dialer,
                           transcript=transcript)


def parse_seal_key(value: object) -> bytes | None:
    """The 32-byte X25519 key of a hello's ``seal`` field, or None when unusable."""
    if not isinstance(value, str) or len(value) != 43:
        return None
    try:
        raw = b64decode_any(value)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None


def transcript_hash(dialer_hello: bytes, listener_hello: bytes) -> bytes:
    """What both sides' keys are bound to: both hello lines, dialer's first."""
    data = (_CONTEXT + _LEN.pack(len(dialer_hello)) + dialer_hello
            + _LEN.pack(len(listener_hello)) + listener_hello)
    return _nb.crypto_generichash_blake2b_salt_personal(data, digest_size=32)


def derive_keys(my_secret: bytes, my_public: bytes, peer_public: bytes, *, dialer: bool,
                transcript: bytes) -> tuple[bytes, bytes]:
    """``(tx, rx)``: this side's sending and receiving keys.

    Raises :class:`SealError` when the peer's key is a low-order point (the
    shared secret would be all zeros, which libsodium refuses).
    """
    try:
        if dialer:
            rx, tx = _nb.crypto_kx_client_session_keys(my_public, my_secret, peer_public)
        else:
            rx, tx = _nb.crypto_kx_server_session_keys(my_public, my_secret, peer_public)
    except Exception as e:  # nacl raises CryptoError / RuntimeError for a bad point
        raise SealError(f"unusable seal key: {e}") from None
    send_person, recv_person = (_PERSON_D2L, _PERSON_L2D) if dialer else (_PERSON_L2D, _PERSON_D2L)
    return _bind(tx, transcript, send_person), _bind(rx, transcript, recv_person)


def _bind(key: bytes, transcript: bytes, person: bytes) -> bytes:
    return _nb.crypto_generichash_blake2b_salt_personal(
        transcript, digest_size=32, key=key, person=person.ljust(16, b"\0"))


class Sealer:
    """The sending half: plaintext in, framed sealed records out."""

    __slots__ = ("_header", "_state", "finished")

    def __init__(self, key: bytes) -> None:
        self._state = _nb.crypto_secretstream_xchacha20poly1305_state()
        self._header: bytes | None = _nb.crypto_secretstream_xchacha20poly1305_init_push(
            self._state, key)
        self.finished = False

    def seal(self, data: bytes) -> bytes:
        """Records for ``data`` (the stream's header goes before the first)."""
        if self.finished:
            raise SealError("sealed stream already finished")
        push = _nb.crypto_secretstream_xchacha20poly1305_push
        if 0 < len(data) <= MAX_RECORD and type(data) is bytes:  # a line: one record
            c = push(self._state, data, None, _TAG_MESSAGE)
            return self._take_header() + _LEN.pack(len(c)) + c
        out = [self._take_header()]
        view = memoryview(data)
        for start in range(0, len(data), MAX_RECORD):
            c = push(self._state, bytes(view[start:start + MAX_RECORD]), None, _TAG_MESSAGE)
            out.append(_LEN.pack(len(c)))
            out.append(c)
        return b"".join(out)

    def final(self) -> bytes:
        """The FINAL record that marks a clean half-close."""
        if self.finished:
            return b""
        c = _nb.crypto_secretstream_xchacha20poly1305_push(self._state, b"", None, _TAG_FINAL)
        self.finished = True
        return self._take_header() + _LEN.pack(len(c)) + c

    def _take_header(self) -> bytes:
        header, self._header = self._header, None
        return header or b""


class Opener:
    """The receiving half: bytes off the wire in, authenticated plaintext out.

    Holds at most one record's worth of unread bytes, so a peer that
    announces a huge record costs nothing: a length over the bound is a
    :class:`SealError` before any of it is read.
    """

    __slots__ = ("_buf", "_key", "_state", "finished")

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._state = None
        self._buf = bytearray()
        self.finished = False

    def feed(self, data: bytes) -> bytes:
        """Plaintext of every whole record in the bytes so far."""
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        if self._state is None:
            if len(buf) < _HEADER:
                return b""
            self._state = _nb.crypto_secretstream_xchacha20poly1305_state()
            _nb.crypto_secretstream_xchacha20poly1305_init_pull(
                self._state, bytes(buf[:_HEADER]), self._key)
            pos = _HEADER
        pull = _nb.crypto_secretstream_xchacha20poly1305_pull
        while len(buf) - pos >= 4:
            if self.finished:
                raise SealError("bytes after the sealed stream's final record")
            (n,) = _LEN.unpack_from(buf, pos)
            if n < _ABYTES or n > MAX_RECORD + _ABYTES:
                raise SealError(f"sealed record of {n} bytes is out of bounds")
            if len(buf) - pos - 4 < n:
                break
            c = bytes(buf[pos + 4:pos + 4 + n])
            pos += 4 + n
            try:
                m, tag = pull(self._state, c, None)
            except Exception:
                raise SealError("a sealed record failed authentication"
                                " (bytes flipped, dropped, injected or replayed)") from None
            if tag == _TAG_FINAL:
                self.finished = True
            elif tag != _TAG_MESSAGE:
                raise SealError(f"sealed record with unexpected tag {tag}")
            if m:
                out.append(m)
        del buf[:pos]
        return b"".join(out)

    def eof(self) -> None:
        """The wire ended: fine after FINAL, a cut link otherwise."""
        if not self.finished:
            raise SealError("the sealed stream ended without its final record (cut short)")
