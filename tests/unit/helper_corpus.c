/* Corpus replay shared by the parsers' unit tests (helper_corpus.h). */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helper_corpus.h"

void th_corpus_replay(const char *corpus, th_corpus_fn fn, int min_files)
{
    const char *src = getenv("GGUFKIT_SRC");
    ck_assert_msg(src != NULL, "GGUFKIT_SRC is not set");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", src, corpus);
    DIR *dd = opendir(dir);
    ck_assert_msg(dd != NULL, "%s: cannot open", dir);
    int checked = 0;
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (e->d_name[0] == '.')
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_error err;
        gguf_error_clear(&err);
        const int rc = fn(path, e->d_name, &err);
        if (!strncmp(e->d_name, "ok--", 4)) {
            ck_assert_msg(rc == 0, "%s: %s", e->d_name, err.message);
        } else {
            const char *sep = strstr(e->d_name, "--");
            ck_assert_msg(sep != NULL, "%s: not CODE--what or ok--what", e->d_name);
            char want[64];
            snprintf(want, sizeof want, "%.*s", (int)(sep - e->d_name), e->d_name);
            ck_assert_msg(!strcmp(gguf_status_name(rc), want), "%s: got %s: %s", e->d_name,
                          gguf_status_name(rc), err.message);
            ck_assert_msg(strstr(err.message, e->d_name) != NULL, "%s: no file in: %s",
                          e->d_name, err.message);
        }
        checked++;
    }
    closedir(dd);
    ck_assert_int_ge(checked, min_files);
}
