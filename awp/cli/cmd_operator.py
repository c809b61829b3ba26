"""Operator keys: ``awp operator init|show|sign-device|install|revoke`` and ``awp trust``.

The operator key lives in its own file, away from every awp home (default
``~/.awp-operator/operator.json``, or ``--file``, or ``$AWP_OPERATOR``).
Signing happens here, in the CLI: no daemon ever holds the operator's
secret.  A device's daemon only takes the signed certificate
(``install``) and passes revocations on (``revoke``).
"""

from __future__ import annotations

import json
import os
import sys
import time

import typer

from ..base.files import write_private
from ..wire import operator as O
from ..wire.b64 import b64decode_any, b64url
from ..wire.keys import Identity, KeyError_, normalize_key, short_key
from ..wire.timefmt import format_ts
from .base import USAGE, parse_seconds
from .common import CliError, app, command, daemon, home_of, home_opt, json_opt, note, out, out_json

operator_app = typer.Typer(
    name="operator",
    no_args_is_help=True,
    rich_markup_mode=None,
    help="An operator key that vouches for devices: make it, sign device certificates,"
         " revoke them.",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
app.add_typer(operator_app, name="operator", short_help="Operator keys: certify and revoke devices")

DEFAULT_TTL = "90d"
MAX_FILE_BYTES = 64 * 1024


def default_file() -> str:
    return os.environ.get("AWP_OPERATOR") or os.path.join(
        os.path.expanduser("~"), ".awp-operator", "operator.json")


def file_opt() -> typer.models.OptionInfo:
    return typer.Option(None, "--file", metavar="PATH",
                        help="the operator key file (default $AWP_OPERATOR or"
                             " ~/.awp-operator/operator.json)")


def load_operator(file: str | None) -> Identity:
    path = file or default_file()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read(MAX_FILE_BYTES))
        seed = b64decode_any(data["seed"])
        if len(seed) != 32:
            raise ValueError("seed is not 32 bytes")
    except FileNotFoundError:
        raise CliError(f"no operator key at {path}: run `awp operator init` first") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CliError(f"{path} is not an operator key file ({e})") from None
    return Identity(seed)


def _device_key(text: str) -> str:
    try:
        return normalize_key(text)
    except KeyError_ as e:
        raise CliError(f"KEY must be a device's full key (awp key show prints it): {e}",
                       USAGE) from None


@command("init", on=operator_app, label="operator init")
def operator_init(file: str = file_opt(), as_json: bool = json_opt()) -> None:
    """Make an operator key in its own file (0600), kept away from every awp home.

    \b
    Example:
      awp operator init --file /secure/team-operator.json
    """
    path = file or default_file()
    if os.path.exists(path):
        raise CliError(f"{path} already exists: an operator key is made once")
    ident = Identity.generate()
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    write_private(path, json.dumps({"key": ident.key, "seed": b64url(ident.seed),
                                    "kind": "awp-operator"}) + "\n")
    if as_json:
        out_json({"key": ident.key, "file": path})
        return
    out(f"operator {ident.key}")
    note(f"secret in {path}: keep it off the devices; peers run `awp trust {ident.key}`")


@command("show", on=operator_app, label="operator show")
def operator_show(home: str = home_opt(), as_json: bool = json_opt()) -> None:
    """Show this home's device certificate and the operators it trusts.

    \b
    Example:
      awp operator show
    """
    res = daemon(home_of(home)).get("/v1/operator")
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    cert = res.get("cert")
    if cert:
        state = ("revoked" if res.get("cert_revoked") else
                 "live" if res.get("cert_live") else "not live")
        out(f"certified by operator {cert['op']} until {cert['exp']} ({state})")
    else:
        out("no operator certificate (awp operator install CERT)")
    trusted = res.get("trusted") or []
    for t in trusted:
        out(f"trusts operator {t['key']}" + (f" ({t['name']})" if t.get("name") else ""))
    if not trusted:
        out("trusts no operator (awp trust OPERATOR_KEY)")
    out(f"admission policy: {res.get('accept')}; revocations held: {res.get('revocations', 0)}")


