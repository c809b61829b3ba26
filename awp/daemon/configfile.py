"""Reading and checking ``config.json``.

A wrong type used to fall back to the default without a word (``"listen":
"tcp:..."`` as a string quietly meant tailcat), so the daemon came up doing
something other than what its owner wrote.  Every key is now checked against
the form the docs give it, and the first problem is one line that names the
key, says what was expected and shows an example.  Unknown keys are refused
too: a misspelt key is the same silent fallback.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ..base.durations import parse_duration
from ..base.home import HomeError, path
from ..base.limits import limits_from_config
from ..wire.address import AddressError, parse_listen
from ..wire.keys import KeyError_, decode_key
from ..wire.strictjson import loads as strict_loads

SERVABLE = ("exec", "fs:read", "fs:write")
MAX_CONFIG_BYTES = 1024 * 1024  # read whole at every start; a real one is a few hundred bytes


class ConfigError(HomeError):
    """One key of config.json has the wrong form; the message names it."""


def _string(v: object) -> str:
    if not isinstance(v, str):
        raise ValueError("expected a string")
    return ""


def _bool(v: object) -> str:
    if not isinstance(v, bool):
        raise ValueError("expected true or false")
    return ""


def _str_list(v: object, example: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        got = "a string" if isinstance(v, str) else type(v).__name__
        raise ValueError(f"expected a list of strings such as {example}, got {got}")
    return v


def _listen(v: object) -> str:
    for i, item in enumerate(_str_list(v, '["tailcat", "tcp:127.0.0.1:7000"]')):
        try:
            parse_listen(item)
        except AddressError as e:
            raise ValueError(f"entry {i} ({item!r}): {e}; use tailcat, tcp:HOST:PORT"
                             " or unix:/path") from None
    return ""


def _keys(v: object) -> str:
    for item in _str_list(v, '["ed25519:..."]'):
        try:
            decode_key(item)
        except KeyError_ as e:
            raise ValueError(f"{item!r} is not a key: {e}") from None
    return ""


def _share_with(v: object) -> str:
    _str_list(v, '["ed25519:..."] or ["dashboard@ops"]')
    return ""


def _positive_int(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError("expected a whole number of bytes above 0, such as 52428800")
    return ""


def _duration(v: object) -> str:
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise ValueError('expected a duration such as "30s" or "168h"')
    try:
        parse_duration(v)
    except ValueError as e:
        raise ValueError(f'{e}; expected a duration such as "30s" or "168h"') from None
    return ""


def _accept(v: object) -> str:
    if v not in ("any", "allowlist", "invite-only", "operator"):
        raise ValueError('expected "any", "allowlist", "invite-only" or "operator",'
                         f" not {json.dumps(v)}")
    return ""


def _every(v: object) -> str:
    if isinstance(v, str) and v.strip().lower() in ("0", "off", "never"):
        return ""
    return _duration(v)


def _serve(v: object) -> str:
    for c in _str_list(v, '["fs:read"]'):
        if c not in SERVABLE:
            raise ValueError(f"cannot serve {c!r}: choose from {', '.join(SERVABLE)}")
    return ""


def _limits(v: object) -> str:
    limits_from_config(v)
    return ""


_TOP: dict[str, Callable[[object], str]] = {
    "name": _string, "about": _string, "harness": _string, "model": _string,
    "listen": _listen, "advertise": _string, "presence": _bool,
    "share_with": _share_with, "blob_limit": _positive_int, "ping_interval": _duration,
    "outbox_ttl": _duration, "trace": _bool, "verbose": _bool, "allow_plaintext": _bool,
    "policy": lambda v: "", "limits": _limits, "pause_gap": _duration,
    "rotate_every": _every,
}
_POLICY: dict[str, Callable[[object], str]] = {
    "accept": _accept, "allow": _keys, "trust": _keys, "serve": _serve, "root": _string,
    "operators": _keys,
}


def check_config(cfg: dict) -> None:
    """Raise ``ValueError("key: why")`` for the first key that is not as documented."""
    for key, value in cfg.items():
        check = _TOP.get(key)
        if check is None:
            raise ValueError(f"{key}: unknown key (known: {', '.join(sorted(_TOP))})")
        try:
            check(value)
        except ValueError as e:
            # limits_from_config already says "limits.x: ..."
            raise ValueError(str(e) if key == "limits" else f"{key}: {e}") from None
    policy = cfg.get("policy")
    if policy is None:
        return
    if not isinstance(policy, dict):
        raise ValueError('policy: expected an object such as {"accept": "allowlist"}')
    for key, value in policy.items():
        check = _POLICY.get(key)
        if check is None:
            raise ValueError(f"policy.{key}: unknown key (known: {', '.join(sorted(_POLICY))})")
        try:
            check(value)
        except ValueError as e:
            raise ValueError(f"policy.{key}: {e}") from None


def load_config_file(home: str) -> dict:
    """The checked contents of ``config.json`` (``{}`` when there is none)."""
    file = path(home, "config.json")
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read(MAX_CONFIG_BYTES + 1)
        if len(text) > MAX_CONFIG_BYTES:
            raise ValueError(f"over {MAX_CONFIG_BYTES // 1024} KiB: is this the right file?")
        data = strict_loads(text)  # no NaN or Infinity: they would pass as numbers
    except FileNotFoundError:
        return {}
    except RecursionError:
        raise ConfigError(f"{file}: nested far too deep") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"{file}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: must hold a JSON object")
    try:
        check_config(data)
    except ValueError as e:
        raise ConfigError(f"{file}: {e}") from None
    return data
