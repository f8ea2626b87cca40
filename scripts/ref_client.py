#!/usr/bin/env python3
"""Drive the Python reference SDK's `LdpClient` (PyPI ldp-protocol 0.2.0) against an LDP server.

Usage:
    scripts/ref_client.py URL [--secret S] [--skill echo] [--input JSON]
                          [--expect-output JSON] [--client-id ID] [--trust-domain NAME]
                          [--no-enforce-trust] [--discover identity|wellknown] [--lenient]
                          [--require-signed-responses] [--timeout SECONDS]

Defaults: --skill echo, --input '{"text": "hello"}', --client-id ldp:client:default and
--trust-domain default (the SDK's own defaults), --timeout 10 (per HTTP request and per step).

Steps, each through the SDK's public API, stopping at the first failure:
  1. discover           LdpClient.discover(URL): GET URL/ldp/identity, parsed as LdpIdentityCard, and
                        (unless --no-enforce-trust) the card's trust_domain.name must be trusted by
                        the client's own domain (same name, as the client's allow_cross_domain is
                        false). --discover wellknown uses LdpClient.discover_wellknown(URL), which
                        tries /.well-known/ldp-identity and silently falls back to /ldp/identity.
  2. establish_session  LdpClient.establish_session(URL): POST HELLO, POST SESSION_PROPOSE, then
                        GET /ldp/identity again (trust check again). The SDK fails only on a
                        SESSION_REJECT (or HTTP/parse errors); unless --lenient this script also
                        requires HELLO -> CAPABILITY_MANIFEST and SESSION_PROPOSE -> SESSION_ACCEPT
                        with a body.session_id.
  3. submit_task        LdpClient.submit_task(URL, skill, input_data, session): POST TASK_SUBMIT.
                        Succeeds only on a TASK_RESULT reply (TASK_FAILED raises in the SDK; another
                        reply type is a failure here), with provenance unless --lenient, and with
                        an equal output if --expect-output is given.
  4. close_session      The SDK has no close call: a SESSION_CLOSE envelope built with
                        LdpEnvelope.create / LdpMessageBody.session_close(reason="client done") and
                        sent with LdpClient.send_message. Succeeds only on a SESSION_CLOSE reply.
  (5. response_signatures, only with --require-signed-responses: every /ldp/messages reply must
      carry a signature that the SDK's verify_envelope accepts with --secret.)

stdout: exactly one JSON object on one line:
  {"ok": bool,
   "failed_step": null | "args" | "bootstrap" | "discover" | "establish_session" | "submit_task" |
                  "close_session" | "response_signatures" | "internal",
   "error": null | {"step", "type" (exception class), "message", ["http_status", "http_body"]},
   "sdk": "ldp-protocol==0.2.0 (PyPI)", "url", "signing": bool,
   "steps": {
     "discover": {"ok", "method", "identity_card" (the card as the SDK parsed it)},
     "establish_session": {"ok", "session_id" (what the SDK adopted), "negotiated_mode",
        "remote_delegate_id", "remote_trust_domain", "hello_reply_type", "proposed_session_id",
        "propose_reply_type", "accept_envelope_session_id", "accept_body_session_id",
        "accept_negotiated_mode"},
     "submit_task": {"ok", "reply_type", "skill", "input", "task_id", "output",
        "provenance" (as the SDK parsed it: missing fields get defaults, a missing timestamp
        becomes "now"), "provenance_wire" (exactly as received)},
     "close_session": {"ok", "reply_type", "reply_reason"}},
   "response_signatures": [{"path", "type", "signature_present", "signature_algorithm", "valid"}],
   "http": [{"method", "url", "status", "request_json", "response_json" | "response_text"}]}
A step that was not reached is absent from "steps"; the failed one has "ok": false.
"http" is the exact traffic (requests as the SDK serialised them, replies as received); "valid" is
the SDK's verify_envelope on each reply (null without --secret or when the reply is unsigned). The
SDK client itself never checks reply signatures.

Exit status: 0 on full success, 1 otherwise (including bad arguments and SDK install failure).
Diagnostics (tracebacks) go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ldp_ref_bootstrap  # noqa: E402

ldp_ref_bootstrap.ensure_sdk(__file__, fail_code=1, json_error=True)

import httpx  # noqa: E402
from ldp_protocol import (  # noqa: E402
    LdpClient,
    LdpEnvelope,
    LdpMessageBody,
    TrustDomain,
    verify_envelope,
)

SDK = "ldp-protocol==0.2.0 (PyPI)"


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # exit 1 with a JSON line, as documented
        sys.stderr.write(f"ref_client: {message}\n")
        emit({"ok": False, "failed_step": "args", "error": {"step": "args", "type": "usage",
                                                              "message": message}})
        sys.exit(1)


def parse_args() -> argparse.Namespace:
    p = Parser(description="Drive the ldp-protocol 0.2.0 (PyPI) LdpClient against URL")
    p.add_argument("url")
    p.add_argument("--secret", default=None, help="hmac-sha256 secret: the SDK signs every message")
    p.add_argument("--skill", default="echo")
    p.add_argument("--input", default='{"text": "hello"}', help="task input as JSON")
    p.add_argument("--expect-output", default=None, help="JSON the task output must equal")
    p.add_argument("--client-id", default="ldp:client:default",
                   help="the client's delegate id (SDK default: ldp:client:default)")
    p.add_argument("--trust-domain", default="default",
                   help="the client's trust domain name (SDK default: default)")
    p.add_argument("--no-enforce-trust", action="store_true",
                   help="enforce_trust_domains=False (accept a server in any trust domain)")
    p.add_argument("--discover", choices=["identity", "wellknown"], default="identity")
    p.add_argument("--require-signed-responses", action="store_true",
                   help="fail unless every /ldp/messages reply verifies (needs --secret)")
    p.add_argument("--lenient", action="store_true",
                   help="judge success as the SDK does (ignore HELLO/SESSION_PROPOSE reply types "
                        "and a missing TASK_RESULT provenance)")
    p.add_argument("--timeout", type=float, default=10.0, help="per-request and per-step timeout")
    a = p.parse_args()
    for name in ("input", "expect_output"):
        raw = getattr(a, name)
        if raw is not None:
            try:
                setattr(a, name, json.loads(raw))
            except ValueError as exc:
                p.error(f"--{name.replace('_', '-')} is not JSON: {exc}")
    if a.require_signed_responses and not a.secret:
        p.error("--require-signed-responses needs --secret")
    if a.timeout <= 0:
        p.error("--timeout must be positive")
    return a


def describe_error(step: str, exc: BaseException) -> dict[str, Any]:
    err: dict[str, Any] = {"step": step, "type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, asyncio.TimeoutError):
        err["message"] = "step timed out"
    if isinstance(exc, httpx.HTTPStatusError):
        err["http_status"] = exc.response.status_code
        try:
            err["http_body"] = exc.response.text
        except Exception:  # body not read
            err["http_body"] = None
    return err


async def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ok": False,
        "failed_step": None,
        "error": None,
        "sdk": SDK,
        "url": args.url,
        "signing": bool(args.secret),
        "steps": {},
        "response_signatures": [],
        "http": [],
    }
    http_log: list[dict[str, Any]] = result["http"]
    sigs: list[dict[str, Any]] = result["response_signatures"]

    client = LdpClient(
        delegate_id=args.client_id,
        timeout=args.timeout,
        trust_domain=TrustDomain(name=args.trust_domain),
        enforce_trust_domains=not args.no_enforce_trust,
        signing_secret=args.secret,
    )

    # Observe (never alter) the SDK's HTTP traffic with httpx event hooks on the client's
    # httpx.AsyncClient (LdpClient keeps it in `_http`; the SDK exposes no public hook).
    async def on_response(response: httpx.Response) -> None:
        await response.aread()
        req = response.request
        entry: dict[str, Any] = {
            "method": req.method,
            "url": str(req.url),
            "status": response.status_code,
            "request_json": None,
        }
        if req.content:
            try:
                entry["request_json"] = json.loads(req.content)
            except ValueError:
                entry["request_text"] = req.content.decode("utf-8", "replace")
        try:
            entry["response_json"] = json.loads(response.content)
        except ValueError:
            entry["response_text"] = response.content.decode("utf-8", "replace")
        http_log.append(entry)
        if req.method == "POST" and req.url.path.endswith("/ldp/messages"):
            body = entry.get("response_json")
            rec: dict[str, Any] = {
                "path": req.url.path,
                "type": None,
                "signature_present": False,
                "signature_algorithm": None,
                "valid": None,
            }
            if isinstance(body, dict):
                rec["type"] = (body.get("body") or {}).get("type") if isinstance(
                    body.get("body"), dict) else None
                rec["signature_present"] = bool(body.get("signature"))
                rec["signature_algorithm"] = body.get("signature_algorithm")
                if args.secret and body.get("signature"):
                    try:
                        env = LdpEnvelope.model_validate(body)
                        rec["valid"] = verify_envelope(env, args.secret, body["signature"])
                    except Exception as exc:  # reply not parseable: reported by the step itself
                        rec["valid"] = False
                        rec["verify_error"] = f"{type(exc).__name__}: {exc}"
            sigs.append(rec)

    http = getattr(client, "_http", None)
    if isinstance(http, httpx.AsyncClient):
        http.event_hooks = {"request": [], "response": [on_response]}
    else:
        sys.stderr.write("ref_client: warning: cannot observe HTTP traffic (no LdpClient._http)\n")

    step = "discover"
    try:
        async with client:
            # 1. discover
            if args.discover == "wellknown":
                card = await asyncio.wait_for(client.discover_wellknown(args.url), args.timeout)
            else:
                card = await asyncio.wait_for(client.discover(args.url), args.timeout)
            result["steps"]["discover"] = {
                "ok": True,
                "method": f"LdpClient.{'discover_wellknown' if args.discover == 'wellknown' else 'discover'}",
                "identity_card": card.model_dump(mode="json"),
            }

            # 2. establish_session
            step = "establish_session"
            first = len(http_log)
            session = await asyncio.wait_for(client.establish_session(args.url), 3 * args.timeout)
            posts = [e for e in http_log[first:] if e["method"] == "POST"]
            est: dict[str, Any] = {
                "ok": True,
                "session_id": session.session_id,
                "negotiated_mode": session.payload.mode.value,
                "remote_delegate_id": session.remote_delegate_id,
                "remote_trust_domain": session.trust_domain.model_dump(mode="json"),
                "hello_reply_type": None,
                "proposed_session_id": None,
                "propose_reply_type": None,
                "accept_envelope_session_id": None,
                "accept_body_session_id": None,
                "accept_negotiated_mode": None,
            }
            for e in posts:
                rq = e.get("request_json") or {}
                rs = e.get("response_json") if isinstance(e.get("response_json"), dict) else {}
                rb = rs.get("body") if isinstance(rs.get("body"), dict) else {}
                kind = (rq.get("body") or {}).get("type")
                if kind == "HELLO":
                    est["hello_reply_type"] = rb.get("type")
                elif kind == "SESSION_PROPOSE":
                    est["proposed_session_id"] = rq.get("session_id")
                    est["propose_reply_type"] = rb.get("type")
                    est["accept_envelope_session_id"] = rs.get("session_id")
                    est["accept_body_session_id"] = rb.get("session_id")
                    est["accept_negotiated_mode"] = rb.get("negotiated_mode")
            result["steps"]["establish_session"] = est
            # The SDK ignores the HELLO reply and takes any reply to SESSION_PROPOSE other than
            # SESSION_REJECT as an acceptance (falling back to its own session id and to text).
            # Unless --lenient, require the replies the RFC prescribes.
            if not args.lenient:
                problems = []
                if est["hello_reply_type"] != "CAPABILITY_MANIFEST":
                    problems.append(f"HELLO answered with {est['hello_reply_type']}")
                if est["propose_reply_type"] != "SESSION_ACCEPT":
                    problems.append(f"SESSION_PROPOSE answered with {est['propose_reply_type']}")
                elif not est["accept_body_session_id"]:
                    problems.append("SESSION_ACCEPT without body.session_id")
                if problems:
                    est["ok"] = False
                    raise RuntimeError("; ".join(problems) + " (the SDK itself would proceed)")

            # 3. submit_task
            step = "submit_task"
            res = await asyncio.wait_for(
                client.submit_task(args.url, skill=args.skill, input_data=args.input,
                                   session=session),
                args.timeout,
            )
            reply_type = res.get("status", "TASK_RESULT")
            # The SDK's parse fills a missing provenance.timestamp with "now" and other missing
            # fields with defaults: keep the provenance exactly as it was on the wire too.
            raw_prov = None
            for e in reversed(http_log):
                rq = e.get("request_json") or {}
                if (rq.get("body") or {}).get("type") == "TASK_SUBMIT":
                    rs = e.get("response_json")
                    if isinstance(rs, dict) and isinstance(rs.get("body"), dict):
                        raw_prov = rs["body"].get("provenance")
                    break
            sub = {
                "ok": reply_type == "TASK_RESULT",
                "reply_type": reply_type,
                "skill": args.skill,
                "input": args.input,
                "task_id": res.get("task_id"),
                "output": res.get("output"),
                "provenance": res.get("provenance"),
                "provenance_wire": raw_prov,
            }
            if reply_type != "TASK_RESULT":
                sub["message"] = res.get("message")
            result["steps"]["submit_task"] = sub
            if reply_type != "TASK_RESULT":
                raise RuntimeError(f"TASK_SUBMIT answered with {reply_type}, not TASK_RESULT")
            if not args.lenient and res.get("provenance") is None:
                sub["ok"] = False
                raise RuntimeError("TASK_RESULT without provenance (the SDK itself would accept it)")
            if args.expect_output is not None and res.get("output") != args.expect_output:
                sub["ok"] = False
                raise RuntimeError(
                    f"output {json.dumps(res.get('output'))} != expected "
                    f"{json.dumps(args.expect_output)}"
                )

            # 4. close_session
            step = "close_session"
            close = LdpEnvelope.create(
                session_id=session.session_id,
                from_id=client.delegate_id,
                to_id=session.remote_delegate_id,
                body=LdpMessageBody.session_close(reason="client done"),
                payload_mode=session.payload.mode,
            )
            reply = await asyncio.wait_for(client.send_message(args.url, close), args.timeout)
            result["steps"]["close_session"] = {
                "ok": reply.body.type == "SESSION_CLOSE",
                "reply_type": reply.body.type,
                "reply_reason": reply.body.reason,
            }
            if reply.body.type != "SESSION_CLOSE":
                raise RuntimeError(f"SESSION_CLOSE answered with {reply.body.type}")

            if args.require_signed_responses:
                step = "response_signatures"
                bad = [s for s in sigs if s["valid"] is not True]
                if bad or not sigs:
                    raise RuntimeError(f"unsigned or invalid replies: {json.dumps(bad)}")
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, none escapes
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        result["failed_step"] = step
        result["error"] = describe_error(step, exc)
        result["steps"].setdefault(step, {})["ok"] = False
        sys.stderr.write(f"ref_client: step {step} failed:\n{traceback.format_exc()}")
        return result

    result["ok"] = True
    return result


def main() -> int:
    args = parse_args()
    try:
        result = asyncio.run(run(args))
    except Exception as exc:  # a bug here must still produce the documented output
        result = {"ok": False, "failed_step": "internal",
                  "error": {"step": "internal", "type": type(exc).__name__, "message": str(exc)}}
        traceback.print_exc()
    emit(result)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
