#!/usr/bin/env python3
"""Golden wire vectors from the Python reference SDK (PyPI ldp-protocol 0.2.0).

REGENERATE:  python3 scripts/gen_golden_vectors.py
             (any python3 >= 3.10 works: the script runs scripts/ref-sdk.sh to get the reference
             venv under target/ref-venv and re-executes itself under that venv's python)
CHECK ONLY:  python3 scripts/gen_golden_vectors.py --check   (exit 1 if the committed file differs)

Writes ldp-types/tests/golden/python_ref_vectors.json:
  {"sdk": "ldp-protocol==0.2.0 (PyPI)", "secret": <fixed test secret>, "generator": ..., "notes": [...],
   "signing_input_format": ...,
   "identity_card": <the card exactly as LdpDelegate.run() serves GET /ldp/identity>,
   "identity_card_wire": <the same, as the exact response body string>,
   "capabilities_response": <GET /ldp/capabilities body>, "capabilities_response_wire": <string>,
   "vectors": [{"name", "type", "source", "description", "envelope", "wire", "signing_input",
                ["sdk_input"]}, ...]}

Each vector's `envelope` is what the SDK puts on the wire (`LdpEnvelope.model_dump(by_alias=True)`,
which both LdpClient.send_message (httpx `json=`) and the delegate's JSONResponse serialise), and
`wire` is the exact body string (compact separators, non-ASCII kept, as httpx and Starlette write
it). Every vector is signed with `ldp_protocol.signing.apply_signature(envelope, secret)`.
`signing_input` is the exact string the SDK feeds to HMAC-SHA256 (as UTF-8); the generator checks
that HMAC-SHA256(secret, signing_input) equals the SDK's signature and that the SDK's
verify_envelope accepts the wire JSON after a re-parse, so the file cannot drift from the SDK.

source = "built": the envelope is built with the SDK's constructors (LdpEnvelope, LdpMessageBody.*)
with fixed ids and timestamps. source = "delegate_reply": the body is the SDK delegate's own reply
(LdpDelegate.handle_message) to the request in `sdk_input`; the reply's random parts (message_id,
timestamp, SESSION_ACCEPT's fresh session id, provenance timestamp) are then pinned to fixed values
and the envelope re-signed with apply_signature. source = "parsed": `sdk_input` is a JSON envelope
(e.g. as the Rust crate writes it) and `envelope` is what the SDK makes of it (parse + re-dump),
showing what it drops.

Nothing here reimplements the SDK: all envelopes, bodies and signatures come from the SDK itself;
only `signing_input` is derived here, and it is checked against the SDK's signature.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ldp_ref_bootstrap  # noqa: E402

ldp_ref_bootstrap.ensure_sdk(__file__)

from ldp_protocol import (  # noqa: E402
    ClaimType,
    LdpCapability,
    LdpDelegate,
    LdpEnvelope,
    LdpError,
    LdpMessageBody,
    PayloadMode,
    Provenance,
    QualityMetrics,
    TrustDomain,
    apply_signature,
    verify_envelope,
)
from starlette.responses import JSONResponse  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "ldp-types", "tests", "golden", "python_ref_vectors.json")

SECRET = "ldp-golden-test-secret"
TS = "2026-03-09T12:00:00+00:00"
TS_PY_NOW = "2026-03-09T12:00:00.123456+00:00"  # the shape datetime.now(timezone.utc).isoformat() has
SESSION = "550e8400-e29b-41d4-a716-446655440000"
ALICE = "ldp:delegate:alice"
BOB = "ldp:delegate:bob"


def mid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def wire(obj: Any) -> str:
    """The body string httpx (json=) and Starlette's JSONResponse both produce."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def signing_input(env: LdpEnvelope) -> str:
    """What ldp_protocol.signing.sign_envelope feeds to HMAC (derived from the SDK's behaviour)."""
    b = env.body
    key = ""
    if b.type == "HELLO":
        key = b.delegate_id or ""
    elif b.type == "SESSION_ACCEPT":
        key = b.session_id or ""
    elif b.type == "SESSION_REJECT":
        key = b.reason or ""
    elif b.type == "TASK_SUBMIT":
        key = f"{b.task_id or ''}|{b.skill or ''}"
    elif b.type in ("TASK_UPDATE", "TASK_RESULT", "TASK_FAILED", "TASK_CANCEL"):
        key = b.task_id or ""
    return "|".join([env.from_, env.to, env.session_id, env.timestamp, env.message_id, key, b.type])


