"""Settings: ``config.json`` < environment < flags, plus remembered values.

The name, about line, harness, model and share list are remembered in the
store whenever any of the three sources sets them, so an agent sets them once.
A harness detected from the environment is never remembered.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..base.durations import parse_duration
from ..base.home import HomeError, default_name, path
from ..base.limits import Limits, limits_from_config
from ..wire.keys import KeyError_, normalize_key
from ..wire.names import clean_name
from ..wire.seal import SEAL_POLICIES
from .configfile import SERVABLE, load_config_file

REMEMBERED = ("name", "about", "harness", "model", "share_with", "listen")
MiB = 1024 * 1024


@dataclass(frozen=True)
class Harnesses:
    """What the daemon's caller knows of harness ids, handed in.

    :mod:`awp.harness` (the ids, their spellings, detection from the
    environment) sits above the daemon: ``awp daemon`` hands in the known ids,
    how to read a spelling, and what it detected, so the daemon never imports
    it.  Given nothing, the daemon knows no harness and detects none.
    """

    known: tuple[str, ...] = ()
    normalize: Callable[[object], str | None] | None = None
    detected: str = ""

    def id_of(self, raw: object) -> str | None:
        """The harness id for ``raw`` (a spelling such as ``claude-code``), else ``None``."""
        if self.normalize is not None:
            return self.normalize(raw)
        return raw if isinstance(raw, str) and raw in self.known else None


@dataclass
class Flags:
    """What ``awp daemon`` (or ``awp up``) was given on its command line."""

    name: str | None = None
    about: str | None = None
    harness: str | None = None
    listen: list[str] = field(default_factory=list)
    no_tailcat: bool = False
    advertise: str | None = None
    accept: str | None = None
    allow: list[str] = field(default_factory=list)
    trust: list[str] = field(default_factory=list)
    serve: list[str] = field(default_factory=list)
    root: str | None = None
    presence: bool | None = None
    share_with: list[str] | None = None
    trace: bool | None = None
    verbose: bool | None = None
    start_dir: str | None = None  # the caller's directory when the CLI started us elsewhere
    harnesses: Harnesses = field(default_factory=Harnesses)


@dataclass
class Settings:
    name: str
    about: str
    harness: str
    model: str
    listen: list[str]
    advertise: str | None
    accept: str
    allow: list[str]
    trust: list[str]
    serve: list[str]
    root: str
    presence: bool
    share_with: list[str] | None
    blob_limit: int
    ping_interval: float
    outbox_ttl: float
    trace: bool
    verbose: bool
    allow_plaintext: bool
    seal: str = "prefer"
    limits: Limits = field(default_factory=Limits)
    listen_source: str = "default"
    remember: dict[str, str] = field(default_factory=dict)
    harnesses: Harnesses = field(default_factory=Harnesses)
    on_demand: bool = False  # the CLI started us (``--start-dir``), not a person or a service
    pause_gap: float = 5.0  # clocks this far ahead of the watcher's tick: we slept
    # ``rotate_every`` (config.json) or AWP_ROTATE_EVERY: the unattended rotation
    # schedule, applied at start (0 is off); None leaves the stored one alone.
    rotate_every: float | None = None
    operators: list[str] = field(default_factory=list)  # policy.operators: trusted, from config


def _csv(v: str | None) -> list[str]:
    return [x.strip() for x in (v or "").split(",") if x.strip()]


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes", "on")


def _listen(flags: Flags, env: dict[str, str], cfg: dict, remembered: dict[str, str],
            remember: dict[str, str]) -> tuple[list[str], str]:
    """The listen list and where it came from.

    ``--listen`` and ``AWP_LISTEN`` are remembered like ``--name``: a daemon
    that ``awp down`` stopped and a later command started on demand comes
    back on the same listener instead of falling back to tailcat.
    ``--no-tailcat`` is part of what is remembered (it filters the list).
    """
    if flags.listen:
        listen, source = list(flags.listen), "--listen"
    elif env.get("AWP_LISTEN"):
        listen, source = _csv(env["AWP_LISTEN"]), "AWP_LISTEN"
    elif "listen" in cfg:
        listen, source = list(cfg["listen"]), "config.json"
    else:
        listen, source = [], ""
        try:
            saved = json.loads(remembered.get("listen") or "null")
        except ValueError:
            saved = None
        if isinstance(saved, list) and all(isinstance(x, str) for x in saved):
            listen, source = saved, "remembered"
        if not source:
            listen, source = ["tailcat"], "default"
    if flags.no_tailcat:
        listen = [x for x in listen if x.strip().lower() != "tailcat"]
    if source in ("--listen", "AWP_LISTEN"):
        remember["listen"] = json.dumps(listen)
    return listen, source


def resolve(home: str, flags: Flags, remembered: dict[str, str],
            env: dict[str, str] | None = None) -> Settings:
    """Merge the three sources and the remembered values; raise HomeError on bad values."""
    env = dict(os.environ) if env is None else env
    cfg = load_config_file(home)
    pol = cfg.get("policy") if isinstance(cfg.get("policy"), dict) else {}
    remember: dict[str, str] = {}

    def pick(key: str, flag_val, env_name: str, cfg_val):
        for v in (flag_val, env.get(env_name), cfg_val):
            if v is not None and v != "":
                return v, True
        return None, False

    def remembered_value(key: str, flag_val, env_name: str, default: str) -> str:
        v, explicit = pick(key, flag_val, env_name, cfg.get(key))
        if explicit:
            remember[key] = str(v)
            return str(v)
        return remembered.get(key, default)

    given = remembered_value("name", flags.name, "AWP_NAME", "")
    name = clean_name(given)  # what peers see: no invisible characters, one space at most
    if given and not name:
        raise HomeError(f"the name {given!r} is empty once spaces and invisible characters"
                        " are removed")
    if "name" in remember:
        remember["name"] = name
    name = name or default_name()
    about = remembered_value("about", flags.about, "AWP_ABOUT", "")
    model = remembered_value("model", None, "AWP_MODEL", "")
    harness_explicit, explicit = pick("harness", flags.harness, "AWP_HARNESS", cfg.get("harness"))
    if explicit:
        harness = str(harness_explicit)
        remember["harness"] = harness
    else:
        harness = remembered.get("harness", "")

    listen, listen_source = _listen(flags, env, cfg, remembered, remember)

    advertise, _ = pick("advertise", flags.advertise, "AWP_ADVERTISE", cfg.get("advertise"))
    accept, _ = pick("accept", flags.accept, "AWP_ACCEPT", pol.get("accept"))
    accept = str(accept or "any")
    if accept not in ("any", "allowlist", "invite-only", "operator"):
        raise HomeError("admission policy must be 'any', 'allowlist', 'invite-only' or"
                        f" 'operator', not {accept!r}")
    seal, _ = pick("seal", None, "AWP_SEAL", pol.get("seal"))
    seal = str(seal or "prefer")
    if seal not in SEAL_POLICIES:
        raise HomeError(f"seal policy must be one of {', '.join(SEAL_POLICIES)}, not {seal!r}")

    def keylist(cfg_list, env_name: str, flag_list: list[str]) -> list[str]:
        out = [str(x) for x in cfg_list] if isinstance(cfg_list, list) else []
        return out + _csv(env.get(env_name)) + list(flag_list)

    allow = keylist(pol.get("allow"), "AWP_ALLOW", flags.allow)
    trust = keylist(pol.get("trust"), "AWP_TRUST", flags.trust)
    operators = keylist(pol.get("operators"), "AWP_OPERATORS", [])
    try:
        operators = [normalize_key(k) for k in operators]
    except KeyError_ as e:
        raise HomeError(f"policy.operators / AWP_OPERATORS: not a key: {e}") from None
    serve_src = flags.serve or _csv(env.get("AWP_SERVE")) or (
        [str(x) for x in pol["serve"]] if isinstance(pol.get("serve"), list) else [])
    serve = [c for s in serve_src for c in _csv(s)]
    for c in serve:
        if c not in SERVABLE:
            raise HomeError(f"cannot serve {c!r}: choose from {', '.join(SERVABLE)}")
    root, _ = pick("root", flags.root, "AWP_ROOT", pol.get("root"))
    # Relative to where the daemon was asked for: the CLI starts it in its home.
    start = flags.start_dir or os.getcwd()
    root = os.path.join(start, os.path.expanduser(str(root))) if root else start
    root = os.path.abspath(root)

    if flags.presence is not None:
        presence = flags.presence
    elif "AWP_PRESENCE" in env:
        presence = _truthy(env["AWP_PRESENCE"])
    else:
        presence = bool(cfg.get("presence", False))

    share_with: list[str] | None
    if flags.share_with is not None:
        share_with = flags.share_with
    elif env.get("AWP_SHARE_WITH"):
        share_with = _csv(env["AWP_SHARE_WITH"])
    elif isinstance(cfg.get("share_with"), list):
        share_with = [str(x) for x in cfg["share_with"]]
    else:
        share_with = None
    if share_with is not None:
        remember["share_with"] = json.dumps(share_with)

    try:
        blob_limit = int(env.get("AWP_BLOB_LIMIT") or cfg.get("blob_limit") or 50 * MiB)
        ping = parse_duration(env.get("AWP_PING_INTERVAL") or cfg.get("ping_interval") or "30s")
        ttl = parse_duration(cfg.get("outbox_ttl") or "168h")
        pause_gap = parse_duration(cfg.get("pause_gap") or "5s")
        rotate_every = _every(env.get("AWP_ROTATE_EVERY") or cfg.get("rotate_every"))
    except (TypeError, ValueError, OverflowError) as e:
        raise HomeError(f"bad setting: {e}") from None
    if ping <= 0:
        raise HomeError("ping_interval must be positive")
    if pause_gap <= 0:
        raise HomeError("pause_gap must be positive")
    try:
        limits = limits_from_config(cfg.get("limits"))
    except ValueError as e:
        raise HomeError(f"{path(home, 'config.json')}: {e}") from None

    trace = flags.trace if flags.trace else (
        _truthy(env.get("AWP_TRACE")) or bool(cfg.get("trace", False)))
    verbose = bool(flags.verbose) or bool(cfg.get("verbose", False))
    allow_plaintext = _truthy(env.get("AWP_ALLOW_PLAINTEXT")) or bool(
        cfg.get("allow_plaintext", False))

    return Settings(
        name=name, about=about, harness=harness, model=model, listen=listen,
        advertise=None if advertise is None else str(advertise), accept=accept,
        allow=allow, trust=trust, serve=serve, root=root, presence=presence,
        share_with=share_with, blob_limit=blob_limit, ping_interval=ping, outbox_ttl=ttl,
        trace=bool(trace), verbose=verbose, allow_plaintext=allow_plaintext, seal=seal, limits=limits,
        listen_source=listen_source,
        remember=remember, harnesses=flags.harnesses, on_demand=flags.start_dir is not None,
        pause_gap=pause_gap, rotate_every=rotate_every, operators=operators,
    )


MIN_ROTATE_EVERY_S = 3600.0  # a configured schedule shorter than this is a mistake


def _every(value: object) -> float | None:
    """``rotate_every``: a duration ("30d"), seconds, or 0/"off"; None when unset."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().lower() in ("0", "off", "never"):
        return 0.0
    secs = float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else parse_duration(str(value))
    if secs and secs < MIN_ROTATE_EVERY_S:
        raise ValueError(f"rotate_every must be 0 (off) or at least 1h, not {value!r}")
    return secs
