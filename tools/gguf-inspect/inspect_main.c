/* gguf-inspect: what is in a GGUF file or split set, as text or JSON. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "inspect.h"

enum { OPT_JSON = 256, OPT_FILTER, OPT_META, OPT_TENSORS, OPT_HASH, OPT_THREADS };

static const cli_opt options[] = {
    {OPT_JSON, "json", 0, NULL, "machine-readable output (schema: docs/gguf-inspect.md)"},
    {OPT_FILTER, "filter", 1, "REGEX", "only tensors and metadata keys matching REGEX (POSIX ERE)"},
    {OPT_META, "metadata-only", 0, NULL, "only the header and metadata"},
    {OPT_TENSORS, "tensors-only", 0, NULL, "only the tensor table"},
    {OPT_HASH, "hash", 0, NULL, "XXH3-128 of each tensor, of each part and of the whole model"},
    {OPT_THREADS, "threads", 1, "N", "threads for --hash (default: all cores)"},
    {0, NULL, 0, NULL, NULL},
};

static const cli_spec spec = {
    "gguf-inspect",
    "[OPTIONS] MODEL.gguf",
    "Show the header, metadata and tensors of a GGUF file, or of a whole split set when\n"
    "given any of its parts (NAME-00003-of-00010.gguf). Only the header is read unless\n"
    "--hash is given.",
    options,
    "  gguf-inspect model.gguf\n"
    "  gguf-inspect --json --tensors-only model-00001-of-00010.gguf\n"
    "  gguf-inspect --filter 'blk\\.0\\.' model.gguf\n"
    "  gguf-inspect --hash --json model.gguf > manifest.json\n",
};

bool inspect_match(const inspect_opts *o, const char *name)
{
    return !o->have_filter || regexec(&o->filter, name, 0, NULL, 0) == 0;
}

int main(int argc, char **argv)
{
    inspect_opts o = {0};
    int c, optind_ = 1;
    const char *arg;
    while ((c = cli_next(&spec, argc, argv, &arg, &optind_)) != -1) {
        switch (c) {
        case OPT_JSON: o.json = true; break;
        case OPT_META: o.metadata_only = true; break;
        case OPT_TENSORS: o.tensors_only = true; break;
        case OPT_HASH: o.hash = true; break;
        case OPT_THREADS: {
            uint64_t n;
            if (cli_parse_u64(arg, &n) || n < 1 || n > 256) {
                cli_errorf(spec.tool, "--threads: '%s' is not a number from 1 to 256", arg);
                return CLI_EXIT_USAGE;
            }
            o.threads = (int)n;
            break;
        }
        case OPT_FILTER:
            if (o.have_filter)
                regfree(&o.filter);
            if (regcomp(&o.filter, arg, REG_EXTENDED | REG_NOSUB) != 0) {
                cli_errorf(spec.tool, "--filter: invalid regular expression '%s'", arg);
                return CLI_EXIT_USAGE;
            }
            o.have_filter = true;
            break;
        }
    }
    if (optind_ != argc - 1) {
        cli_errorf(spec.tool, "expected one MODEL.gguf argument (see --help)");
        return CLI_EXIT_USAGE;
    }
    if (o.metadata_only && o.tensors_only) {
        cli_errorf(spec.tool, "--metadata-only and --tensors-only exclude each other");
        return CLI_EXIT_USAGE;
    }
    gguf_error err;
    gguf_set *s = NULL;
    int rc = gguf_set_open(&s, argv[optind_], NULL, &err);
    if (rc) {
        cli_error(spec.tool, &err);
        return cli_exit_code(rc);
    }
    /* Vocabularies make the JSON tens of MB: write it in large blocks. */
    static char outbuf[1 << 20];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    inspect_digests d = {0};
    int ret = CLI_EXIT_OK;
    if (o.hash) {
        int64_t n = gguf_set_tensor_count(s);
        uint32_t parts = gguf_set_part_count(s);
        d.tensors = calloc((size_t)n + 1, sizeof *d.tensors);
        d.files = calloc(parts, sizeof *d.files);
        if (!d.tensors || !d.files) {
            cli_errorf(spec.tool, "out of memory");
            ret = CLI_EXIT_ENV;
            goto done;
        }
        rc = gguf_digest_set(s, d.tensors, &d.model, o.threads, NULL, &err);
        if (rc) {
            cli_error(spec.tool, &err);
            ret = cli_exit_code(rc);
            goto done;
        }
        for (uint32_t i = 0; i < parts; i++)
            gguf_digest_file(gguf_set_part(s, i), &d.files[i]);
    }
    if (o.json)
        inspect_print_json(stdout, s, &o, &d);
    else
        inspect_print_text(stdout, s, &o, &d);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_errorf(spec.tool, "cannot write the output");
        ret = CLI_EXIT_ENV;
    }
done:
    free(d.tensors);
    free(d.files);
    gguf_set_close(s);
    if (o.have_filter)
        regfree(&o.filter);
    return ret;
}
