/* Option parsing, help, errors and exit codes shared by the tools. */
#include "cli.h"

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

static void print_opts(const cli_opt *o, FILE *out)
{
    for (; o && o->name; o++) {
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
        fprintf(out, "  %-30s %s\n", left, o->help);
    }
}

void cli_usage(const cli_spec *spec, FILE *out)
{
    fprintf(out, "Usage: %s %s\n\n%s\n\nOptions:\n", spec->tool, spec->usage, spec->summary);
    print_opts(spec->opts, out);
    print_opts(common_opts, out);
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
                longopts[n].name = o->name;
                longopts[n].has_arg = o->has_arg ? required_argument : no_argument;
                longopts[n].flag = NULL;
                longopts[n].val = o->id;
                n++;
                if (o->id > 0 && o->id < 256 && s < 250) {
                    shortopts[s++] = (char)o->id;
                    if (o->has_arg)
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

void cli_error(const char *tool, const gguf_error *err)
{
    if (err->offset != GGUF_NO_OFFSET)
        fprintf(stderr, "%s: error: %s (offset %llu)\n", tool, err->message,
                (unsigned long long)err->offset);
    else
        fprintf(stderr, "%s: error: %s\n", tool,
                err->message[0] ? err->message : gguf_strerror(err->code));
}

void cli_errorf(const char *tool, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", tool);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
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

void cli_json_str(FILE *out, const char *s, size_t n)
{
    if (n == SIZE_MAX)
        n = strlen(s);
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20)
                fprintf(out, "\\u%04x", c);
            else
                fputc(c, out);
        }
    }
    fputc('"', out);
}

void cli_json_num(FILE *out, double v)
{
    if (!isfinite(v)) {
        fputs("null", out);
        return;
    }
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        fprintf(out, "%.0f", v);
    else
        fprintf(out, "%.17g", v);
}
