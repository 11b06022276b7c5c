/* Replaying a committed corpus of named inputs (tests/fuzz/corpus/NAME):
 * ok--WHAT must succeed, GGUF_E_<CODE>--WHAT must fail with CODE and name
 * the file in its message. */
#ifndef HELPER_CORPUS_H
#define HELPER_CORPUS_H

#include "gguf/error.h"

/* Open (and release) one file of the corpus: its status, err filled. */
typedef int (*th_corpus_fn)(const char *path, const char *name, gguf_error *err);

/* Every file of tests/fuzz/corpus/<corpus> (under $GGUFKIT_SRC) through fn,
 * with Check assertions; at least min_files files. */
void th_corpus_replay(const char *corpus, th_corpus_fn fn, int min_files);

#endif