VECTORS: list[dict[str, Any]] = []


def add(name: str, env: LdpEnvelope, description: str, source: str = "built",
        sdk_input: Any = None, sign: bool = True) -> None:
    if sign:
        apply_signature(env, SECRET)
    dumped = env.model_dump(by_alias=True)
    text = wire(dumped)
    envelope = json.loads(text)
    si = signing_input(env)
    # Self-checks against the SDK: our signing input reproduces its signature, and its verifier
    # accepts the wire form after a re-parse.
    expected = hmac.new(SECRET.encode(), si.encode("utf-8"), hashlib.sha256).hexdigest()
    if sign:
        assert env.signature == expected, f"{name}: signing_input does not reproduce the SDK signature"
        reparsed = LdpEnvelope.model_validate_json(text)
        assert verify_envelope(reparsed, SECRET, envelope["signature"]), f"{name}: SDK rejects its own"
        assert envelope["signature_algorithm"] == "hmac-sha256"
    else:
        assert envelope["signature"] is None and envelope["signature_algorithm"] is None
    v: dict[str, Any] = {
        "name": name,
        "type": env.body.type,
        "source": source,
        "description": description,
        "envelope": envelope,
        "wire": text,
        "signing_input": si,
    }
    if not sign:
        v["signature_if_signed"] = expected
    if sdk_input is not None:
        v["sdk_input"] = sdk_input
    VECTORS.append(v)


def env(n: int, body: LdpMessageBody, *, session: str = SESSION, frm: str = ALICE, to: str = BOB,
        mode: PayloadMode = PayloadMode.TEXT, ts: str = TS) -> LdpEnvelope:
    return LdpEnvelope(message_id=mid(n), session_id=session, **{"from": frm}, to=to, body=body,
                       payload_mode=mode, timestamp=ts)


RICH_QUALITY = QualityMetrics(
    quality_score=0.87,
    latency_p50_ms=1200,
    latency_p99_ms=4800,
    cost_per_call_usd=0.0025,
    max_tokens=8192,
    supports_streaming=True,
    claim_type=ClaimType.EXTERNALLY_BENCHMARKED,
)


class GoldenEcho(LdpDelegate):
    async def handle_task(self, skill, input_data, task_id):
        if skill == "fail":
            raise ValueError("handler raised on purpose")
        return {"echo": input_data}, 0.99


def make_delegate(secret: str | None) -> GoldenEcho:
    return GoldenEcho(
        delegate_id=BOB,
        name="Bob (golden vectors)",
        description="Echo delegate for golden vectors",
        model_family="echo",
        model_version="1.0",
        capabilities=[
            LdpCapability(name="echo", description="Echoes its input",
                          quality=QualityMetrics(quality_score=0.99)),
            LdpCapability(
                name="reasoning",
                description="Multi-step analysis",
                input_schema={"type": "object", "required": ["task_type", "instruction"]},
                output_schema={"type": "object"},
                quality=RICH_QUALITY,
                domains=["finance", "law"],
            ),
            LdpCapability(
                name="summarize",
                quality=QualityMetrics(quality_score=0.7, claim_type=ClaimType.RUNTIME_OBSERVED),
            ),
        ],
        trust_domain=TrustDomain(name="research.internal", allow_cross_domain=True,
                                 trusted_peers=["partner.example"]),
        context_window=32768,
        reasoning_profile="fast-practical",
        cost_profile="low",
        endpoint="",
        signing_secret=secret,
    )


def pin_reply(reply: LdpEnvelope, n: int) -> list[str]:
    """Replace the SDK's random reply parts with fixed values; return what was pinned."""
    pinned = ["message_id", "timestamp"]
    reply.message_id = mid(n)
    reply.timestamp = TS
    if reply.body.type == "SESSION_ACCEPT":
        reply.session_id = SESSION
        reply.body.session_id = SESSION
        pinned += ["session_id", "body.session_id"]
    if reply.body.provenance is not None:
        reply.body.provenance.timestamp = TS_PY_NOW
        pinned.append("body.provenance.timestamp")
    reply.signature = None
    reply.signature_algorithm = None
    return pinned


def delegate_reply(name: str, request: LdpEnvelope, n: int, description: str,
                   secret_on_delegate: bool = True, resign: bool = True) -> None:
    delegate = make_delegate(SECRET if secret_on_delegate else None)
    request_json = json.loads(wire(request.model_dump(by_alias=True)))
    reply = asyncio.run(delegate.handle_message(request))
    was_signed = reply.signature is not None
    pinned = pin_reply(reply, n)
    add(name, reply,
        f"{description} (the SDK's reply {'was' if was_signed else 'was NOT'} signed; "
        f"pinned: {', '.join(pinned)}{'; re-signed' if resign else ''})",
        source="delegate_reply", sdk_input=request_json, sign=resign)


