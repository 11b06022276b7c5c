#!/usr/bin/env bash
# ref-forward check-engine --diagnose against `ref-forward serve --tp N --inject FAULT` (a broken
# engine of our own, started on a free loopback port): the served fault is named, at every layer
# and at one layer (the one-layer search); a clean engine gets no diagnosis; an engine serving
# another model gets "no fault of the catalog reproduces the engine", never a guess; the search's
# options are checked. The whole table over the catalog: tests/bench/bench_diagnose.py.
source "$(dirname "$0")/lib.sh"
R=$GGUFKIT_BIN/ref-forward
[ -x "$GEN" ] || skip "gguf-gen is not built"
command -v python3 >/dev/null || skip "python3 is not installed"
"$R" check-engine --help >/dev/null 2>&1 || skip "ref-forward is built without check-engine"
for a in deepseek2 llama qwen3moe; do
    "$GEN" model --arch "$a" --kv-heads 2 --vocab 500 --type Q4_K --no-sync --force -q \
        "$T/$a.gguf" || fail "gguf-gen $a"
done
"$GEN" model --arch deepseek2 --kv-heads 2 --vocab 500 --type Q4_K --seed 2 --no-sync --force \
    -q "$T/other.gguf" || fail "gguf-gen other"

python3 - "$R" "$T" "$(dirname "$0")" <<'EOF' && pass || fail "check-engine --diagnose (details above)"
import functools, json, subprocess, sys
R, T = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
import serve_process
Serve = functools.partial(serve_process.Serve, R)
TOK = ["--tokens", "1,17,42,99,123,7", "-n", "4"]
bad = []

def check(model, url, *args):
    p = subprocess.run([R, "check-engine", model, "--url", url, *TOK, *args],
                       capture_output=True, text=True, timeout=600)
    d = json.loads(p.stdout) if "--json" in args and p.returncode in (0, 1) else None
    return p.returncode, d, p.stdout, p.stderr

def named(d):
    g = d["diagnosis"]
    return g and g["result"] == "fault" and (g["fault"]["fault"], g["fault"]["layer"])

ds, llama = f"{T}/deepseek2.gguf", f"{T}/llama.gguf"
# 1. a fault at every layer, named with its runner-up and the margin
with Serve(ds, "--tp", "2", "--fault", "kv-b-rows") as s:
    rc, d, out, err = check(ds, s.url, "--diagnose", "--tp", "2", "--json")
    g = d and d["diagnosis"]
    if rc != 1 or named(d) != ("kv-b-rows", None) or g["fault"]["tp"] != 2:
        bad.append(f"kv-b-rows: exit {rc} {g and {k: g[k] for k in ('result', 'fault')}} {err}")
    elif not (g["runner_up"] and g["margin"] > 0.01 and not g["runner_up"]["reproduces"]):
        bad.append(f"kv-b-rows: runner-up {g['runner_up']} margin {g['margin']}")
    elif g["layers_tried"] or g["runs"] < 10 or g["tp_tried"] != [2]:
        bad.append(f"kv-b-rows: search {g['layers_tried']} {g['runs']} {g['tp_tried']}")
    # the HTML report carries the finding and the ranked candidates
    # and names the run: the command line (its secrets left out) and the version
    rc, _, out, err = check(ds, s.url, "--diagnose", "--tp", "2", "-q", "--html", f"{T}/r.html",
                            "--api-key", "SECRET1", "--header", "X-Key: SECRET2")
    page = open(f"{T}/r.html").read() if rc == 1 else ""
    if "<h3>diagnosis</h3>" not in page or "<b>kv-b-rows</b> (every layer, tp 2)" not in page:
        bad.append(f"kv-b-rows html: exit {rc} {err}")
    if ("ref-forward check-engine " not in page or "--api-key ... --header ..." not in page or
            "SECRET" in page or "ggufkit " not in page):
        bad.append("html: the command line or version missing, or a secret shown")
    # the text says it in one line, with the fault's summary
    rc, _, out, err = check(ds, s.url, "--diagnose", "--tp", "2")
    if rc != 1 or "diagnosis: kv-b-rows (every layer, tp 2) reproduces the engine" not in out:
        bad.append(f"kv-b-rows text: exit {rc}: {out[-600:]} {err}")
