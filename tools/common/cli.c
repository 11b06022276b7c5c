/* Option parsing, help, errors and exit codes shared by the tools. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cli_verbosity = 1;

static const cli_opt common_opts[] = {
    {CLI_OPT_HELP, "help", 0, NULL, "show this help and exit"},
    {CLI_OPT_VERSION, "version", 0, NULL, "show the version and exit"},
    {CLI_OPT_QUIET, "quiet", 0, NULL, "print only errors (-q)"},
    {CLI_OPT_VERBOSE, "verbose", 0, NULL, "print more detail (-v)"},
    {0, NULL, 0, NULL, NULL},
};

/* A tool may list a common option (-q, -v, --help, --version) in its own table to say what
 * it does there; that entry then replaces the common one. */
static bool tool_overrides(const cli_spec *spec, int id)
{
    for (const cli_opt *o = spec->opts; o && o->name; o++)
        if (o->id == id)
            return true;
    return false;
}

/* An entry without help is an alias (an old spelling) of the first entry with the same id:
 * --help lists it on that entry's line, not on its own. */
static void print_aliases(const cli_opt *first, FILE *out)
{
    bool any = false;
    for (const cli_opt *a = first + 1; a->name; a++)
        if (a->id == first->id && !a->help) {
            fprintf(out, "%s--%s", any ? ", " : " (also ", a->name);
            any = true;
        }
    if (any)
        fputc(')', out);
}

static void print_opts(const cli_spec *spec, const cli_opt *o, bool common, FILE *out)
{
    for (; o && o->name; o++) {
        if (common && tool_overrides(spec, o->id))
            continue;
        if (!o->help)
            continue; /* an alias: printed with its option */
        char left[64];
        if (o->id > 0 && o->id < 256)
            snprintf(left, sizeof left, "-%c, --%s%s%s", o->id, o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        else if (o->id == CLI_OPT_QUIET || o->id == CLI_OPT_VERBOSE || o->id == CLI_OPT_HELP)
            snprintf(left, sizeof left, "-%c, --%s", o->id == CLI_OPT_QUIET     ? 'q'
                                                     : o->id == CLI_OPT_VERBOSE ? 'v'
                                                                                : 'h',
                     o->name);
        else
            snprintf(left, sizeof left, "    --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        fprintf(out, "  %-30s %s", left, o->help);
        print_aliases(o, out);
        fputc('\n', out);
    }
}

void cli_usage(const cli_spec *spec, FILE *out)
{
    fprintf(out, "Usage: %s %s\n\n%s\n\nOptions:\n", spec->tool, spec->usage, spec->summary);
    print_opts(spec, spec->opts, false, out);
    print_opts(spec, common_opts, true, out);
    if (spec->examples)
        fprintf(out, "\nExamples:\n%s", spec->examples);
    fprintf(out, "\nExit codes: 0 ok, 1 a check found a difference, 2 bad usage or input, "
                 "3 environment (I/O, memory, disk, GPU).\n");
}

int cli_next(const cli_spec *spec, int argc, char **argv, const char **arg, int *optind_out)
{
    /* Built once per process: tools parse one command line. */
    static struct option longopts[128];
    static char shortopts[256];
    static const cli_spec *built;
    static bool ended; /* getopt said the options ended: the rest is positional */
    if (built != spec) {
        ended = false;
        int n = 0, s = 0;
        /* No leading '+': getopt permutes, so options may come before or after
         * the positional arguments (GNU order), and "--" ends options. */
        shortopts[s++] = ':';
        for (int pass = 0; pass < 2; pass++) {
            const cli_opt *o = pass ? common_opts : spec->opts;
            for (; o && o->name && n < 127; o++) {
                if (pass && tool_overrides(spec, o->id))
                    continue;
                longopts[n].name = o->name;
                longopts[n].has_arg = o->has_arg == 2   ? optional_argument
                                      : o->has_arg ? required_argument
                                                   : no_argument;
                longopts[n].flag = NULL;
                longopts[n].val = o->id;
                n++;
                if (o->id > 0 && o->id < 256 && s < 250) {
                    shortopts[s++] = (char)o->id;
                    if (o->has_arg)
                        shortopts[s++] = ':';
                    if (o->has_arg == 2)
                        shortopts[s++] = ':';
                }
            }
        }
        memcpy(shortopts + s, "hqv", 4);
        memset(&longopts[n], 0, sizeof longopts[n]);
        built = spec;
        optind = 1;
    }
    /* Once getopt has permuted every option to the front, the positionals are
     * argv[optind..]; callers that take them one by one move optind on
     * themselves, and getopt must not be asked again (its permutation state
     * would not match the moved optind). */
    if (ended) {
        *optind_out = optind;
        return -1;
    }
    for (;;) {
        int c = getopt_long(argc, argv, shortopts, longopts, NULL);
        *optind_out = optind;
        if (c == -1) {
            ended = true;
            return -1;
        }
        *arg = optarg;
        switch (c) {
        case 'h':
        case CLI_OPT_HELP:
            cli_usage(spec, stdout);
            exit(0);
        case CLI_OPT_VERSION:
            printf("%s (ggufkit) %s\n", spec->tool, GGUFKIT_VERSION);
            exit(0);
        case 'q':
        case CLI_OPT_QUIET:
            cli_verbosity = 0;
            continue;
        case 'v':
        case CLI_OPT_VERBOSE:
            cli_verbosity = 2;
            continue;
        case ':':
            fprintf(stderr, "%s: error: option %s needs an argument\n", spec->tool,
                    argv[optind - 1]);
            fprintf(stderr, "Try '%s --help'.\n", spec->tool);
            exit(CLI_EXIT_USAGE);
        case '?':
            fprintf(stderr, "%s: error: unknown option %s\n", spec->tool, argv[optind - 1]);
            fprintf(stderr, "Try '%s --help'.\n", spec->tool);
            exit(CLI_EXIT_USAGE);
        default:
            return c;
        }
    }
}

/* Messages carry text from files and servers (token pieces, reply bodies):
 * control bytes are written as \xNN so that none reaches the terminal raw. */
static void put_clean(const char *s)
{
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f)
            fprintf(stderr, "\\x%02x", c);
        else
            fputc(c, stderr);
    }
}

