/*
 * Opening the input of a merge or split: gguf_set_open, with errors that say
 * which part of the set failed ("NAME (part 3 of 10): ..."), since a user
 * with ten 50 GB downloads needs to know which one to fetch again.
 */
#include "util/error_lib.h"
#include "gguf/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A part that is a folder, a device or a pipe is a bad input (exit 2), not an
 * I/O failure of the environment (exit 3) as gguf_file_open classifies it. */
static int classify(int rc, const char *failed, gguf_error *err)
{
    struct stat st;
    if (rc == GGUF_E_IO && failed && stat(failed, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (err)
            err->code = GGUF_E_INVALID; /* the message stays the one of the open */
        return GGUF_E_INVALID;
    }
    return rc;
}

int gguf_split_open_input(gguf_set **out, const char *path, gguf_error *err)
{
    int rc = gguf_set_open(out, path, NULL, err);
    if (!rc || !err)
        return rc;
    size_t plen = strlen(path) + 1;
    char *prefix = malloc(plen), *name = malloc(plen + 32);
    uint32_t no, count;
    const char *failed = path;
    if (prefix && name && gguf_split_parse_name(path, prefix, plen, &no, &count) && count > 1) {
        for (uint32_t i = 1; i <= count; i++) {
            if (gguf_split_part_name(name, plen + 32, prefix, i, count))
                break;
            size_t n = strlen(name);
            if (strncmp(err->message, name, n) != 0 || err->message[n] != ':')
                continue;
            char said[48];
            snprintf(said, sizeof said, "part %u of %u", i, count);
            if (!strstr(err->message + n, said)) { /* not already said */
                char rest[sizeof err->message];
                snprintf(rest, sizeof rest, "%s", err->message + n);
                int e = err->sys_errno;
                gguf_fail(err, err->code, err->offset, "%s (part %u of %u)%s", name, i, count,
                          rest);
                err->sys_errno = e;
            }
            failed = name;
            break;
        }
    }
    rc = classify(rc, failed, err);
    free(prefix);
    free(name);
    return rc;
}
