#!/usr/bin/env bash
# The library's folders are its modules (docs/design.md). A header named *_internal.h is
# private to its folder; every other header in a module folder is that module's
# library-private interface. Nothing outside a folder includes its *_internal.h: not another
# module, not cuda/, not the tools. The tests may (they test the internals).
source "$(dirname "$0")/lib.sh"
src=$GGUFKIT_SRC/libgguf/src
cd "$GGUFKIT_SRC"
bad=0
while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -n 's/.*#include "\([^"]*\)".*/\1/p' <<<"${line#*:}")
    case $inc in */*_internal.h) ;; *) continue ;; esac
    owner=${inc%%/*}
    case $file in libgguf/src/"$owner"/*) continue ;; esac
    fail "$file includes $inc, private to libgguf/src/$owner"
    bad=1
done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
             '#include "[a-z_]*/[a-z_]*_internal\.h"' libgguf/src cuda tools)
[ "$bad" = 0 ] && pass
# Every source of the library lives in a module folder: none at the top of src/.
loose=$(find "$src" -maxdepth 1 -type f | sed "s|$src/||")
[ -z "$loose" ] && pass || fail "files outside a module folder: $loose"
# A module folder's headers are included by their folder-qualified name only.
unq=$(grep -rln --include='*.c' --include='*.h' --include='*.cu' \
          "#include \"\\($(ls "$src"/*/*.h | xargs -n1 basename | paste -sd'|' | sed 's/|/\\|/g')\\)\"" \
          libgguf/src cuda tools tests || true)
[ -z "$unq" ] && pass || fail "unqualified includes of module headers in: $unq"
finish
