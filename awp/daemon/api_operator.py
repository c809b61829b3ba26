"""Operator keys on the local API (docs/local-api.md, "Operator keys").

The operator's secret never reaches the daemon: ``awp operator sign-device``
and ``awp operator revoke`` sign in the CLI with the operator file, and the
daemon only takes signed statements.  ``POST /v1/operator/cert`` installs
this device's certificate (it must name our key), ``POST
/v1/operator/revoke`` takes a revocation and passes it on, ``GET
/v1/operator`` and ``POST /v1/trust`` show and change which operators we
trust.
"""

from __future__ import annotations

from ..localapi.server import ApiError, Request, Router
from ..node.engine import Engine
from ..node.operators import Operators
from ..wire import operator as O
from ..wire.keys import KeyError_, normalize_key
from ..wire.names import clean_name
from ..wire.timefmt import now_ms


def _body(req: Request) -> dict:
    body = req.json() if req.body else {}
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object", "bad_request")
    return body


def add_operator_routes(r: Router, engine: Engine) -> None:
    ops_ = engine.operators
    assert isinstance(ops_, Operators)

    @r.route("GET", "/v1/operator")
    async def operator_show(req: Request) -> dict:
        await ops_.loaded.wait()
        return {"key": engine.identity.key, "accept": engine.config.accept,
                **ops_.describe(now_ms())}

    @r.route("POST", "/v1/operator/cert")
    async def operator_cert(req: Request) -> dict:
        try:
            cert = O.check_cert(_body(req).get("cert"))
        except O.OperatorError as e:
            raise ApiError(400, f"certificate refused: {e.detail}", "bad_cert") from None
        if cert.device != engine.identity.key:
            raise ApiError(400, f"the certificate is for {cert.device}, not this home's key"
                           f" {engine.identity.key}", "bad_cert")
        now = now_ms()
        if now >= cert.exp_ms:
            raise ApiError(400, "the certificate has expired", "bad_cert")
        await ops_.loaded.wait()
        await ops_.install(cert)
        return {"installed": True, "op": cert.op, "exp": cert.raw["exp"],
                "revoked": ops_.is_revoked(cert)}

    @r.route("POST", "/v1/operator/revoke")
    async def operator_revoke(req: Request) -> dict:
        rec = _body(req).get("rec")
        try:
            rev = O.check_revocation(rec)
        except O.OperatorError as e:
            raise ApiError(400, f"revocation refused: {e.detail}", "bad_revocation") from None
        await ops_.loaded.wait()
        new = await ops_.take_revocations([rev.raw], None)
        peers = [k for k in engine.peers.live_keys()
                 if (c := engine.peers.active(k)) is not None and O.CAP in c.peer_caps]
        return {"op": rev.op, "device": rev.device, "new": bool(new), "passed_to": len(peers)}

    @r.route("POST", "/v1/trust")
    async def trust(req: Request) -> dict:
        body = _body(req)
        try:
            key = normalize_key(body.get("key"))  # type: ignore[arg-type]
        except KeyError_ as e:
            raise ApiError(400, f"operator key: {e}", "bad_request") from None
        if key == engine.identity.key:
            raise ApiError(400, "this home's own key is not an operator key", "bad_request")
        name = clean_name(body.get("name")) if isinstance(body.get("name"), str) else ""
        on = body.get("remove") is not True
        await ops_.loaded.wait()
        if not on and key not in ops_.trusted:
            raise ApiError(404, f"{key} is not a trusted operator", "unknown_operator")
        if not on and key in ops_.configured:
            raise ApiError(409, f"{key} is trusted by config.json (policy.operators): remove it"
                           " there", "configured")
        changed = await ops_.set_trust(key, name, on)
        return {"key": key, "trusted": on, "changed": changed,
                "operators": ops_.describe(now_ms())["trusted"]}
