/*
 * ref-forward import-dump: hidden states an engine (or HF transformers)
 * dumped, turned into an activation record through a map (gguf/import.h),
 * so that `ref-forward compare` and --html put them beside the reference.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "gguf/file.h"
#include "gguf/hash.h"
#include "gguf/import.h"
#include "ref_forward.h"

#ifndef GGUFKIT_MAPS_SOURCE
#define GGUFKIT_MAPS_SOURCE ""
#endif
#ifndef GGUFKIT_MAPS_INSTALL
#define GGUFKIT_MAPS_INSTALL ""
#endif

enum {
    OPT_MAP = 300, OPT_TOKENS, OPT_MODEL, OPT_LAYOUT, OPT_BACKEND, OPT_PRECISION, OPT_NPY_V2,
    OPT_ZSTD, OPT_LIST_MAPS,
};

static const cli_opt import_opts[] = {
    {OPT_MAP, "map", 1, "MAP", "the map: a file, or a shipped map's name (--list-maps)"},
    {'o', "output", 1, "RECORD.gguf", "the record to write (replaced when it exists)"},
    {OPT_TOKENS, "tokens", 1, "IDS", "input token ids, comma-separated (default: the map's "
     "tokens statement; without either, record.tokens stays empty)"},
    {OPT_MODEL, "model", 1, "MODEL.gguf", "the model the dump ran: its digest and architecture "
     "go into the record"},
    {OPT_LAYOUT, "layout", 1, "AXES", "axis order of every array, over the map's: seq,hidden | "
     "hidden,seq | layer,seq,hidden | seq,layer,hidden | ... (batch: an axis of 1)"},
    {OPT_BACKEND, "backend", 1, "NAME", "record.backend (default: the map's backend, else "
     "\"import\")"},
    {OPT_PRECISION, "precision", 1, "P", "record.precision: f32, f64, f16, bf16 (default: the "
     "loosest dtype of the dump)"},
    {OPT_NPY_V2, "npy-v2", 1, "bf16", "read .npy files of descr '<V2' (ml_dtypes' bfloat16) as "
     "bfloat16"},
    {OPT_ZSTD, "zstd", 0, NULL, "compress the record (a zstd frame around the GGUF)"},
    {OPT_LIST_MAPS, "list-maps", 0, NULL, "list the shipped maps and where they are, then exit"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec import_spec = {
    .tool = REF_FORWARD_TOOL " import-dump",
    .usage = "DIR --map MAP -o RECORD.gguf [OPTIONS]",
    .summary =
        "Turn the hidden states another system dumped into DIR (.npy or safetensors files: HF\n"
        "transformers' output_hidden_states, vLLM's extract_hidden_states, SGLang's tensor dump\n"
        "converted from .pt) into an activation record for `ref-forward compare`. The map says\n"
        "which array is which capture point, and the axis order (docs/engine-dumps.md).",
    .opts = import_opts,
    .examples =
        "  ref-forward import-dump hf-dump --map hf --tokens 1,17,42 --model m.gguf -o hf.gguf\n"
        "  ref-forward compare ref.gguf hf.gguf --common --html report.html\n"
        "  ref-forward import-dump /dev/shm/hs --map vllm --model m.gguf -o vllm.gguf\n"
        "  ref-forward import-dump dump --map my.map --layout hidden,seq -o r.gguf\n"
        "  ref-forward import-dump --list-maps\n",
};

static const char *map_dirs(int i)
{
    switch (i) {
    case 0: return getenv("GGUFKIT_MAP_DIR");
    case 1: return GGUFKIT_MAPS_SOURCE;
    case 2: return GGUFKIT_MAPS_INSTALL;
    default: return NULL;
    }
}

/* A bare name (letters, digits, '-') names a shipped map: NAME.map in the map folders. */
static const char *find_map(const char *arg, char *buf, size_t n)
{
    struct stat sb;
    if (stat(arg, &sb) == 0)
        return arg;
    for (const char *p = arg; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
            return arg;
    for (int i = 0; i < 3; i++) {
        const char *d = map_dirs(i);
        if (!d || !*d)
            continue;
        snprintf(buf, n, "%s/%s.map", d, arg);
        if (stat(buf, &sb) == 0)
            return buf;
    }
    return arg;
}

static int list_maps(void)
{
    static const char *const names[] = {"hf", "hf-layer-outputs", "vllm", "sglang"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char buf[4096];
        const char *p = find_map(names[k], buf, sizeof buf);
        gguf_import_map *m = NULL;
        gguf_error err;
        if (p == names[k] || gguf_import_map_open(&m, p, &err)) {
            printf("%-18s (not found)\n", names[k]);
            continue;
        }
        printf("%-18s %s (%lld entries, backend %s)\n", names[k], p,
               (long long)gguf_import_map_entry_count(m), *gguf_import_map_backend(m) ?
               gguf_import_map_backend(m) : "import");
        gguf_import_map_free(m);
    }
    return CLI_EXIT_OK;
}

/* Digest and architecture of the model the dump ran. */
static int model_meta(const char *path, char *digest, char *arch, size_t arch_n)
{
    gguf_set *s = NULL;
    gguf_error err;
    int rc = gguf_set_open(&s, path, NULL, &err);
    if (!rc) {
        gguf_digest d;
        rc = gguf_digest_set(s, NULL, &d, 0, NULL, &err);
        if (!rc)
            gguf_digest_hex(&d, digest);
        gguf_str a;
        if (!rc && gguf_get_str(gguf_set_meta(s), "general.architecture", &a, NULL) == 0)
            snprintf(arch, arch_n, "%.*s", (int)(a.len < 63 ? a.len : 63), a.data);
    }
    gguf_set_free(s);
    if (rc)
        cli_error(REF_FORWARD_TOOL, &err);
    return rc;
}

static void print_plan(const gguf_import_plan *p, const char *dir, const char *map,
                       const char *map_path, const gguf_record_meta *m)
{
    printf("%s through map %s", dir, map);
    if (cli_verbosity > 1 && strcmp(map, map_path))
        printf(" (%s)", map_path);
    printf(": %lld capture(s) of %lld tokens (backend %s, precision %s)\n",
           (long long)gguf_import_plan_count(p), (long long)gguf_import_plan_n_tokens(p),
           m->backend, m->precision);
    for (int64_t i = 0; i < gguf_import_plan_count(p); i++) {
        const gguf_import_item *it = gguf_import_plan_item(p, i);
        const char *f = it->file;
        const size_t dl = strlen(dir);
        if (!strncmp(f, dir, dl) && f[dl] == '/')
            f += dl + 1;
        char src[700];
        int k = snprintf(src, sizeof src, "%s%s%s", f, it->tensor ? ":" : "",
                         it->tensor ? it->tensor : "");
        if (it->index >= 0 && k > 0 && (size_t)k < sizeof src)
            snprintf(src + k, sizeof src - (size_t)k, "[%lld]", (long long)it->index);
        printf("  %-24s <- %s  %s [%lld, %lld]\n", it->point, src, it->dtype,
               (long long)it->n_tokens, (long long)it->width);
    }
}

int refwd_import_main(int argc, char **argv)
{
    const char *tool = import_spec.tool, *arg, *dir = NULL, *map_arg = NULL, *out = NULL;
    const char *ids = NULL, *model = NULL, *backend = NULL, *precision = NULL;
    gguf_import_layout layout;
    bool have_layout = false, v2 = false, zstd = false;
    int optind_out = 1, id;
    for (;;) {
        id = cli_next(&import_spec, argc, argv, &arg, &optind_out);
        if (id == -1) {
            if (optind_out >= argc)
                break;
            if (dir) {
                cli_errorf(tool, "unexpected argument '%s': one dump folder", argv[optind_out]);
                return CLI_EXIT_USAGE;
            }
            dir = argv[optind_out];
            optind = optind_out + 1;
            continue;
        }
        gguf_error err;
        switch (id) {
        case OPT_MAP: map_arg = arg; break;
        case 'o': out = arg; break;
        case OPT_TOKENS: ids = arg; break;
        case OPT_MODEL: model = arg; break;
        case OPT_BACKEND: backend = arg; break;
        case OPT_ZSTD: zstd = true; break;
        case OPT_LIST_MAPS: return list_maps();
        case OPT_LAYOUT:
            if (gguf_import_layout_parse(&layout, arg, &err)) {
                cli_errorf(tool, "--layout: %s", err.message);
                return CLI_EXIT_USAGE;
            }
            have_layout = true;
            break;
        case OPT_PRECISION:
            if (strcmp(arg, "f32") && strcmp(arg, "f64") && strcmp(arg, "f16") &&
                strcmp(arg, "bf16")) {
                cli_errorf(tool, "--precision: '%s' is not f32, f64, f16 or bf16", arg);
                return CLI_EXIT_USAGE;
            }
            precision = arg;
            break;
        case OPT_NPY_V2:
            if (strcmp(arg, "bf16")) {
                cli_errorf(tool, "--npy-v2: '%s': the only reading is bf16", arg);
                return CLI_EXIT_USAGE;
            }
            v2 = true;
            break;
        default: return CLI_EXIT_USAGE;
        }
    }
    if (!dir || !map_arg || !out) {
        cli_errorf(tool, "%s", !dir ? "expected the dump folder" : !map_arg ? "--map is required"
                                                                            : "-o RECORD.gguf is required");
        fprintf(stderr, "Try '%s --help'.\n", tool);
        return CLI_EXIT_USAGE;
    }
    int32_t *tokens = NULL;
    int64_t n_tokens = 0;
    if (ids && cli_parse_ids(ids, &tokens, &n_tokens)) {
        cli_errorf(tool, "--tokens: '%s' is not a comma-separated list of ids", ids);
        return CLI_EXIT_USAGE;
    }

    int ret = CLI_EXIT_USAGE, rc;
    gguf_import_map *map = NULL;
    gguf_import_plan *plan = NULL;
    gguf_error err;
    char buf[4096], digest[64] = "", arch[64] = "";
    const char *map_path = find_map(map_arg, buf, sizeof buf);
    if ((rc = gguf_import_map_open(&map, map_path, &err))) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    if (model && (rc = model_meta(model, digest, arch, sizeof arch))) {
        ret = cli_exit_code(rc);
        goto done;
    }
    const gguf_import_opts io = {.layout = have_layout ? &layout : NULL, .v2_as_bf16 = v2};
    if ((rc = gguf_import_resolve(&plan, map, dir, &io, &err))) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    gguf_record_meta m = {0};
    m.model_digest = digest;
    m.arch = arch;
    m.backend = backend ? backend : *gguf_import_map_backend(map) ? gguf_import_map_backend(map)
                                                                  : "import";
    m.precision = precision ? precision : gguf_import_plan_precision(plan);
    m.plan_digest = "";
    m.fault = "";
    if (tokens) {
        m.tokens = tokens;
        m.n_tokens = (uint64_t)n_tokens;
    } else {
        int64_t n;
        m.tokens = gguf_import_plan_tokens(plan, &n);
        m.n_tokens = (uint64_t)n;
    }
    if (cli_verbosity > 0)
        print_plan(plan, dir, map_arg, map_path, &m);
    const gguf_record_opts ro = {.zstd = zstd, .overwrite = true};
    if ((rc = gguf_import_plan_write(plan, out, &m, &ro, &err))) {
        cli_error(tool, &err);
        ret = cli_exit_code(rc);
        goto done;
    }
    if (cli_verbosity > 0) {
        printf("wrote %s (%s%s%s)\n", out, m.n_tokens ? "tokens from " : "no tokens",
               m.n_tokens ? (tokens ? "--tokens" : "the dump") : "",
               *digest ? ", model digest from --model" : ", no model digest");
        if (!m.n_tokens)
            fprintf(stderr, "%s: note: no token ids (--tokens): compare needs --any-tokens\n",
                    tool);
    }
    ret = CLI_EXIT_OK;
done:
    gguf_import_plan_free(plan);
    gguf_import_map_free(map);
    free(tokens);
    return ret;
}
