"""Signing (every scheme) and bearer tokens: our Python delegate and our Python client agree, and refuse the rest."""

from __future__ import annotations

import secrets

import pytest

import ldp_rs
from conftest import run


def make_delegate(**settings: object) -> ldp_rs.Delegate:
    delegate = ldp_rs.Delegate("ldp:delegate:signed", **settings)  # type: ignore[arg-type]

    @delegate.skill()
    def echo(text: str) -> dict[str, str]:
        return {"echo": text}

    return delegate


@pytest.mark.parametrize("algorithm", ["hmac-sha256", "hmac-sha256-jcs", "ed25519-jcs"])
def test_a_signed_delegate_answers_a_client_with_its_key_and_refuses_others(algorithm: str) -> None:
    key = ldp_rs.SigningKey(algorithm, secrets.token_hex(32))
    other = ldp_rs.SigningKey(algorithm, secrets.token_hex(32))
    assert key.algorithm == algorithm
    assert (key.public_hex is not None) == (algorithm == "ed25519-jcs")

    async def main() -> None:
        async with await make_delegate(signing_key=key).start() as server:
            async with await ldp_rs.connect(server.url, signing_key=key) as conn:
                answer = await conn.call("echo", "signed")
                assert answer.output == {"echo": "signed"}
            # Unsigned, and signed with another key: refused, typed.
            for options in ({}, {"signing_key": other}):
                with pytest.raises(ldp_rs.LdpException) as refused:
                    conn = await ldp_rs.connect(server.url, **options)
                    await conn.call("echo", "forged")
                assert isinstance(refused.value, (ldp_rs.TaskFailed, ldp_rs.ProtocolError))

    run(main())


def test_bearer_tokens_are_required_when_set() -> None:
    async def main() -> None:
        async with await make_delegate(tokens={"s3cret": "default"}).start() as server:
            async with await ldp_rs.connect(server.url, bearer_token="s3cret") as conn:
                assert (await conn.call("echo", "in")).output == {"echo": "in"}
            for options in ({}, {"bearer_token": "wrong"}):
                with pytest.raises(ldp_rs.LdpException) as refused:
                    conn = await ldp_rs.connect(server.url, retries=0, **options)
                    await conn.call("echo", "out")
                assert not isinstance(refused.value, ldp_rs.UsageError)

    run(main())
