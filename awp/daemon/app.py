"""``awp daemon``: one process per home running the engine and the local API."""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass, field

import trio

from .. import __version__
from ..base import home as homes
from ..base.files import write_private
from ..base.sockpath import remove_socket_pointer, socket_path_for_home, write_socket_pointer
from ..localapi.server import serve_unix
from ..node import intake
from ..node.board import Board
from ..node.board_queue import BoardQueue
from ..node.bulk import Bulk
from ..node.config import NodeConfig
from ..node.engine import Engine
from ..node.keylinks import KeyLinks
from ..node.mirror import Mirror
from ..node.operators import Operators
from ..node.pair import Pair
from ..node.presence import Presence
from ..node.rotate import Rotations
from ..node.serving import Serving
from ..store import check, ops, queries, salvage
from ..store.db import StoreError, open_store
from ..transport import streams
from ..transport.ifaddrs import expand_wildcard
from ..wire.address import AddressError, parse_listen
from .facade import Parts
from .keyfile import IdentityFile, load_identity
from .settings import REMEMBERED, Flags, Settings, resolve

log = logging.getLogger("awp.daemon")


@dataclass
class DaemonState:
    """What the local API reports about the process itself."""

    home: str
    settings: Settings
    socket_path: str = ""
    listen_errors: dict[str, str] = field(default_factory=dict)
    started_ms: int = 0
    stop: trio.Event = field(default_factory=trio.Event)
    # Set with ``stop`` by ``awp key rotate``: run again in this process under
    # the new key (the same pid, lock and settings; every part rebuilt).
    restart: bool = False
    parts: Parts = field(default_factory=Parts)  # the extensions, for the routes


