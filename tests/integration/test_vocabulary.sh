#!/usr/bin/env bash
# One vocabulary across the tools (docs/conventions.md, "Vocabulary"): every JSON object a
# tool prints starts with "tool" and "version" and uses one key per concept (none of the
# renamed keys comes back); --filter is the same POSIX ERE everywhere, an invalid one exits 2
# and one that matches nothing says so; --fault FAULT[@LAYER] everywhere with the old
# spellings (--inject, --fault-layer) kept as aliases; --tol has one grammar.
. "$(dirname "$0")/lib.sh"
B=$GGUFKIT_BIN
for t in gguf-inspect gguf-merge gguf-dequant-verify shard-plan ref-forward; do
    [ -x "$B/$t" ] || skip "$t is not built"
done
[ -x "$GEN" ] || skip "gguf-gen is not built"
VERSION=$("$B/shard-plan" --version | awk '{print $NF}')

# check_json FILE TOOL: one JSON object per line or one object in all; each starts with
# "tool" = TOOL and "version" = ggufkit's, and no object anywhere holds a renamed key.
check_json() {
    python3 - "$1" "$2" "$VERSION" <<'EOF' && pass || fail "$2: JSON of $1"
import json, sys
path, tool, version = sys.argv[1:]
text = open(path).read()
try:
    docs = [json.loads(text)]
except json.JSONDecodeError:
    docs = [json.loads(l) for l in text.splitlines() if l.strip()]
OLD = {"verdict", "first_divergent", "first_divergent_generated", "tolerance", "architecture",
       "model_xxh3_128", "fault_layer"}
def walk(v, where):
    if isinstance(v, dict):
        bad = OLD & set(v)
        assert not bad, f"renamed key {bad} at {where}"
        for k, x in v.items():
            walk(x, f"{where}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            walk(x, f"{where}[{i}]")
for d in docs:
    assert list(d)[:2] == ["tool", "version"], list(d)[:4]
    assert d["tool"] == tool and d["version"] == version, (d["tool"], d["version"])
    walk(d, "$")
EOF
}

SMALL="--embd 64 --heads 4 --kv-heads 2 --head-dim 16 --ff 128 --vocab 128 --no-sync"
expect 0 "$GEN" model --arch llama $SMALL --json "$T/m.gguf"
check_json "$T/out" gguf-gen
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["arch"] == "llama"' "$T/out" \
    && pass || fail "gguf-gen --json: arch"
expect 0 "$B/gguf-inspect" --json --hash "$T/m.gguf"
check_json "$T/out" gguf-inspect
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["gguf_version"] == 3 and len(d["model_digest"]) == 32' "$T/out" \
    && pass || fail "gguf-inspect --json: gguf_version, model_digest"
expect 0 "$B/gguf-inspect" "$T/m.gguf" --tokenize hello --json
check_json "$T/out" gguf-inspect
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["model"] == sys.argv[2] and d["tokenizer"]' "$T/out" "$T/m.gguf" \
    && pass || fail "gguf-inspect --tokenize --json: model is the file, tokenizer its kind"
expect 0 "$B/gguf-merge" --split --split-max-tensors 8 --dry-run --json "$T/m.gguf" "$T/part"
check_json "$T/out" gguf-merge
expect 0 "$B/gguf-dequant-verify" "$T/m.gguf" --json
check_json "$T/out" gguf-dequant-verify
expect 0 "$B/shard-plan" "$T/m.gguf" --tp 2 --json
check_json "$T/out" shard-plan
expect 0 "$B/shard-plan" --list-faults --json
check_json "$T/out" shard-plan
expect 0 "$B/shard-plan" "$T/m.gguf" --tp 2 --write-shards "$T/dump" --dump-format vllm -q
expect 0 "$B/shard-plan" check-dump "$T/m.gguf" "$T/dump" --tp 2 --json
check_json "$T/out" "shard-plan check-dump"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is True and d["tolerances"]["rel_l2"] > 0' "$T/out" \
    && pass || fail "check-dump --json: ok, tolerances"
expect 0 "$B/ref-forward" "$T/m.gguf" --tokens 1,2,3 --json --record "$T/a.gguf"
check_json "$T/out" ref-forward
expect 0 "$B/ref-forward" compare "$T/a.gguf" "$T/a.gguf" --json
check_json "$T/out" "ref-forward compare"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is True and d["first_divergence"] is None and d["tolerances"]["origin"]' "$T/out" \
    && pass || fail "compare --json: ok, first_divergence, tolerances"
expect 1 "$B/ref-forward" "$T/m.gguf" --tokens 1,2,3 --tp 2 --fault rope-pairs --json
check_json "$T/out" "ref-forward compare"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["ok"] is False and d["first_divergence"]["layer"] == 0 and d["b"]["fault"] == "rope-pairs"' "$T/out" \
    && pass || fail "--tp --fault --json: ok, first_divergence, the record's fault"
python3 -c 'print(" ".join(["once upon a time there was a little cat"] * 40))' >"$T/story.txt"
expect 0 "$B/ref-forward" kld-base "$T/m.gguf" --text-file "$T/story.txt" -c 32 --chunks 2 \
    -o "$T/ref.kld" --json
check_json "$T/out" "ref-forward kld-base"
expect 0 "$B/ref-forward" kld "$T/m.gguf" --kl-divergence-base "$T/ref.kld" --json
check_json "$T/out" "ref-forward kld"
# (check-engine's JSON: tests/integration/test_check_engine.sh, against a served model)

# ---- --filter: one meaning (POSIX ERE, searched anywhere in the name) ----
RE='blk\.1\.attn_(q|k)\.weight'
expect 0 "$B/gguf-inspect" --json --tensors-only --filter "$RE" "$T/m.gguf"
python3 -c 'import json,sys; print(" ".join(sorted(t["name"] for t in json.load(open(sys.argv[1]))["tensors"])))' "$T/out" >"$T/inspect.names"
expect 0 "$B/shard-plan" "$T/m.gguf" --tp 2 --json --filter "$RE"
python3 -c 'import json,sys; print(" ".join(sorted(t["name"] for t in json.load(open(sys.argv[1]))["tensors"])))' "$T/out" >"$T/plan.names"
[ "$(cat "$T/inspect.names")" = "blk.1.attn_k.weight blk.1.attn_q.weight" ] \
    && cmp -s "$T/inspect.names" "$T/plan.names" && pass \
    || fail "--filter differs: inspect '$(cat "$T/inspect.names")', shard-plan '$(cat "$T/plan.names")'"
# a plain name is a substring in both, as shard-plan's --filter always was
expect 0 "$B/shard-plan" "$T/m.gguf" --tp 2 --filter attn_output
contains "$T/out" "blk.0.attn_output.weight"
for cmd in "$B/gguf-inspect $T/m.gguf" "$B/shard-plan $T/m.gguf --tp 2"; do
    # shellcheck disable=SC2086
    expect 2 $cmd --filter 'blk.1.attn_(q'
    contains "$T/err" "error: --filter: 'blk.1.attn_(q' is not a POSIX extended regular expression"
    # a glob silently matching nothing was the trap: a warning names the pattern
    # shellcheck disable=SC2086
    expect 0 $cmd --filter 'blk.1.attn_?.weight'
    contains "$T/err" "warning: --filter 'blk.1.attn_?.weight' matches none of the"
    # shellcheck disable=SC2086
    expect 0 $cmd --filter 'attn_q'
    if [ -s "$T/err" ]; then fail "--filter that matches warned: $(cat "$T/err")"; else pass; fi
done
expect 0 "$B/gguf-inspect" --help
contains "$T/out" "--filter REGEX"
contains "$T/out" "(POSIX extended, searched anywhere in the name)"
expect 0 "$B/shard-plan" --help
contains "$T/out" "--filter REGEX"
contains "$T/out" "(POSIX extended, searched anywhere in the name)"

# ---- --fault FAULT[@LAYER] everywhere; --inject and --fault-layer still accepted ----
expect 1 "$B/shard-plan" "$T/m.gguf" --tp 2 --fault qkv-stream --fault-layer 1 --json --filter NONE
mv "$T/out" "$T/old.json"
expect 1 "$B/shard-plan" "$T/m.gguf" --tp 2 --fault qkv-stream@1 --json --filter NONE
python3 - "$T/old.json" "$T/out" <<'EOF' && pass || fail "--fault F@L and --fault F --fault-layer L differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["faults"] == b["faults"] == ["qkv-stream@1"], (a["faults"], b["faults"])
assert a["checks"] == b["checks"]
EOF
expect 0 "$B/shard-plan" --help
contains "$T/out" "--fault FAULT[@LAYER]"
expect 1 "$B/ref-forward" "$T/m.gguf" --tokens 1,2,3 --tp 2 --fault rope-pairs@1 -q
# the temporary record of the run is named by what it is, never by its deleted path
contains "$T/out" "tp: first divergence at blk.0.attn_out"
! grep -q "/tmp\|\.gguf" "$T/out" && pass || fail "-q names a deleted temporary record"
expect 1 "$B/ref-forward" "$T/m.gguf" --tokens 1,2,3 --tp 2 --fault rope-pairs@1
contains "$T/out" "B: this run (cpu-tp"
! grep -q "reference.gguf\|tp.gguf" "$T/out" && pass || fail "the table names a deleted temporary record"
expect 1 "$B/ref-forward" "$T/m.gguf" --tokens 1,2,3 --tp 2 --fault rope-pairs@1 -q
cp "$T/out" "$T/new.txt"
expect 1 "$B/ref-forward" "$T/m.gguf" --tokens 1,2,3 --tp 2 --inject rope-pairs@1 -q
cp "$T/out" "$T/old.txt"
cmp -s "$T/old.txt" "$T/new.txt" && pass || fail "--inject (the old spelling) differs from --fault"
expect 2 "$B/ref-forward" "$T/m.gguf" --tokens 1,2,3 --fault rope-pairs
contains "$T/err" "--fault needs --tp"
expect 0 "$B/ref-forward" --help
contains "$T/out" "--fault FAULT[@LAYER]"
contains "$T/out" "(also --inject)"
if "$B/ref-forward" serve --help >"$T/out" 2>&1; then
    contains "$T/out" "--fault FAULT[@LAYER]"
    contains "$T/out" "(also --inject)"
fi

# ---- --tol: one grammar (NAME=VALUE,..., off, a bare number for the main bound) ----
expect 0 "$B/ref-forward" compare "$T/a.gguf" "$T/a.gguf" --tol 1e-3,kl=off
expect 2 "$B/ref-forward" compare "$T/a.gguf" "$T/a.gguf" --tol dlogprob=0.1
contains "$T/err" "'dlogprob' bounds an engine's logprobs (check-engine)"
expect 2 "$B/ref-forward" compare "$T/a.gguf" "$T/a.gguf" --tol speed=1
contains "$T/err" "--tol: unknown name 'speed'"
finish
