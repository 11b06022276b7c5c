# Shared helpers for integration tests (sourced). Tests exit 0 pass, 77 skip, else fail.
set -euo pipefail
: "${GGUFKIT_BIN:?GGUFKIT_BIN is not set (run through ctest)}"
GEN=${GGUFKIT_GEN:-$GGUFKIT_BUILD/tools/gguf-gen}
# The architectures gguf-gen writes, space separated (`gguf-gen archs`): tests loop over
# these, not over a list of their own. `export GEN_ARCHS=$(gen_archs)` hands them to a
# test's embedded Python (os.environ["GEN_ARCHS"].split()).
gen_archs() { "$GEN" archs | paste -sd' '; }
SHARED=${GGUFKIT_SHARED:-}
T=$(mktemp -d "${TMPDIR:-/tmp}/ggufkit-it-XXXXXX")
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT
# A command that ends the test through set -e says so (a bare failing command,
# a failed $(...) assignment, in a function too): never an exit without a word.
# Only the test's own shell reports: inside $(...) set -e is off and a failing
# command there ends nothing.
set -E
trap '_err=(${BASH_SOURCE[0]##*/}:$LINENO $?); [ "$BASHPID" != "$$" ] ||
echo "FAIL: ${_err[0]}: exit ${_err[1]}: $BASH_COMMAND" >&2' ERR
fails=0
passes=0

fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
pass() { passes=$((passes + 1)); }
skip() { echo "SKIP: $*"; exit 77; }
need_shared() { [ -n "$SHARED" ] && [ -d "$SHARED" ] || skip "../shared/testdata is absent"; }
# have_shared PATH...: true when every PATH exists under ../shared/testdata; else says which
# checks are skipped (the rest of the test runs) and is false.
have_shared() {
    local f
    for f in "$@"; do
        if [ -z "$SHARED" ] || [ ! -e "$SHARED/$f" ]; then
            echo "note: ../shared/testdata/$f is absent: the checks that read it are skipped"
            return 1
        fi
    done
}

# expect CODE CMD...: run CMD, capture stdout/stderr in $T/out $T/err, check the exit code.
expect() {
    local want=$1
    shift
    local got=0
    "$@" >"$T/out" 2>"$T/err" || got=$?
    if [ "$got" -ne "$want" ]; then
        fail "exit $got (wanted $want): $*"
        sed 's/^/    stderr: /' "$T/err" | head -5 >&2
        return 0
    fi
    pass
}

# contains FILE TEXT: FILE contains the fixed string TEXT.
contains() {
    if grep -qF -- "$2" "$1"; then pass; else fail "'$2' not in $1: $(head -c 300 "$1")"; fi
}

finish() {
    echo "$passes passed, $fails failed"
    [ "$fails" -eq 0 ]
}

# serve_start MODEL [OPTIONS...]: `ref-forward serve` on a free port (output in
# $T/srv.out, $T/srv.err); sets URL, PORT and PID (killed at exit). Returns 1 with a FAIL
# when it says nowhere that it listens within 20 s.
serve_start() {
    # Emptied first: the child opens srv.out after the fork, and until then the file is
    # missing or still names the previous server's port (a stale URL, then curl refused).
    : >"$T/srv.out"
    "$GGUFKIT_BIN/ref-forward" serve --port 0 "${@:2}" "$1" >"$T/srv.out" 2>"$T/srv.err" &
    PID=$!
    URL=
    for _ in $(seq 400); do
        URL=$(sed -n 's/^listening on //p' "$T/srv.out")
        [ -n "$URL" ] && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.05
    done
    PORT=${URL##*:}
    if [ -z "$URL" ]; then
        fail "serve $*: no 'listening on' line: $(head -c 300 "$T/srv.err")"
        return 1
    fi
}