void cli_error(const char *tool, const gguf_error *err)
{
    fprintf(stderr, "%s: error: ", tool);
    put_clean(err->message[0] ? err->message : gguf_strerror(err->code));
    if (err->offset != GGUF_NO_OFFSET)
        fprintf(stderr, " (offset %llu)", (unsigned long long)err->offset);
    fputc('\n', stderr);
}

void cli_errorf(const char *tool, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: error: ", tool);
    put_clean(msg);
    fputc('\n', stderr);
}

int cli_exit_code(int status)
{
    switch (status) {
    case GGUF_OK: return CLI_EXIT_OK;
    case GGUF_E_MISMATCH: return CLI_EXIT_DIFF;
    case GGUF_E_IO:
    case GGUF_E_NOMEM:
    case GGUF_E_NOSPACE:
    case GGUF_E_INTERRUPTED: return CLI_EXIT_ENV;
    default: return CLI_EXIT_USAGE;
    }
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0))
        return -1;
    double mult = 1;
    switch (*end) {
    case 'K': case 'k': mult = 1024.0; end++; break;
    case 'M': case 'm': mult = 1024.0 * 1024; end++; break;
    case 'G': case 'g': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': case 't': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return -1;
    double r = floor(v * mult);
    if (r >= 18446744073709551615.0)
        return -1;
    *out = (uint64_t)r;
    return 0;
}