@command("sign-device", on=operator_app, label="operator sign-device")
def operator_sign(
    key: str = typer.Argument(..., metavar="KEY", help="the device's key (awp key show)"),
    ttl: str = typer.Option(DEFAULT_TTL, "--ttl", metavar="DURATION",
                            help="how long the certificate lasts (at most 400d)"),
    name: str = typer.Option("", "--name", metavar="NAME", help="a label for the device"),
    file: str = file_opt(),
) -> None:
    """Print a certificate for a device: install it there with `awp operator install`.

    Runs without a daemon; only the operator file is read.

    \b
    Example:
      awp operator sign-device ed25519:AbC... --ttl 90d > dev.cert
    """
    device = _device_key(key)
    secs = parse_seconds(ttl, "--ttl")
    if not 60 <= secs <= O.MAX_TTL_S:
        raise CliError(f"--ttl must be from 1m to {O.MAX_TTL_S // 86400}d", USAGE)
    if len(name) > O.MAX_NAME or any(ord(ch) < 32 for ch in name):
        raise CliError(f"--name: at most {O.MAX_NAME} printable characters", USAGE)
    op = load_operator(file)
    if op.key == device:
        raise CliError("an operator cannot certify its own key", USAGE)
    now = int(time.time() * 1000)
    cert = O.make_cert(op, device, now, now + int(secs * 1000), name)
    out(json.dumps(cert, separators=(",", ":"), sort_keys=True))


def _read_cert(source: str) -> object:
    try:
        text = sys.stdin.read(MAX_FILE_BYTES) if source == "-" else open(  # noqa: SIM115
            source, encoding="utf-8").read(MAX_FILE_BYTES)
    except OSError as e:
        raise CliError(f"cannot read {source}: {e.strerror}") from None
    try:
        return json.loads(text)
    except ValueError:
        raise CliError(f"{source} does not hold a certificate (one JSON object)") from None


@command("install", on=operator_app, label="operator install")
def operator_install(
    cert: str = typer.Argument(..., metavar="CERT", help="the certificate file, or - for stdin"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Carry an operator's certificate for this home's key in every handshake.

    \b
    Example:
      awp operator install dev.cert
    """
    res = daemon(home_of(home)).post("/v1/operator/cert", {"cert": _read_cert(cert)})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    out(f"certified by operator {res['op']} until {res['exp']}")
    if res.get("revoked"):
        note("that operator has revoked this device since: peers will refuse it")


@command("revoke", on=operator_app, label="operator revoke")
def operator_revoke(
    key: str = typer.Argument(..., metavar="KEY", help="the device key to revoke"),
    file: str = file_opt(),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Revoke every certificate the operator gave a device, and spread the word.

    The revocation is signed here and handed to this home's daemon, which
    passes it to its peers; each passes it on, so it reaches hosts never
    met directly. A certificate signed after the revocation counts again.

    \b
    Example:
      awp operator revoke ed25519:AbC...
    """
    device = _device_key(key)
    op = load_operator(file)
    rec = O.make_revocation(op, device, int(time.time() * 1000))
    res = daemon(home_of(home)).post("/v1/operator/revoke", {"rec": rec})
    assert isinstance(res, dict)
    if as_json:
        out_json({**res, "rec": rec})
        return
    out(f"revoked {device} (operator {short_key(op.key)}, {format_ts(int(time.time() * 1000))})")
    note(f"passed to {res['passed_to']} connected peers; others learn it at their next handshake")


@command("trust", short_help="Trust an operator key: admit the devices it certifies")
def trust_cmd(
    key: str = typer.Argument(None, metavar="OPERATOR_KEY", help="the operator's key"),
    name: str = typer.Option("", "--name", metavar="NAME", help="a label for the operator"),
    remove: bool = typer.Option(False, "--remove", help="stop trusting it"),
    list_: bool = typer.Option(False, "--list", help="list the trusted operators"),
    home: str = home_opt(),
    as_json: bool = json_opt(),
) -> None:
    """Trust an operator: a device with its live certificate is admitted under
    'accept: operator' and 'allowlist' without a per-device step, and one it
    revoked is refused. Not the same as --trust (grant issuers).

    \b
    Examples:
      awp trust ed25519:OpK... --name team
      awp trust --list
      awp trust ed25519:OpK... --remove
    """
    client = daemon(home_of(home))
    if list_ or key is None:
        res = client.get("/v1/operator")
        assert isinstance(res, dict)
        if as_json:
            out_json(res.get("trusted") or [])
            return
        for t in res.get("trusted") or []:
            out(t["key"] + (f"  {t['name']}" if t.get("name") else ""))
        if not res.get("trusted"):
            note("no operator is trusted")
        return
    res = client.post("/v1/trust", {"key": key, "name": name, "remove": remove})
    assert isinstance(res, dict)
    if as_json:
        out_json(res)
        return
    if remove:
        out(f"no longer trusting operator {res['key']}")
    else:
        out(f"trusting operator {res['key']}" + ("" if res.get("changed") else " (already)"))