# 2. a fault in one layer: nothing reproduces at every layer, the one-layer search names it
with Serve(ds, "--tp", "2", "--fault", "kv-b-stacked@1") as s:
    rc, d, out, err = check(ds, s.url, "--diagnose", "--tp", "2", "--json")
    if rc != 1 or named(d) != ("kv-b-stacked", 1) or not d["diagnosis"]["layers_tried"]:
        bad.append(f"kv-b-stacked@1: exit {rc} {d and d['diagnosis']['result']} "
                   f"{d and d['diagnosis']['fault']} {err}")
    # a bound on the runs: the one-layer search is skipped and said so, never run past it
    rc, d, out, err = check(ds, s.url, "--diagnose", "--tp", "2", "--max-runs", "20",
                            "--json")
    g = d and d["diagnosis"]
    if rc != 1 or g["layers_tried"] or g["layers_runs_skipped"] < 1 or g["result"] != "none":
        bad.append(f"--max-runs 20: exit {rc} {g and {k: g[k] for k in ('result', 'layers_tried', 'layers_runs_skipped')}} {err}")
# 3. a fault that needs tp > kv heads, found over a list of tp sizes
with Serve(llama, "--tp", "4", "--fault", "kv-heads-split") as s:
    rc, d, out, err = check(llama, s.url, "--diagnose", "--tp", "2,4", "--json")
    if rc != 1 or named(d) != ("kv-heads-split", None) or d["diagnosis"]["fault"]["tp"] != 4:
        bad.append(f"kv-heads-split: exit {rc} {d and d['diagnosis']['fault']} {err}")
# 3b. experts owned off by one under expert parallelism: tried at ep = tp without --ep
moe = f"{T}/qwen3moe.gguf"
with Serve(moe, "--tp", "2", "--ep", "2", "--fault", "expert-offset") as s:
    rc, d, out, err = check(moe, s.url, "--diagnose", "--tp", "2", "--json")
    f = d and d["diagnosis"]["fault"]
    if rc != 1 or named(d) != ("expert-offset", None) or f["ep"] != 2:
        bad.append(f"expert-offset: exit {rc} {f} {err}")
# 4. a clean engine: agree, nothing to diagnose
with Serve(ds, "--tp", "2") as s:
    rc, d, out, err = check(ds, s.url, "--diagnose", "--json")
    if rc != 0 or d["ok"] is not True or d["diagnosis"] is not None:
        bad.append(f"clean: exit {rc} {d and d['diagnosis']} {err}")
    rc, _, out, err = check(ds, s.url, "--diagnose")
    if rc != 0 or "nothing to diagnose" not in out:
        bad.append(f"clean text: exit {rc} {out[-300:]}")
# 5. another model behind the engine: DIVERGED, and no fault of the catalog is named
with Serve(f"{T}/other.gguf") as s:
    rc, d, out, err = check(ds, s.url, "--diagnose", "--tp", "1,2", "--json")
    g = d and d["diagnosis"]
    if rc != 1 or g["result"] != "none" or g["fault"] is not None:
        bad.append(f"other model: exit {rc} {g and g['result']} {err}")
    rc, _, out, err = check(ds, s.url, "--diagnose", "--tp", "1")
    if rc != 1 or "no fault of the catalog reproduces the engine" not in out:
        bad.append(f"other model text: exit {rc} {out[-400:]}")
    # 6. the search's options: they need --diagnose; sizes and bounds are checked
    for args, word in ((["--tp", "2"], "--tp needs --diagnose"),
                       (["--diagnose", "--tp", "0"], "--tp: '0'"),
                       (["--diagnose", "--tp", "2,x"], "--tp: '2,x'"),
                       (["--diagnose", "--engine", "trt"], "--engine: 'trt'"),
                       (["--diagnose", "--jobs", "0"], "--jobs: '0'"),
                       (["--diagnose", "--tp", "2", "--max-runs", "3"], "more than the bound")):
        rc, _, out, err = check(ds, s.url, *args)
        if rc != 2 or word not in err:
            bad.append(f"{args}: exit {rc}: {err.strip()[-200:]}")
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
finish