int cli_parse_split_size(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-')
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0))
        return -1;
    static const char units[] = "KMGT";
    const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    double mult = 1;
    if (u) {
        bool binary = (end[1] == 'i' || end[1] == 'I') && (end[2] == 'B' || end[2] == 'b');
        for (const char *q = units; q <= u; q++)
            mult *= binary ? 1024.0 : 1000.0;
        end += binary ? 3 : 1;
        if (!binary && (*end == 'B' || *end == 'b'))
            end++;
    } else if (*end == 'B' || *end == 'b') {
        end++;
    }
    double r = floor(v * mult);
    if (*end || r < 1 || r >= 18446744073709551615.0)
        return -1;
    *out = (uint64_t)r;
    return 0;
}

const char *cli_human_bytes(uint64_t n, char *buf, size_t size)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, size, "%.2f %s", v, units[u]);
    return buf;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_start(cli_progress *p, const char *label, uint64_t total)
{
    p->enabled = cli_verbosity > 0 && isatty(STDERR_FILENO);
    p->label = label;
    p->total = total;
    p->start = p->last = cli_now();
}

void cli_progress_update(cli_progress *p, uint64_t done)
{
    if (!p->enabled)
        return;
    double now = cli_now();
    if (now - p->last < 0.2 && done < p->total)
        return;
    p->last = now;
    double el = now - p->start;
    double rate = el > 0 ? (double)done / el : 0;
    double eta = rate > 0 && p->total > done ? (double)(p->total - done) / rate : 0;
    char a[32], b[32];
    fprintf(stderr, "\r%s: %s / %s  %.0f MB/s  ETA %d:%02d   ", p->label,
            cli_human_bytes(done, a, sizeof a), cli_human_bytes(p->total, b, sizeof b),
            rate / 1e6, (int)eta / 60, (int)eta % 60);
    fflush(stderr);
}

void cli_progress_end(cli_progress *p)
{
    if (p->enabled)
        fprintf(stderr, "\r\033[K");
}

int cli_parse_ids(const char *s, int32_t **out, int64_t *n)
{
    *out = NULL;
    *n = 0;
    int64_t cap = 16;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    if (!ids || !s || !*s)
        goto bad;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',') || *p == '-' ||
            *p == '+' || *p == ' ')
            goto bad;
        if (*n == cap) {
            cap *= 2;
            int32_t *t = realloc(ids, (size_t)cap * sizeof(int32_t));
            if (!t)
                goto bad;
            ids = t;
        }
        ids[(*n)++] = (int32_t)v;
        if (!*end)
            break;
        p = end + 1;
        if (!*p)
            goto bad; /* a trailing comma */
    }
    *out = ids;
    return 0;
bad:
    free(ids);
    *n = 0;
    return -1;
}


/* ---- --filter ---- */

int cli_filter_set(cli_filter *f, const char *tool, const char *pattern)
{
    cli_filter_free(f);
    const int rc = regcomp(&f->re, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char why[256];
        regerror(rc, &f->re, why, sizeof why);
        regfree(&f->re);
        cli_errorf(tool, "--filter: '%s' is not a POSIX extended regular expression: %s",
                   pattern, why);
        return -1;
    }
    f->set = true;
    f->pattern = pattern;
    f->n_matched = 0;
    return 0;
}

bool cli_filter_match(cli_filter *f, const char *name)
{
    if (!f->set)
        return true;
    if (regexec(&f->re, name, 0, NULL, 0) != 0)
        return false;
    f->n_matched++;
    return true;
}

bool cli_filter_test(const cli_filter *f, const char *name)
{
    return !f->set || regexec(&f->re, name, 0, NULL, 0) == 0;
}

void cli_filter_warn_empty(const cli_filter *f, const char *tool, long long n_names)
{
    if (!f->set || f->n_matched > 0)
        return;
    fprintf(stderr, "%s: warning: --filter '", tool);
    put_clean(f->pattern);
    fprintf(stderr, "' matches none of the %lld names (a POSIX extended regular expression, "
                    "searched anywhere in the name: 'blk\\.0\\.', 'attn_(q|k)\\.', not a glob)\n",
            n_names);
}

void cli_filter_free(cli_filter *f)
{
    if (f && f->set)
        regfree(&f->re);
    if (f) {
        f->set = false;
        f->n_matched = 0;
    }
}
