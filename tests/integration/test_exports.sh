#!/usr/bin/env bash
# libgguf.so exports exactly the functions its public headers declare (gguf/export.h): no
# internal function leaks into the ABI, and none of the API is missing.
source "$(dirname "$0")/lib.sh"
so=$(ls "$GGUFKIT_BUILD"/libgguf/libgguf.so 2>/dev/null || true)
[ -n "$so" ] || skip "no libgguf.so in $GGUFKIT_BUILD/libgguf"
command -v nm >/dev/null || skip "no nm"
inc=$GGUFKIT_SRC/libgguf/include
# declared: every function name in a declaration of the preprocessed public headers (static
# inline helpers, defined there, are not exported and are left out)
for h in "$inc"/gguf/*.h; do echo "#include \"gguf/$(basename "$h")\""; done >"$T/all.c"
cc -E -P -I"$inc" -I"$GGUFKIT_BUILD/libgguf/include" "$T/all.c" >"$T/all.i" 2>"$T/cc.err" ||
    { fail "the public headers do not preprocess: $(cat "$T/cc.err")"; finish; }
python3 - "$T/all.i" >"$T/declared" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r"static inline[^{;]*\{", "static inline {", text)  # inline helpers: not API
names = set()
for m in re.finditer(r"(?m)(?:^|[;}])\s*((?:const\s+)?[A-Za-z_][\w\s\*]*?)\b(gguf_\w+)\s*\(", text):
    if "typedef" in m.group(1) or "static" in m.group(1) or "(" in m.group(1):
        continue
    names.add(m.group(2))
print("\n".join(sorted(names)))
PY
nm -D --defined-only "$so" | awk '$2 ~ /^[TW]$/ {print $3}' | sort >"$T/exported"
extra=$(comm -13 "$T/declared" "$T/exported")
missing=$(comm -23 "$T/declared" "$T/exported")
[ -z "$extra" ] && pass || fail "exported but declared by no public header: $(echo $extra)"
[ -z "$missing" ] && pass || fail "declared but not exported: $(echo $missing)"
n=$(wc -l <"$T/exported")
[ "$n" -gt 300 ] && pass || fail "only $n functions exported"
finish
