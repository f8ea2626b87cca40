# shellcheck shell=bash
# Sourced by the scripts that install pinned PyPI packages for the tests (ref-sdk.sh, bridge-sdks.sh, py-tools.sh):
# the one way this project makes a private Python venv under target/.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"
#   venv_install NAME WANT CHECK PIP_ARGS...
#
# NAME      the venv is target/NAME, its lock target/NAME.lock
# WANT      what the venv's marker file must say for it to count as installed (a different text reinstalls it, so
#           put in it everything that pins the install: versions, a constraints file's checksum)
# CHECK     Python code that must exit 0 in the venv (the imports the callers need, a version check)
# PIP_ARGS  the arguments of `pip install`
#
# Prints the venv's python on stdout and nothing else (logs go to stderr). Idempotent, and safe for concurrent
# callers (parallel cargo tests): they serialise on a flock. Exits non-zero with a message when anything fails, so
# that callers never skip silently. Needs python3 >= 3.10 (override with $LDP_REF_PYTHON) and access to PyPI.

venv_install() {
    local name=$1 want=$2 check=$3
    shift 3
    local who repo venv vpy marker host_py
    who=$(basename "$0")
    repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    venv="$repo/target/$name"
    vpy="$venv/bin/python"
    marker="$venv/.installed"
    host_py="${LDP_REF_PYTHON:-python3}"

    log() { printf '%s: %s\n' "$who" "$*" >&2; }
    die() { printf '%s: ERROR: %s\n' "$who" "$*" >&2; exit 1; }
    installed() {
        [ -x "$vpy" ] && [ "$(cat "$marker" 2>/dev/null)" = "$want" ] && "$vpy" -c "$check" >/dev/null 2>&1
    }

    command -v flock >/dev/null 2>&1 || die "flock(1) not found (util-linux)"
    mkdir -p "$repo/target"
    exec 9>"$repo/target/$name.lock"
    flock -w 900 9 || die "timed out after 900s waiting for the lock target/$name.lock"
    if installed; then
        printf '%s\n' "$vpy"
        return 0
    fi

    command -v "$host_py" >/dev/null 2>&1 || die "'$host_py' not found; install Python >= 3.10 or set LDP_REF_PYTHON"
    "$host_py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' ||
        die "$host_py is $("$host_py" -V 2>&1); Python >= 3.10 is needed"

    log "installing $* into $venv (one-off)"
    rm -rf "$venv"
    # A venv with its own pip; else a pip-less venv driven by the host's pip (Debian's python3 without
    # python3-venv has no ensurepip).
    local pip=()
    if "$host_py" -m venv "$venv" >&2 2>&1; then
        pip=("$vpy" -m pip)
    else
        log "python3 -m venv with pip failed; retrying --without-pip with the host's pip"
        rm -rf "$venv"
        "$host_py" -m venv --without-pip "$venv" >&2 ||
            die "could not create a venv with $host_py (on Debian: apt-get install python3-venv)"
        "$host_py" -m pip --version >/dev/null 2>&1 ||
            die "the venv has no pip and $host_py has none either (on Debian: apt-get install python3-venv or python3-pip)"
        pip=("$host_py" -m pip --python "$vpy")
    fi

    if ! PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_WARN_SCRIPT_LOCATION=1 \
        "${pip[@]}" install --timeout 60 --retries 5 "$@" >&2; then
        rm -rf "$venv"
        die "pip install $* failed (is PyPI reachable?)"
    fi
    local why
    if ! why=$("$vpy" -c "$check" 2>&1); then
        die "installed, but the check fails: $why"
    fi
    printf '%s' "$want" >"$marker"
    log "installed $*"
    printf '%s\n' "$vpy"
}
