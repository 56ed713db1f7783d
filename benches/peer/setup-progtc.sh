#!/usr/bin/env bash
# Creates (idempotently) the Python venv that holds the peer of our benchmark,
# progtc 0.2.0 from PyPI, so that benches/peer/progtc_bench.py can run against it.
#
#   PTC_BENCH_VENV  where the venv goes (default: target/bench-venv, relative to the repo root)
#   PYTHON          the interpreter that creates the venv (default: python3 on PATH)
#
# Needs only PyPI (and Debian's python3-venv if the interpreter has no ensurepip).
set -euo pipefail

PROGTC_REQ='progtc[server]==0.2.0'

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${PTC_BENCH_VENV:-target/bench-venv}"
case "$venv" in
    /*) ;;
    *) venv="$repo_root/$venv" ;;
esac
python="${PYTHON:-python3}"

die() {
    echo "setup-progtc: error: $*" >&2
    exit 1
}

command -v "$python" >/dev/null 2>&1 || die "'$python' not found on PATH (install python3, e.g. apt-get install python3 python3-venv)"
echo "setup-progtc: interpreter: $(command -v "$python") ($("$python" --version 2>&1))"

# A venv whose interpreter no longer runs (python upgraded or removed) is rebuilt.
if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    echo "setup-progtc: $venv is broken, recreating it"
    rm -rf "$venv"
fi

if [ -x "$venv/bin/python" ]; then
    echo "setup-progtc: venv exists: $venv"
else
    echo "setup-progtc: creating venv: $venv"
    mkdir -p "$(dirname "$venv")"
    if ! "$python" -m venv "$venv"; then
        rm -rf "$venv"
        die "'$python -m venv' failed; on Debian/Ubuntu install python3-venv (apt-get install python3-venv)"
    fi
fi

# Already there at the right version: nothing to do (no network needed).
installed="$("$venv/bin/python" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
try:
    import fastapi, uvicorn, httpx, httpx_sse  # noqa: F401  (the [server] extra and the client)
    print(m.version("progtc"))
except Exception:
    pass
PY
)"
if [ "$installed" = "0.2.0" ]; then
    echo "setup-progtc: progtc 0.2.0 (with server extra) already installed in $venv"
else
    echo "setup-progtc: pip install '$PROGTC_REQ' into $venv"
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check "$PROGTC_REQ"; then
        die "pip install '$PROGTC_REQ' failed (is PyPI reachable? see pip's output above)"
    fi
fi

version="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("progtc"))' 2>/dev/null)" \
    || die "progtc is not importable from $venv after the install"
[ "$version" = "0.2.0" ] || die "expected progtc 0.2.0 in $venv, found $version"
[ -x "$venv/bin/progtc" ] || die "the progtc console script is missing from $venv/bin"
echo "setup-progtc: ready: progtc $version, run the driver with $venv/bin/python benches/peer/progtc_bench.py"
