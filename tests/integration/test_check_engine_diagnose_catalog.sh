#!/usr/bin/env bash
# check-engine --diagnose over the whole fault catalog: every fault that can occur in generated
# llama, qwen3moe, deepseek2 and glm-dsa models, served by `ref-forward serve --tp N [--ep M]
# --inject FAULT[@1]` at tp 2, 4, 8 and 4/ep 4, must be named when the engine diverges, never
# another fault; clean engines must agree (tests/bench/bench_diagnose.py, the table of
# docs/check-engine.md, "After DIVERGED").
source "$(dirname "$0")/lib.sh"
[ -x "$GEN" ] || skip "gguf-gen is not built"
command -v python3 >/dev/null || skip "python3 is not installed"
"$GGUFKIT_BIN/ref-forward" check-engine --help >/dev/null 2>&1 ||
    skip "ref-forward is built without check-engine"
src=$(cd "$(dirname "$0")/../.." && pwd)
if GGUFKIT_GEN=$GEN python3 "$src/tests/bench/bench_diagnose.py" --json "$T/runs.json" \
    >"$T/out" 2>&1; then
    pass
else
    tail -n 40 "$T/out" >&2
    fail "a diagnosis named the wrong fault, or a clean engine was not agreed with"
fi
tail -n 1 "$T/out"
finish
