"""Make sure the running interpreter has the Python reference SDK (ldp-protocol 0.2.0).

Imported first by scripts/ref_delegate.py, scripts/ref_client.py and scripts/gen_golden_vectors.py:
if `ldp_protocol` 0.2.0 is not importable, it runs scripts/ref-sdk.sh (which builds or reuses the
venv under target/ref-venv) and re-executes the calling script under that venv's python, with the
same arguments. Any failure is fatal (exit 2) with a message on stderr: never a silent skip.
"""

from __future__ import annotations

import os
import subprocess
import sys

SDK_VERSION = "0.2.0"
SCRIPTS_DIR = os.path.dirname(os.path.abspath(__file__))
_REEXEC_FLAG = "LDP_REF_SDK_REEXEC"


def _have_sdk() -> bool:
    try:
        import ldp_protocol  # noqa: F401
    except ImportError:
        return False
    return getattr(ldp_protocol, "__version__", None) == SDK_VERSION


def _fail(script: str, message: str, code: int, json_error: bool) -> None:
    sys.stderr.write(f"{os.path.basename(script)}: ERROR: {message}\n")
    if json_error:
        import json

        sys.stdout.write(
            json.dumps({"ok": False, "failed_step": "bootstrap", "error": message}) + "\n"
        )
        sys.stdout.flush()
    sys.exit(code)


def ensure_sdk(script: str, fail_code: int = 2, json_error: bool = False) -> None:
    """Return if the SDK is importable; otherwise re-exec `script` under the reference venv.

    On failure: message on stderr, optionally a JSON object `{"ok": false, ...}` on stdout,
    and exit with `fail_code`.
    """
    if _have_sdk():
        return
    if os.environ.get(_REEXEC_FLAG):
        _fail(
            script,
            f"ldp_protocol {SDK_VERSION} is still not importable under {sys.executable} "
            "after re-exec; delete target/ref-venv and retry",
            fail_code,
            json_error,
        )
    installer = os.path.join(SCRIPTS_DIR, "ref-sdk.sh")
    try:
        proc = subprocess.run(
            ["bash", installer], stdout=subprocess.PIPE, stderr=None, timeout=1200, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _fail(script, f"running {installer} failed: {exc}", fail_code, json_error)
    python = proc.stdout.decode().strip()
    if proc.returncode != 0 or not python or not os.access(python, os.X_OK):
        _fail(
            script,
            f"{installer} failed (exit {proc.returncode}); cannot provide the Python reference SDK",
            fail_code,
            json_error,
        )
    os.environ[_REEXEC_FLAG] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [python, os.path.abspath(script), *sys.argv[1:]])
