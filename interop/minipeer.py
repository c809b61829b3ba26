#!/usr/bin/env python3
"""minipeer: a small, independent AWP peer (draft 1, v 0), written from SPEC.md.

It shares no code with the awp package: the standard library and PyNaCl only.
It does the handshake, msg/state with durable acks and dedup, resume with
replay from a persistent outbox (a JSON file, written atomically before any
ack), ping/pong and bye. It listens or dials; it prints what happens as JSON
lines on stdout, and takes commands as JSON lines on stdin.

    minipeer.py --state S.json --listen tcp:127.0.0.1:0
    minipeer.py --state S.json --dial tcp:127.0.0.1:7000 --send "hello there"

stdin commands: {"cmd":"send","text":"...","th":"thr_x"?,"to":"ed25519:..."?,"tag":"x"?},
{"cmd":"state","th":"...","state":"done"}, {"cmd":"bye","reason":"..."},
{"cmd":"quit"}.

Flags that break it on purpose, for testing a conformance checker:
--skip-ack, --bad-transcript, --accept-any-version, --close-on-err,
--forget-introduce (introduce lines are neither deduplicated nor counted in seen).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import socket
import sys
import threading
import time

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

MAX_LINE = 1_048_576
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
CLOSING = {"bad_frame", "version", "auth", "too_large"}
ACKED = {"msg", "state", "mirror", "private"}
CONTENT = ACKED | {"chunk", "introduce"}
THREAD_CHARS = "abcdefghijkmnpqrstuvwxyz23456789"

OUT_LOCK = threading.Lock()


def emit(event: str, **fields) -> None:
    with OUT_LOCK:
        sys.stdout.write(json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n")
        sys.stdout.flush()


def dumps(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64any(text: str) -> bytes:
    s = text.rstrip("=")
    s += "=" * (-len(s) % 4)
    if "+" in s or "/" in s:
        return base64.b64decode(s, validate=True)
    return base64.urlsafe_b64decode(s)


def now_ts() -> str:
    ms = time.time_ns() // 1_000_000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def ulid_str(v: int) -> str:
    return "".join(CROCKFORD[(v >> (5 * i)) & 31] for i in range(25, -1, -1))


def ulid_int(s: str) -> int:
    v = 0
    for c in s:
        v = (v << 5) | CROCKFORD.index(c)
    return v


def key_bytes(key: object) -> bytes:
    if not isinstance(key, str) or not key.startswith("ed25519:"):
        raise ValueError("not an ed25519: key")
    raw = b64any(key[8:])
    if len(raw) != 32:
        raise ValueError("key is not 32 bytes")
    return raw


class Store:
    """Everything that must survive a restart, in one JSON file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.RLock()
        if os.path.exists(path):
            with open(path) as f:
                self.data = json.load(f)
        else:
            self.data = {"seed": secrets.token_hex(32), "last_id": "", "peers": {}, "pending": []}
            self.save()
        self.sk = SigningKey(bytes.fromhex(self.data["seed"]))
        self.key = "ed25519:" + b64url(bytes(self.sk.verify_key))

    def save(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def next_id(self) -> str:
        """Strictly increasing ULIDs; the last one is saved with the next write."""
        with self.lock:
            last = ulid_int(self.data["last_id"]) if self.data["last_id"] else 0
            fresh = ((time.time_ns() // 1_000_000) << 80) | int.from_bytes(os.urandom(10), "big")
            self.data["last_id"] = ulid_str(max(fresh, last + 1))
            return self.data["last_id"]

    def peer(self, key: str) -> dict:
        return self.data["peers"].setdefault(
            key, {"outbox": [], "seen": {}, "received": [], "parked": False})


class Peer:
    """The node: identity, store, connections (one per peer key)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.store = Store(args.state)
        self.conns: dict[str, Conn] = {}

    def queue(self, key: str | None, t: str, th: str, tag: str = "", **fields) -> dict:
        """Put a content line in the outbox (durably), then send it if connected."""
        with self.store.lock:
            line = {"t": t, "id": self.store.next_id(), "ts": now_ts(), "th": th, **fields}
            if key is None:
                self.store.data["pending"].append(line)
            else:
                p = self.store.peer(key)
                p["outbox"].append(line)
                p["parked"] = False
            self.store.save()
            emit("queued", id=line["id"], t=t, th=th, to=key, tag=tag)
            conn = self.conns.get(key) if key else None
            if conn is not None and conn.replayed:
                conn.send(line)
        return line

    def adopt_pending(self, key: str) -> None:
        with self.store.lock:
            pending = self.store.data["pending"]
            if pending:
                self.store.peer(key)["outbox"].extend(pending)
                self.store.data["pending"] = []
                self.store.save()

    def attach(self, conn: Conn) -> None:
        old = self.conns.get(conn.peer_key)
        self.conns[conn.peer_key] = conn
        if old is not None and old is not conn:
            old.close()

    def detach(self, conn: Conn) -> None:
        if self.conns.get(conn.peer_key) is conn:
            del self.conns[conn.peer_key]

    def default_peer(self) -> str | None:
        if self.args.to:
            return self.args.to
        if self.conns:
            return next(iter(self.conns))
        keys = list(self.store.data["peers"])
        return keys[0] if len(keys) == 1 else None


class Closed(Exception):
    pass


class Conn:
    def __init__(self, node: Peer, sock: socket.socket, outbound: bool) -> None:
        self.node = node
        self.sock = sock
        self.outbound = outbound
        self.wlock = threading.Lock()
        self.buf = bytearray()
        self.peer_key = ""
        self.replayed = False
        self.unanswered = 0
        self.closed = False
        self.bye_sent = False

    # -- io -------------------------------------------------------------------------

    def send(self, obj: dict) -> dict:
        if "id" not in obj:
            obj = {"t": obj["t"], "id": self.node.store.next_id(), "ts": now_ts(),
                   **{k: v for k, v in obj.items() if k != "t"}}
        self.send_raw(dumps(obj))
        return obj

    def send_raw(self, raw: bytes) -> None:
        with self.wlock:
            self.sock.sendall(raw + b"\n")

    def read_line(self) -> bytes:
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                if nl > MAX_LINE:
                    self.refuse("too_large", "line over 1 MiB")
                line = bytes(self.buf[:nl])
                del self.buf[:nl + 1]
                return line
            if len(self.buf) > MAX_LINE:
                self.refuse("too_large", "line over 1 MiB")
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                if not self.peer_key or self.unanswered >= 2:
                    raise Closed("timed out") from None
                self.unanswered += 1
                self.send({"t": "ping"})
                continue
            if not data:
                raise Closed("peer closed")
            self.buf += data

    def refuse(self, code: str, detail: str = "", re: str | None = None) -> None:
        """Send a closing err, half-close, drain briefly, and stop."""
        err = {"t": "err", "code": code}
        if detail:
            err["detail"] = detail
        if re:
            err["re"] = re
        try:
            self.send(err)
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(2)
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        raise Closed(f"refused: {code} {detail}".strip())

    def parse(self, raw: bytes) -> dict:
        if not raw.lstrip(b" \t").startswith(b"{"):
            self.refuse("bad_frame", "not a JSON object")
        try:
            obj = json.loads(raw)
        except ValueError:
            self.refuse("bad_frame", "invalid JSON")
        if not isinstance(obj, dict) or not isinstance(obj.get("t"), str) or not obj["t"]:
            self.refuse("bad_frame", "not an AWP line")
        for f in ("id", "ts", "th", "re"):
            if f in obj and not isinstance(obj[f], str):
                self.refuse("bad_frame", f"{f} is not a string")
        need = {"msg": ("id", "th"), "state": ("id", "th", "state"), "chunk": ("id", "ref")}
        for f in need.get(obj["t"], ()):
            if not isinstance(obj.get(f), str) or not obj[f]:
                self.refuse("bad_frame", f"{obj['t']} without {f}")
        return obj

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    # -- protocol -------------------------------------------------------------------

    def run(self) -> None:
        reason = "closed"
        try:
            self.handshake()
            self.loop()
        except Closed as e:
            reason = str(e)
        except OSError as e:
            reason = f"connection lost: {e}"
        finally:
            if self.peer_key:
                self.node.detach(self)
            try:
                self.sock.close()
            except OSError:
                pass
            emit("closed", peer=self.peer_key, reason=reason)

    def handshake(self) -> None:
        store, args = self.node.store, self.node.args
        self.sock.settimeout(30)
        hello = {"t": "hello", "id": store.next_id(), "ts": now_ts(), "v": 0, "key": store.key,
                 "name": args.name, "nonce": b64url(os.urandom(32)), "caps": args.caps,
                 "about": "minipeer (interop test peer)"}
        mine = dumps(hello)
        self.send_raw(mine)
        theirs = self.read_line()
        peer = self.parse(theirs)
        if peer["t"] == "err":
            raise Closed(f"peer refused: {peer.get('code')}")
        if peer["t"] != "hello":
            self.refuse("bad_frame", "expected hello")
        if peer.get("v", 0) != 0 and not args.accept_any_version:
            self.refuse("version", "we speak v 0", re=peer.get("id"))
        try:
            raw_key = key_bytes(peer.get("key"))
        except ValueError as e:
            self.refuse("auth", f"bad key: {e}")
        key = "ed25519:" + b64url(raw_key)
        if key == store.key:
            self.refuse("auth", "hello carries our own key")
        if not isinstance(peer.get("nonce"), str) or not peer["nonce"]:
            self.refuse("auth", "hello without nonce")
        ctx = b"awp-auth-v0\x00"
        signed = ctx + (theirs + b"\x00" + mine if args.bad_transcript else mine + b"\x00" + theirs)
        self.send({"t": "auth", "sig": b64url(store.sk.sign(signed).signature)})
        auth = self.parse(self.read_line())
        if auth["t"] == "err":
            raise Closed(f"peer refused: {auth.get('code')}")
        if auth["t"] != "auth":
            self.refuse("auth", "expected auth")
        try:
            VerifyKey(raw_key).verify(ctx + theirs + b"\x00" + mine, b64any(auth.get("sig", "")))
        except (BadSignatureError, ValueError, TypeError):
            self.refuse("auth", "signature does not verify")
        self.peer_key = key
        self.node.attach(self)
        self.node.adopt_pending(key)
        with store.lock:
            p = store.peer(key)
            p["name"] = peer.get("name")
            seen = dict(p["seen"])
            store.save()
        self.send({"t": "resume", "seen": seen})
        emit("connected", peer=key, name=peer.get("name"), outbound=self.outbound)
        self.sock.settimeout(27)  # 90% of the 30 s ping interval
        timer = threading.Timer(15, self.replay, kwargs={"seen": None})
        timer.daemon = True
        timer.start()

    def replay(self, seen: dict | None) -> None:
        """Drop what the peer's resume says it has; send the rest, in order."""
        store = self.node.store
        with store.lock:
            if self.closed or (seen is None and self.replayed):
                return
            p = store.peer(self.peer_key)
            if seen is not None:
                keep = [x for x in p["outbox"] if not (
                    x.get("th") in seen and isinstance(seen[x["th"]], str)
                    and x["id"] <= seen[x["th"]])]
                for x in p["outbox"]:
                    if x not in keep:
                        emit("ack", re=x["id"], via="resume")
                p["outbox"] = keep
                store.save()
            self.replayed = True
            try:
                for x in p["outbox"]:
                    self.send(x)
            except OSError:
                pass

    def loop(self) -> None:
        store, args = self.node.store, self.node.args
        while True:
            line = self.parse(self.read_line())
            self.unanswered = 0
            t = line["t"]
            if t == "introduce" and args.forget_introduce:
                pass  # misbehaving on purpose: as if it never arrived
            elif t in ACKED or t in CONTENT:
                fresh = False
                with store.lock:
                    p = store.peer(self.peer_key)
                    if line.get("id") not in p["received"]:
                        fresh = True
                        p["received"] = (p["received"] + [line["id"]])[-10000:]
                        th = line.get("th")
                        if isinstance(th, str) and line["id"] > p["seen"].get(th, ""):
                            p["seen"][th] = line["id"]
                        store.save()  # durable before the ack
                if fresh and t in ("msg", "state"):
                    emit(t, peer=self.peer_key, line=line)
                if t in ACKED and not args.skip_ack:
                    self.send({"t": "ack", "th": line.get("th", ""), "re": line["id"]})
            elif t == "ack":
                with store.lock:
                    p = store.peer(self.peer_key)
                    before = len(p["outbox"])
                    ids = [x["id"] for x in p["outbox"]]
                    if line.get("re") in ids:
                        idx = ids.index(line["re"])
                        th = p["outbox"][idx].get("th")
                        # Chunks and introductions queued before an acked msg go with it.
                        p["outbox"] = [x for i, x in enumerate(p["outbox"]) if i > idx or (
                            i < idx and not (x["t"] in ("chunk", "introduce")
                                             and x.get("th") == th))]
                    if len(p["outbox"]) != before:
                        store.save()
                emit("ack", re=line.get("re"))
            elif t == "resume":
                seen = line.get("seen")
                self.replay(seen if isinstance(seen, dict) else {})
            elif t == "ping":
                self.send({"t": "pong", "re": line.get("id", "")})
            elif t == "pong":
                pass
            elif t == "err":
                emit("err", peer=self.peer_key, line=line)
                if args.close_on_err or line.get("code") in CLOSING:
                    raise Closed(f"peer sent err {line.get('code')}")
            elif t == "bye" and self.bye_sent:
                raise Closed("bye exchanged")
            elif t == "bye":
                with store.lock:
                    store.peer(self.peer_key)["parked"] = True
                    store.save()
                emit("bye", peer=self.peer_key, reason=line.get("reason", ""))
                reply = {"t": "bye", "reason": line.get("reason", "")}
                if line.get("id"):
                    reply["re"] = line["id"]
                self.send(reply)
                self.sock.shutdown(socket.SHUT_WR)
                self.sock.settimeout(5)
                try:
                    while self.sock.recv(65536):
                        pass
                except OSError:
                    pass
                raise Closed("peer said bye")
            # anything else: an unknown type, ignored


def parse_addr(text: str) -> tuple[int, object]:
    if text.startswith("unix:"):
        return socket.AF_UNIX, text[5:].removeprefix("//")
    if text.startswith("tcp:"):
        host, _, port = text[4:].removeprefix("//").rpartition(":")
        return socket.AF_INET, (host.strip("[]"), int(port))
    raise SystemExit(f"minipeer: unsupported address {text!r} (tcp:HOST:PORT or unix:/path)")


def serve(node: Peer, addr: str) -> None:
    family, where = parse_addr(addr)
    lst = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_UNIX:
        if os.path.exists(where):
            os.unlink(where)
    else:
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(where)
    lst.listen(16)
    if family == socket.AF_UNIX:
        shown = f"unix:{where}"
    else:
        shown = f"tcp:{where[0]}:{lst.getsockname()[1]}"
    emit("listening", addr=shown, key=node.store.key)
    while True:
        sock, _ = lst.accept()
        threading.Thread(target=Conn(node, sock, outbound=False).run, daemon=True).start()


def dial_loop(node: Peer, addr: str) -> None:
    family, where = parse_addr(addr)
    emit("dialing", addr=addr, key=node.store.key)
    backoff = 0.5
    while True:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(where)
        except OSError as e:
            sock.close()
            emit("dial_failed", addr=addr, error=str(e))
        else:
            backoff = 0.5
            Conn(node, sock, outbound=True).run()
        with node.store.lock:
            peers = node.store.data["peers"].values()
            if peers and all(p.get("parked") for p in peers):
                return  # bye: do not come back until told to
        time.sleep(backoff)
        backoff = min(backoff * 2, 5)


def commands(node: Peer) -> None:
    for text in sys.stdin:
        try:
            cmd = json.loads(text)
        except ValueError:
            emit("bad_command", text=text.strip())
            continue
        what = cmd.get("cmd")
        to = cmd.get("to") or node.default_peer()
        if what == "send":
            th = cmd.get("th") or "thr_" + "".join(secrets.choice(THREAD_CHARS) for _ in range(8))
            node.queue(to, "msg", th, tag=cmd.get("tag", ""),
                       parts=[{"k": "text", "text": cmd.get("text", "")}])
        elif what == "state":
            node.queue(to, "state", cmd["th"], tag=cmd.get("tag", ""),
                       state=cmd.get("state", "done"))
        elif what == "bye":
            conn = node.conns.get(to or "")
            if conn is not None:
                with node.store.lock:
                    node.store.peer(conn.peer_key)["parked"] = True
                    node.store.save()
                conn.bye_sent = True
                conn.send({"t": "bye", "reason": cmd.get("reason", "")})
        elif what == "quit":
            break
    os._exit(0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--state", required=True, help="JSON file with identity, outbox and seen ids")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--listen", metavar="ADDR")
    mode.add_argument("--dial", metavar="ADDR")
    ap.add_argument("--name", default="minipeer")
    ap.add_argument("--caps", default="chat", help="comma-separated caps for hello")
    ap.add_argument("--send", action="append", default=[], metavar="TEXT",
                    help="queue a message (to --to, else the first peer met)")
    ap.add_argument("--thread", help="thread for --send (default: a new one)")
    ap.add_argument("--to", help="peer key for --send")
    ap.add_argument("--stdin", action="store_true", help="read JSON commands on stdin")
    for flag in ("--skip-ack", "--bad-transcript", "--accept-any-version", "--close-on-err",
                 "--forget-introduce"):
        ap.add_argument(flag, action="store_true", help="misbehave on purpose (tests)")
    args = ap.parse_args()
    args.caps = [c for c in args.caps.split(",") if c]
    node = Peer(args)
    th = args.thread or "thr_" + "".join(secrets.choice(THREAD_CHARS) for _ in range(8))
    for text in args.send:
        node.queue(args.to, "msg", th, parts=[{"k": "text", "text": text}])
    if args.stdin:
        threading.Thread(target=commands, args=(node,), daemon=True).start()
    try:
        if args.listen:
            serve(node, args.listen)
        else:
            dial_loop(node, args.dial)
            while node.conns or args.stdin:
                time.sleep(0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
