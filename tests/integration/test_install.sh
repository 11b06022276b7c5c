#!/usr/bin/env bash
# The library installs with headers, pkg-config and CMake package files, and a consumer
# builds against it both ways. Every public header compiles on its own, as C11 and C++.
source "$(dirname "$0")/lib.sh"
prefix=$T/prefix
if cmake --install "$GGUFKIT_BUILD" --prefix "$prefix" >"$T/install.log" 2>&1; then pass; else
    fail "cmake --install"; cat "$T/install.log" >&2; finish; fi
for f in include/gguf/file.h include/gguf/error.h lib/libgguf.a lib/libgguf.so \
         lib/pkgconfig/gguf.pc lib/cmake/gguf/ggufConfig.cmake lib/cmake/gguf/ggufTargets.cmake; do
    [ -e "$prefix/$f" ] && pass || fail "not installed: $f"
done

cat >"$T/consumer.c" <<'C'
#include <stdio.h>
#include <gguf/file.h>
#include <gguf/hash.h>
int main(int argc, char **argv)
{
    gguf_set *s;
    gguf_error err;
    if (argc < 2 || gguf_set_open(&s, argv[1], NULL, &err) != 0) {
        fprintf(stderr, "%s\n", argc < 2 ? "usage" : err.message);
        return 2;
    }
    printf("%lld tensors\n", (long long)gguf_set_tensor_count(s));
    gguf_set_free(s);
    return 0;
}
C
model=$GGUFKIT_SRC/tests/fuzz/corpus/parser/ok--small-llama.gguf

# pkg-config (the shared library is found at run time through the rpath). Not --static: that
# adds libcurl's private dependencies (nghttp2, rtmp, ssh2, ldap, ...), whose static archives
# Debian's libcurl4-openssl-dev does not bring.
if cc -std=c11 -Wall -Werror "$T/consumer.c" -o "$T/c_pc" -Wl,-rpath,"$prefix/lib" \
      $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs gguf) \
      2>"$T/err"; then pass; else fail "pkg-config build: $(cat "$T/err")"; fi
expect 0 "$T/c_pc" "$model"
contains "$T/out" "2 tensors"

# find_package(gguf)
mkdir -p "$T/cm"
cp "$T/consumer.c" "$T/cm/"
cat >"$T/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(gguf REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE gguf::gguf)
CM
if cmake -S "$T/cm" -B "$T/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >"$T/cm.log" 2>&1 &&
   cmake --build "$T/cm/build" >>"$T/cm.log" 2>&1; then pass; else
    fail "find_package build"; tail -20 "$T/cm.log" >&2; fi
expect 0 "$T/cm/build/consumer" "$model"
contains "$T/out" "2 tensors"

# Each public header stands alone, in C11 and in C++.
for h in "$prefix"/include/gguf/*.h; do
    name=$(basename "$h")
    printf '#include <gguf/%s>\nint main(void){return 0;}\n' "$name" >"$T/h.c"
    if cc -std=c11 -Wall -Wextra -Werror -I"$prefix/include" -c "$T/h.c" -o "$T/h.o" 2>"$T/err"; then
        pass; else fail "C11: $name: $(head -3 "$T/err")"; fi
    cp "$T/h.c" "$T/h.cpp"
    if c++ -std=c++17 -Wall -Werror -I"$prefix/include" -c "$T/h.cpp" -o "$T/h.o" 2>"$T/err"; then
        pass; else fail "C++: $name: $(head -3 "$T/err")"; fi
done
finish
