/*
 * gguf/export.h - what libgguf.so exports.
 *
 * The library is built with hidden visibility: only what a public header
 * declares between GGUF_BEGIN_DECLS and GGUF_END_DECLS is exported, so the
 * shared library's ABI is exactly its public headers (tests/integration/
 * test_exports.sh checks it). GGUF_API marks a single declaration outside
 * such a block.
 */
#ifndef GGUF_EXPORT_H
#define GGUF_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define GGUF_API __attribute__((visibility("default")))
#define GGUF_VISIBILITY_PUSH _Pragma("GCC visibility push(default)")
#define GGUF_VISIBILITY_POP _Pragma("GCC visibility pop")
#else
#define GGUF_API
#define GGUF_VISIBILITY_PUSH
#define GGUF_VISIBILITY_POP
#endif

#ifdef __cplusplus
#define GGUF_BEGIN_DECLS extern "C" { GGUF_VISIBILITY_PUSH
#define GGUF_END_DECLS GGUF_VISIBILITY_POP }
#else
#define GGUF_BEGIN_DECLS GGUF_VISIBILITY_PUSH
#define GGUF_END_DECLS GGUF_VISIBILITY_POP
#endif

#endif /* GGUF_EXPORT_H */
