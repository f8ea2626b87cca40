"""What a deployed delegate configures from Python: TLS, bearer tokens and a store, each checked from the outside
(a client that trusts the certificate or not, holds the token or not; the store's own database file)."""

from __future__ import annotations

import pathlib
import sqlite3
import subprocess

import pytest

import ldp_rs
from conftest import run


def make_delegate(**settings: object) -> ldp_rs.Delegate:
    delegate = ldp_rs.Delegate("ldp:delegate:deployed", model=("pytest", "1"), **settings)

    @delegate.skill()
    def echo(text: str) -> str:
        return text

    return delegate


def issued_certificate(dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A private CA and a certificate it issued for 127.0.0.1 and localhost, made by openssl: (ca, cert, key)."""
    ca, ca_key = dir / "ca.pem", dir / "ca-key.pem"
    cert, key, csr, ext = dir / "cert.pem", dir / "key.pem", dir / "cert.csr", dir / "leaf.ext"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    for command in (
        ["openssl", "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "1", "-subj", "/CN=test CA"],
        ["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost"],
        ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
         "-out", str(cert), "-days", "1", "-extfile", str(ext)],
    ):  # fmt: skip
        subprocess.run(command, check=True, capture_output=True, timeout=60)
    return ca, cert, key


def test_a_tls_delegate_answers_a_client_that_trusts_its_certificate_only(tmp_path: pathlib.Path) -> None:
    ca, cert, key = issued_certificate(tmp_path)

    async def main() -> None:
        async with await make_delegate(tls=(cert, key)).start() as server:
            assert server.url.startswith("https://")
            async with await ldp_rs.connect(server.url, tls_root_certificate=ca) as conn:
                assert (await conn.call("echo", "sealed")).output == "sealed"
            # The system's roots do not know the private CA.
            with pytest.raises(ldp_rs.TransportError):
                await ldp_rs.connect(server.url)
            # Plain HTTP to the TLS port is no LDP peer either.
            with pytest.raises(ldp_rs.LdpException):
                await ldp_rs.connect(server.url.replace("https://", "http://"))

    run(main())


def test_bearer_tokens_admit_their_holder_and_refuse_the_rest() -> None:
    async def main() -> None:
        async with await make_delegate(trust_domain="acme.example", tokens={"s3cret-token": "acme.example"}).start() as server:
            async with await ldp_rs.connect(server.url, bearer_token="s3cret-token") as conn:
                assert (await conn.call("echo", "in")).output == "in"
            for wrong in (None, "guess"):
                with pytest.raises(ldp_rs.LdpException) as refused:
                    conn = await ldp_rs.connect(server.url, bearer_token=wrong)
                    await conn.call("echo", "out")
                # Refused as unauthenticated, whichever layer answers first, and never as a crash.
                assert isinstance(refused.value, (ldp_rs.TaskFailed, ldp_rs.TransportError))
                assert "401" in str(refused.value) or "UNAUTHENTICATED" in str(refused.value)

    run(main())


def test_a_sqlite_store_keeps_the_delegates_sessions_and_tasks(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "ldp.db"

    async def main() -> None:
        async with await make_delegate(store=f"sqlite:{db}").start() as server:
            async with await ldp_rs.connect(server.url) as conn:
                for word in ("one", "two", "three"):
                    assert (await conn.call("echo", word)).output == word
        # A second server on the same file (a restart, or another replica) opens it and answers.
        async with await make_delegate(store=f"sqlite:{db}").start() as again:
            async with await ldp_rs.connect(again.url) as conn:
                assert (await conn.call("echo", "four")).output == "four"

    run(main())
    with sqlite3.connect(db) as kept:
        sessions = kept.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
        tasks = kept.execute("SELECT COUNT(*) FROM task_rows").fetchone()[0]
    assert sessions >= 1
    assert tasks >= 4


def test_a_store_that_cannot_be_opened_is_a_typed_server_error(tmp_path: pathlib.Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(ldp_rs.ServerError):
        make_delegate(store=f"sqlite:{not_a_dir}/ldp.db").start_in_thread()
    with pytest.raises((ldp_rs.UsageError, ldp_rs.ServerError)):
        make_delegate(store="carrier-pigeon://coop").start_in_thread()