def setup_logging(trace: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("awp.trace").setLevel(logging.INFO if trace else logging.WARNING)


def sd_notify(state: str) -> None:
    """Tell systemd (Type=notify) about readiness and stopping; no-op elsewhere."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            s.sendall(state.encode())
    except OSError as e:
        log.warning("sd_notify failed: %s", e)


def remembered_values(db_path: str) -> dict[str, str]:
    conn = open_store(db_path)
    try:
        out = {}
        for k in REMEMBERED:
            v = ops.get_meta(conn, "remember." + k)
            if v is not None:
                out[k] = v
        return out
    finally:
        conn.close()


def node_config(s: Settings) -> NodeConfig:
    return NodeConfig(
        name=s.name, about=s.about, advertise=s.advertise, accept=s.accept,
        allow=set(s.allow), trust=set(s.trust), ping_interval=s.ping_interval,
        outbox_ttl=s.outbox_ttl, blob_limit=s.blob_limit, trace=s.trace,
        allow_plaintext=s.allow_plaintext, seal=s.seal, serve=set(s.serve), root=s.root,
        limits=s.limits, pause_gap=s.pause_gap,
    )


def run(home: str, flags: Flags) -> int:
    """Run the daemon in the foreground until SIGTERM/SIGINT or ``awp down``."""
    hint = check.repair_hint(home)
    try:
        homes.ensure_home(home)
        lock = homes.HomeLock(home)
        lock.acquire()
        homes.clear_down(home)  # started again: what awp down said no longer holds
    except (homes.HomeError, OSError) as e:
        print(f"awp daemon: {e}", file=sys.stderr)
        return 1
    try:
        db_path = homes.path(home, "awp.db")
        ident = load_identity(home)
        stopped = salvage.interrupted(db_path)
        if stopped:
            raise check.StoreDamaged(check.interrupted_message(db_path, stopped, home))
        warning = check.verify(db_path, hint=hint)
        intake.check(home)  # a journal that lost acked lines: awp repair names them first
        settings = resolve(home, flags, remembered_values(db_path))
        setup_logging(settings.trace)
        if warning:
            log.warning("%s", warning)
        write_private(homes.path(home, "daemon.pid"), f"{os.getpid()}\n")
        # Short GIL slices: the store writer thread and the event loop hand work
        # back and forth constantly, and the default 5 ms slice shows up as latency.
        sys.setswitchinterval(0.0005)
        # What start-up built (modules, tables) lives as long as the process:
        # kept out of the cyclic collector, it is not walked again by every
        # full collection while a backlog's lines churn through.
        gc.collect()
        gc.freeze()
        while True:
            bound: dict[str, str] = {}
            code = trio.run(_main, home, ident, db_path, settings, bound)
            if code != RESTART:
                return code
            # Listen where we listened (a port 0 got a port: peers know that one).
            settings = dataclasses.replace(
                settings, listen=[bound.get(item, item) for item in settings.listen])
            ident = load_identity(home)  # the rotated key, read back from the home
            log.info("restarting under the rotated key %s", ident.identity.key)
    except (homes.HomeError, StoreError, OSError) as e:
        print(f"awp daemon: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        # Damage SQLite finds after the start checks (inside the event loop,
        # so wrapped in an exception group): one line, not a traceback.
        found = check.damage_in(e)
        if found is None:
            raise
        why = found if isinstance(found, StoreError) else f"awp.db is damaged ({check.describe(found)}){hint}"
        print(f"awp daemon: {why}", file=sys.stderr)
        return 1
    finally:
        for name in ("daemon.pid",):
            try:
                os.unlink(homes.path(home, name))
            except OSError:
                pass
        lock.release()


RESTART = -1  # what _main returns when the daemon should run again (a rotated key)


async def _main(home: str, ident: IdentityFile, db_path: str, settings: Settings,
                bound_out: dict[str, str] | None = None) -> int:
    identity = ident.identity
    engine = Engine(identity, db_path, node_config(settings), net=streams)
    engine.rotation = Rotations(engine, ident.rotations, ident.next_key)
    engine.operators = Operators(engine, configured=settings.operators)
    engine.extensions.append(engine.operators)
    engine.keylinks = KeyLinks(engine)  # several keys, one identity (cap keys)
    engine.extensions.append(engine.keylinks)
    engine.expand = expand_wildcard  # hello.addrs, invites
    engine.extensions.append(Serving(engine, set(settings.serve), settings.root))
    engine.mirror = Mirror(engine)
    engine.extensions.append(engine.mirror)
    engine.presence = Presence(engine, settings.presence, describe=lambda: {
        "harness": settings.harness, "model": getattr(engine, "model", "") or settings.model})
    engine.extensions.append(engine.presence)
    engine.board = Board(engine)
    engine.board.queue = BoardQueue(engine.board)
    engine.extensions.append(engine.board)
    engine.bulk = Bulk(engine)  # big files on side connections (cap bulk)
    engine.extensions.append(engine.bulk)
    engine.pair = Pair(engine)  # live byte streams on side connections (cap pair)
    engine.extensions.append(engine.pair)
    state = DaemonState(home=home, settings=settings, started_ms=engine.started_at,
                        parts=Parts(presence=engine.presence, board=engine.board,
                                    queue=engine.board.queue, mirror=engine.mirror))
    log.info("awp %s starting as %s (%s) in %s", __version__, settings.name, identity.key, home)
    async with trio.open_nursery() as nursery:
        await nursery.start(engine.run)
        await _remember(engine, settings)
        _setup_tailcat(home, settings, state)
        _setup_ws(home, settings)
        for item in settings.listen:
            try:
                addr = parse_listen(item)
                if addr.kind == "tailcat":
                    # The address comes once tailcat prints it: don't hold up the API.
                    nursery.start_soon(_listen_later, engine, state, item, addr)
                    continue
                bound = await engine.listen(addr)
                log.info("listening on %s", bound)
                if bound_out is not None:
                    bound_out[item] = str(bound)
            except (AddressError, Exception) as e:
                state.listen_errors[item] = str(e)
                log.error("cannot listen on %s: %s", item, e)
        failed = _fatal_listen_errors(settings, state)
        if failed:
            for item, why in failed.items():
                print(f"awp daemon: cannot listen on {item}: {why}", file=sys.stderr)
            nursery.cancel_scope.cancel()
            return 1
        from .api import build_router

        router = build_router(engine, state)
        from .api_web import add_web_routes

        add_web_routes(router, engine, state)
        from .api_board import add_board_routes

        add_board_routes(router, engine, state)  # before the agent routes wrap the acting ones
        from .api_invite import add_invite_routes

        add_invite_routes(router, engine, state)
        from .api_agent import add_agent_routes

        add_agent_routes(router, engine, state)
        from .api_key import add_key_routes, add_keylink_routes
        from .autorotate import Rotator

        rotator = Rotator(engine, state)
        await rotator.configure()
        add_key_routes(router, engine, state, rotator)
        add_keylink_routes(router, engine)
        from .api_operator import add_operator_routes

        add_operator_routes(router, engine)
        from .api_fetch import add_fetch_routes

        add_fetch_routes(router, engine)
        from .api_pair import add_pair_routes

        add_pair_routes(router, engine, engine.pair)
        nursery.start_soon(rotator.run)  # a key with a lifetime: rotated on time, unattended
        from .damage import guard

        guard(router, home)
        sock = socket_path_for_home(home, create=True)
        state.socket_path = sock
        if sock != homes.path(home, "awp.sock"):
            write_socket_pointer(home, sock)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            # Readiness only once a SIGTERM would be handled cleanly.
            await nursery.start(functools.partial(
                serve_unix, sock, router, max_body=settings.limits.api_body_bytes,
                max_depth=settings.limits.json_depth))
            sd_notify("READY=1")
            log.info("local API on %s", sock)
            nursery.start_soon(_warm_first_contact)
            async with trio.open_nursery() as waiters:
                async def on_signal() -> None:
                    async for sig in signals:
                        log.info("received %s, stopping", signal.Signals(sig).name)
                        break
                    waiters.cancel_scope.cancel()

                async def on_stop() -> None:
                    await state.stop.wait()
                    waiters.cancel_scope.cancel()

                waiters.start_soon(on_signal)
                waiters.start_soon(on_stop)
        sd_notify("RELOADING=1" if state.restart else "STOPPING=1")
        nursery.cancel_scope.cancel()
    remove_socket_pointer(home)
    if state.restart:
        return RESTART
    log.info("stopped; queued messages stay on disk")
    return 0


def _fatal_listen_errors(settings: Settings, state: DaemonState) -> dict[str, str]:
    """The listeners whose failure ends a daemon started in the foreground.

    Run by hand or by a service manager (``awp daemon``), a TCP or Unix
    listener that cannot be bound (a port taken, a bad path) is a start that
    failed: say so and exit non-zero, so the caller notices instead of a
    daemon running deaf while its connects reach whoever holds the port.  A
    daemon the CLI started on demand (it passes ``--start-dir``) keeps
    running, so that ``awp up`` can report the error from its status and the
    local commands still work.  Tailcat is never fatal here: it binds later,
    once its relay answers, and reports through the status.
    """
    if settings.on_demand:
        return {}
    return {k: v for k, v in state.listen_errors.items() if k.strip().lower() != "tailcat"}


def _setup_tailcat(home: str, settings: Settings, state: DaemonState) -> None:
    """Register the tailcat transport; its listener's errors land in listen_errors."""
    from ..transport import tailcat

    key = next((x for x in settings.listen if x.strip().lower() == "tailcat"), "tailcat")

    def report(error: str | None) -> None:
        if error:
            state.listen_errors[key] = error
        else:
            state.listen_errors.pop(key, None)

    tailcat.setup(home, settings.verbose, report=report)


def _setup_ws(home: str, settings: Settings) -> None:
    """The ws binding's bounds from ``limits.ws_*``, and the CAs ``awp connect --ca`` added."""
    from ..transport import wsconfig

    lim = settings.limits
    wsconfig.configure(wsconfig.WsLimits(
        handshake_timeout=lim.ws_handshake_timeout, frame_bytes=lim.ws_frame_bytes,
        message_bytes=lim.ws_message_bytes, upgrades_per_ip=lim.ws_upgrades_per_ip),
        ca_file=wsconfig.ca_path(home))


async def _warm_first_contact() -> None:
    """Load, in a thread once we serve, what a daemon's first new peer needs.

    The ws dialer (h11, wsproto, ssl: some 25 ms of imports) and the
    confusables table that names a new peer (13 ms to parse) are loaded
    lazily, so the CLI and hooks never pay for them; a daemon's first
    contact paid them inside its handshake (a fresh dialer's first ack over
    ws: p50 42 ms, tcp's 27; bench/ws.py ``dial``).
    """
    import importlib

    def load() -> None:
        importlib.import_module("awp.transport.wsclient")
        from ..wire import confusables

        confusables.table()

    await trio.to_thread.run_sync(load, abandon_on_cancel=True)


async def _listen_later(engine: Engine, state: DaemonState, item: str, addr) -> None:
    try:
        bound = await engine.listen(addr)
        log.info("listening on %s", bound)
    except Exception as e:
        state.listen_errors[item] = str(e)
        log.error("cannot listen on %s: %s", item, e)


async def _remember(engine: Engine, settings: Settings) -> None:
    def job(c) -> dict:
        for k, v in settings.remember.items():
            ops.set_meta(c, "remember." + k, v)
        return {k: ops.get_meta(c, "remember." + k) for k in ("share_with", "model")}

    stored = await engine.writer.run(job)
    try:
        hosts = json.loads(stored.get("share_with") or "[]")
    except ValueError:
        hosts = []
    keys = []
    for h in hosts if isinstance(hosts, list) else []:
        try:
            keys.append(await engine.read(lambda c, h=h: queries.resolve_peer(c, str(h))))
        except queries.LookupFailed as e:
            log.warning("not sharing with %s: %s", h, e)
    engine.shares = keys or None