def build() -> dict[str, Any]:
    # ---- one per message type, built with the SDK's constructors -------------------------------
    add("hello", env(1, LdpMessageBody.hello(ALICE, [PayloadMode.SEMANTIC_FRAME, PayloadMode.TEXT]),
                     session=""),
        "HELLO as LdpClient.establish_session builds it (empty session_id), but to a delegate id")
    add("hello_client_to_url",
        env(2, LdpMessageBody.hello("ldp:client:default", [PayloadMode.SEMANTIC_FRAME,
                                                           PayloadMode.TEXT]),
            session="", frm="ldp:client:default", to="http://127.0.0.1:8090"),
        "HELLO exactly as LdpClient sends it: from/delegate_id = its delegate_id (default "
        "ldp:client:default), to = the server URL, session_id empty")
    add("hello_unsigned",
        env(3, LdpMessageBody.hello(ALICE, [PayloadMode.TEXT]), session=""),
        "Unsigned HELLO: signature and signature_algorithm are present as null; "
        "signature_if_signed is what apply_signature would have set", sign=False)
    add("capability_manifest",
        env(4, LdpMessageBody.capability_manifest(
            [{"name": c.name, "description": c.description,
              "quality": c.quality.model_dump() if c.quality else None}
             for c in make_delegate(None).identity.capabilities]), frm=BOB, to=ALICE),
        "CAPABILITY_MANIFEST with capabilities as a list of {name, description, quality}, the "
        "shape the SDK delegate answers HELLO with (quality includes claim_type)")
    add("session_propose",
        env(5, LdpMessageBody.session_propose(
            {"preferred_payload_modes": ["semantic_frame", "text"], "ttl_secs": 3600,
             "trust_domain": "research.internal"})),
        "SESSION_PROPOSE with the config LdpClient sends: preferred_payload_modes, ttl_secs and "
        "the initiator's own trust_domain (no required_trust_domain)")
    add("session_accept",
        env(6, LdpMessageBody.session_accept(SESSION, PayloadMode.SEMANTIC_FRAME), frm=BOB,
            to=ALICE),
        "SESSION_ACCEPT (the signed key is body.session_id)")
    add("session_reject",
        env(7, LdpMessageBody.session_reject("Trust domain 'x' not trusted by 'y'"), frm=BOB,
            to=ALICE),
        "SESSION_REJECT from a reason string: the SDK adds error {code SESSION_REJECTED, "
        "category policy, severity fatal, retryable false}; the signed key is reason")
    add("session_reject_error",
        env(8, LdpMessageBody.session_reject(LdpError.identity("UNKNOWN_PEER", "who are you?")),
            frm=BOB, to=ALICE),
        "SESSION_REJECT from an LdpError: reason = error.message")
    add("task_submit",
        env(9, LdpMessageBody.task_submit("task-001", "reasoning", {
            "task_type": "analysis", "instruction": "Analyze the tradeoffs",
            "expected_output_format": "structured_analysis"}), mode=PayloadMode.SEMANTIC_FRAME),
        "TASK_SUBMIT in semantic_frame mode (signed key: task_id|skill)")
    add("task_update",
        env(10, LdpMessageBody.task_update("task-001", progress=0.5, message="halfway"), frm=BOB,
            to=ALICE),
        "TASK_UPDATE with progress and message")
    add("task_result",
        env(11, LdpMessageBody.task_result("task-001", {"analysis": "ok"}, Provenance.create(
            BOB, "1.0", confidence=0.84, payload_mode_used=PayloadMode.TEXT, session_id=SESSION,
            timestamp=TS)), frm=BOB, to=ALICE),
        "TASK_RESULT; provenance sits in the body, envelope provenance is null")
    add("task_failed",
        env(12, LdpMessageBody.task_failed("task-001", LdpError.capability(
            "UNKNOWN_SKILL", "no such skill")), frm=BOB, to=ALICE),
        "TASK_FAILED with a structured LdpError")
    add("task_failed_string",
        env(13, LdpMessageBody.task_failed("task-001", "plain failure text"), frm=BOB, to=ALICE),
        "TASK_FAILED built from a string: the SDK turns it into LdpError runtime TASK_FAILED "
        "(severity error, retryable true)")
    add("task_cancel", env(14, LdpMessageBody.task_cancel("task-001")),
        "TASK_CANCEL (signed key: task_id)")
    add("attestation",
        env(15, LdpMessageBody(type="ATTESTATION", claim={"statement": "output reviewed",
                                                          "task_id": "task-001"},
                               evidence={"reviewer": "ldp:delegate:carol", "score": 0.9})),
        "ATTESTATION (no SDK helper: LdpMessageBody(type=..., claim=..., evidence=...)); "
        "nothing from the body is signed")
    add("session_close", env(16, LdpMessageBody.session_close("done")),
        "SESSION_CLOSE with a reason (not signed)")
    add("session_close_no_reason", env(17, LdpMessageBody.session_close()),
        "SESSION_CLOSE without reason: reason is null")

    # ---- tricky content -------------------------------------------------------------------------
    add("unicode",
        env(20, LdpMessageBody.task_submit("tâche-ü-🚀", "résumé", {
            "text": "héllo wörld — 你好 🌍", "quote": "\"quoted\" \\ back\\slash", "nl": "a\nb\tc",
            "ctrl": "\u0001\u001f", "nbsp": "\u00a0", "bmp_max": "\uffff"}),
            frm="ldp:delegate:zoë", to="ldp:delegate:大"),
        "Non-ASCII everywhere: ids and skill are signed as UTF-8; the wire keeps non-ASCII "
        "characters unescaped (ensure_ascii=False) but escapes control characters")
    add("pipe_in_ids",
        env(21, LdpMessageBody.task_submit("task|with|pipes", "skill|x", {"a": "|"}),
            frm="ldp:delegate:a|b", to="ldp:delegate:c|d", session="sess|1"),
        "'|' inside ids is not escaped in the signing input")
    add("pipe_collision_a",
        env(22, LdpMessageBody.task_cancel("t"), frm="a|b", to="c", session="s"),
        "With pipe_collision_b: different from/to, identical signing input, identical signature")
    add("pipe_collision_b",
        env(22, LdpMessageBody.task_cancel("t"), frm="a", to="b|c", session="s"),
        "With pipe_collision_a: different from/to, identical signing input, identical signature")
    add("body_not_covered_a",
        env(23, LdpMessageBody.task_submit("task-9", "echo", {"amount": 1})),
        "With body_not_covered_b: different input, same signature (body payload is not signed)")
    add("body_not_covered_b",
        env(23, LdpMessageBody.task_submit("task-9", "echo", {"amount": 1000000}),
            mode=PayloadMode.SEMANTIC_FRAME),
        "With body_not_covered_a: different input and payload_mode, same signature")
    add("task_result_full_provenance",
        env(24, LdpMessageBody.task_result("task-001", {"answer": 42, "items": [1.5, None, True]},
                                           Provenance(produced_by=BOB, model_version="qwen3-8b-2026.01",
                                                      payload_mode_used=PayloadMode.SEMANTIC_FRAME,
                                                      confidence=0.84, verified=True,
                                                      session_id=SESSION, timestamp=TS_PY_NOW)),
            frm=BOB, to=ALICE, mode=PayloadMode.SEMANTIC_FRAME),
        "TASK_RESULT with every provenance field the Python SDK has (verified true)")
    add("task_failed_partial_output",
        env(25, LdpMessageBody.task_failed("task-001", LdpError(
            code="TIMEOUT", category="transport", message="upstream timed out", severity="warning",
            retryable=True, partial_output={"done": 3, "of": 10})), frm=BOB, to=ALICE),
        "TASK_FAILED whose error carries partial_output")
    add("task_update_no_progress",
        env(26, LdpMessageBody.task_update("task-001", message="cancelled"), frm=BOB, to=ALICE),
        "TASK_UPDATE with progress null (the shape of the delegate's TASK_CANCEL reply)")
    add("empty_ids",
        env(27, LdpMessageBody.task_submit("", "", None), frm="", to="", session=""),
        "Empty strings everywhere: the signing input is just separators and the type; input null")

    # ---- what the SDK keeps of envelopes written by others ---------------------------------------
    contract_submit = {
        "message_id": mid(30), "session_id": SESSION, "from": ALICE, "to": BOB,
        "body": {"type": "TASK_SUBMIT", "task_id": "task-c", "skill": "reasoning",
                 "input": {"q": "x"},
                 "contract": {"contract_id": "c-1", "objective": "answer",
                              "success_criteria": ["cites sources"],
                              "policy": {"failure_policy": "fail_closed", "safety_constraints": [],
                                         "budget": {"max_tokens": 1000, "max_cost_usd": 0.5}},
                              "deadline": "2026-03-09T13:00:00Z", "created_at": TS}},
        "payload_mode": "text", "timestamp": TS, "provenance": None,
        "nonce": "00112233445566778899aabbccddeeff",
    }
    e = LdpEnvelope.model_validate(contract_submit)
    add("task_submit_with_contract", e,
        "TASK_SUBMIT carrying a DelegationContract and an envelope nonce (Rust crate shape), parsed "
        "by the SDK: both `contract` and `nonce` are silently dropped, so they are neither on the "
        "re-serialised wire nor in the signing input", source="parsed", sdk_input=contract_submit)
    rich_result = {
        "message_id": mid(31), "session_id": SESSION, "from": BOB, "to": ALICE,
        "body": {"type": "TASK_RESULT", "task_id": "task-c", "output": {"a": 1},
                 "provenance": {"produced_by": BOB, "model_version": "1.0",
                                "payload_mode_used": "text", "confidence": 0.9, "verified": True,
                                "session_id": SESSION, "timestamp": TS, "tokens_used": 120,
                                "cost_usd": 0.001, "contract_id": "c-1", "contract_satisfied": True,
                                "contract_violations": [], "verification_status": "peer_verified",
                                "evidence": [{"source": "ldp:delegate:carol", "kind": "review"}],
                                "lineage": [{"delegate_id": BOB, "model_version": "1.0",
                                             "step": "reasoning",
                                             "verification_status": "self_verified"}]}},
        "payload_mode": "text", "timestamp": TS, "provenance": None,
    }
    add("task_result_rust_provenance_parsed", LdpEnvelope.model_validate(rich_result),
        "TASK_RESULT whose provenance has the Rust crate's extra fields, parsed by the SDK: "
        "tokens_used, cost_usd, contract_*, verification_status, evidence and lineage are dropped",
        source="parsed", sdk_input=rich_result)

    # ---- the SDK delegate's own replies (LdpDelegate.handle_message, delegate signing on) --------
    c = "ldp:client:default"
    url = "http://127.0.0.1:8090"
    hello = env(40, LdpMessageBody.hello(c, [PayloadMode.SEMANTIC_FRAME, PayloadMode.TEXT]),
                session="", frm=c, to=url)
    apply_signature(hello, SECRET)
    delegate_reply("reply_to_hello", hello, 41,
                   "CAPABILITY_MANIFEST the delegate answers HELLO with: envelope session_id echoes "
                   "the request's (empty), to = request.from")
    propose = env(42, LdpMessageBody.session_propose(
        {"preferred_payload_modes": ["semantic_frame", "text"], "ttl_secs": 3600,
         "trust_domain": "research.internal"}), session="4e10a17d-4759-45a6-97ef-137044c2ccd3",
        frm=c, to=url)
    apply_signature(propose, SECRET)
    delegate_reply("reply_to_session_propose", propose, 43,
                   "SESSION_ACCEPT: the delegate ignores the proposed session id and picks a fresh "
                   "uuid4 for both the envelope and body session_id (pinned here)")
    propose_bad = env(44, LdpMessageBody.session_propose(
        {"preferred_payload_modes": ["text"], "ttl_secs": 60, "trust_domain": "evil.example"}),
        session="5e10a17d-4759-45a6-97ef-137044c2ccd3", frm=c, to=url)
    apply_signature(propose_bad, SECRET)
    delegate_reply("reply_to_session_propose_untrusted", propose_bad, 45,
                   "SESSION_REJECT for an untrusted initiator trust_domain")
    submit = env(46, LdpMessageBody.task_submit("task-001", "echo", {"text": "hi"}), frm=c, to=BOB,
                 mode=PayloadMode.SEMANTIC_FRAME)
    apply_signature(submit, SECRET)
    delegate_reply("reply_to_task_submit", submit, 47,
                   "TASK_RESULT: payload_mode and provenance.payload_mode_used copy the request's "
                   "payload_mode, provenance.session_id the request's session_id")
    submit_fail = env(48, LdpMessageBody.task_submit("task-002", "fail", {}), frm=c, to=BOB)
    apply_signature(submit_fail, SECRET)
    delegate_reply("reply_to_task_submit_handler_error", submit_fail, 49,
                   "TASK_FAILED when handle_task raises: runtime TASK_EXECUTION_ERROR, retryable")
    cancel = env(50, LdpMessageBody.task_cancel("task-001"), frm=c, to=BOB)
    apply_signature(cancel, SECRET)
    delegate_reply("reply_to_task_cancel", cancel, 51,
                   "TASK_CANCEL is answered with TASK_UPDATE message 'cancelled', progress null")
    close = env(52, LdpMessageBody.session_close("client done"), frm=c, to=BOB)
    apply_signature(close, SECRET)
    delegate_reply("reply_to_session_close", close, 53,
                   "SESSION_CLOSE is acknowledged with SESSION_CLOSE reason 'acknowledged'")
    att = env(54, LdpMessageBody(type="ATTESTATION", claim={"c": 1}, evidence=None), frm=c, to=BOB)
    apply_signature(att, SECRET)
    delegate_reply("reply_to_attestation", att, 55,
                   "Types the delegate does not handle (ATTESTATION, TASK_UPDATE, ...) get "
                   "TASK_FAILED runtime TASK_FAILED 'Unknown message type: <TYPE>'")
    forged = env(56, LdpMessageBody.task_submit("task-003", "echo", {}), frm=c, to=BOB)
    apply_signature(forged, SECRET)
    forged.signature = "0" * 64
    delegate_reply("reply_to_bad_signature", forged, 57,
                   "A message with a wrong signature gets TASK_FAILED runtime TASK_FAILED "
                   "'Invalid message signature', and this reply is NOT signed by the delegate",
                   resign=False)

    # ---- identity card and capabilities, exactly as LdpDelegate.run() serves them ---------------
    d = make_delegate(None)
    d.identity.endpoint = "http://127.0.0.1:8090"  # run(host, port) sets this before serving
    id_body = JSONResponse(d.identity.model_dump()).body.decode("utf-8")
    caps_body = JSONResponse({"capabilities": [c.model_dump() for c in d.identity.capabilities]}
                             ).body.decode("utf-8")

    return {
        "sdk": "ldp-protocol==0.2.0 (PyPI)",
        "secret": SECRET,
        "generator": "scripts/gen_golden_vectors.py (regenerate: python3 scripts/gen_golden_vectors.py)",
        "signing_algorithm": "hmac-sha256: lowercase hex of HMAC-SHA256(key=UTF-8 secret, "
                             "msg=UTF-8 signing_input)",
        "signing_input_format": "from|to|session_id|timestamp|message_id|KEY|TYPE with KEY = "
                                "body.delegate_id (HELLO), body.session_id (SESSION_ACCEPT), "
                                "body.reason (SESSION_REJECT), body.task_id|body.skill "
                                "(TASK_SUBMIT), body.task_id (TASK_UPDATE, TASK_RESULT, "
                                "TASK_FAILED, TASK_CANCEL), empty otherwise; a missing/null key is "
                                "empty; no escaping; no nonce (the SDK has no nonce field)",
        "notes": [
            "`envelope` = json.loads(`wire`); `wire` is the exact HTTP body the SDK writes.",
            "Every body field of every type is present, unused ones as null.",
            "source=delegate_reply vectors had message_id, timestamp (and SESSION_ACCEPT's session "
            "id, provenance.timestamp) pinned after the SDK produced them, then were re-signed.",
        ],
        "identity_card": json.loads(id_body),
        "identity_card_wire": id_body,
        "capabilities_response": json.loads(caps_body),
        "capabilities_response_wire": caps_body,
        "vectors": VECTORS,
    }


def check_pairs(doc: dict[str, Any]) -> None:
    by = {v["name"]: v for v in doc["vectors"]}
    for a, b in (("pipe_collision_a", "pipe_collision_b"), ("body_not_covered_a", "body_not_covered_b")):
        assert by[a]["envelope"]["signature"] == by[b]["envelope"]["signature"], (a, b)
        assert by[a]["wire"] != by[b]["wire"], (a, b)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=OUT)
    p.add_argument("--check", action="store_true", help="compare with --out instead of writing")
    args = p.parse_args()
    doc = build()
    check_pairs(doc)
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                current = f.read()
        except OSError as exc:
            sys.stderr.write(f"gen_golden_vectors: cannot read {args.out}: {exc}\n")
            return 1
        if current != text:
            sys.stderr.write(f"gen_golden_vectors: {args.out} is out of date; regenerate it\n")
            return 1
        sys.stderr.write(f"gen_golden_vectors: {args.out} is up to date\n")
        return 0
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    sys.stderr.write(f"gen_golden_vectors: wrote {len(doc['vectors'])} vectors to {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
