/* gguf-inspect: what is in a GGUF file or split set, as text or JSON. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/tokenize.h"
#include "inspect.h"

enum {
    OPT_JSON = 256,
    OPT_FILTER,
    OPT_META,
    OPT_TENSORS,
    OPT_HASH,
    OPT_THREADS,
    OPT_TOKENIZE,
    OPT_DETOKENIZE,
    OPT_BOS,
    OPT_NO_BOS,
    OPT_EOS,
    OPT_NO_EOS,
    OPT_NO_SPECIAL,
};

static const cli_opt options[] = {
    {OPT_JSON, "json", 0, NULL, "machine-readable output (schema: docs/gguf-inspect.md)"},
    {OPT_FILTER, "filter", 1, "REGEX", "only tensors and metadata keys whose name matches REGEX "
     "(POSIX extended, searched anywhere in the name)"},
    {OPT_META, "metadata-only", 0, NULL, "only the header and metadata"},
    {OPT_TENSORS, "tensors-only", 0, NULL, "only the tensor table"},
    {OPT_HASH, "hash", 0, NULL, "XXH3-128 of each tensor, of each part and of the whole model"},
    {OPT_THREADS, "threads", 1, "N", "threads for --hash (default: one per CPU it may use)"},
    {OPT_TOKENIZE, "tokenize", 1, "TEXT",
     "token ids and pieces of TEXT (UTF-8; '-' reads standard input) with the model's tokenizer"},
    {OPT_DETOKENIZE, "detokenize", 1, "IDS",
     "text of the ids (\"1,2,3\", \"1 2 3\" or \"[1, 2, 3]\"; '-' reads standard input)"},
    {OPT_BOS, "bos", 0, NULL, "--tokenize: add BOS (default: as the metadata says)"},
    {OPT_NO_BOS, "no-bos", 0, NULL, "--tokenize: do not add BOS"},
    {OPT_EOS, "eos", 0, NULL, "--tokenize: add EOS (SEP for 'bert'; default: as the metadata says)"},
    {OPT_NO_EOS, "no-eos", 0, NULL, "--tokenize: do not add EOS"},
    {OPT_NO_SPECIAL, "no-special", 0, NULL,
     "special tokens are plain text: --tokenize does not match control tokens in TEXT, "
     "--detokenize hides them"},
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
    "  gguf-inspect --hash --json model.gguf > manifest.json\n"
    "  gguf-inspect model.gguf --tokenize 'Hello world'\n"
    "  gguf-inspect model.gguf --tokenize - --no-bos --json < prompt.txt\n"
    "  gguf-inspect model.gguf --detokenize 9906,1917\n",
};

bool inspect_match(const inspect_opts *o, const char *name)
{
    return cli_filter_test(&o->filter, name);
}

int main(int argc, char **argv)
{
    inspect_opts o = {0};
    inspect_tok_opts to = {.add_bos = GGUF_TOK_AUTO, .add_eos = GGUF_TOK_AUTO};
    bool tok_flags = false;
    int c, optind_ = 1;
    const char *arg;
    while ((c = cli_next(&spec, argc, argv, &arg, &optind_)) != -1) {
        switch (c) {
        case OPT_JSON: o.json = true; break;
        case OPT_META: o.metadata_only = true; break;
        case OPT_TENSORS: o.tensors_only = true; break;
        case OPT_HASH: o.hash = true; break;
        case OPT_TOKENIZE: to.tokenize = arg; break;
        case OPT_DETOKENIZE: to.detokenize = arg; break;
        case OPT_BOS: to.add_bos = 1, tok_flags = true; break;
        case OPT_NO_BOS: to.add_bos = 0, tok_flags = true; break;
        case OPT_EOS: to.add_eos = 1, tok_flags = true; break;
        case OPT_NO_EOS: to.add_eos = 0, tok_flags = true; break;
        case OPT_NO_SPECIAL: to.no_special = true; break;
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
            if (cli_filter_set(&o.filter, spec.tool, arg))
                return CLI_EXIT_USAGE;
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
    const bool tok = to.tokenize || to.detokenize;
    if (to.tokenize && to.detokenize) {
        cli_errorf(spec.tool, "--tokenize and --detokenize exclude each other");
        return CLI_EXIT_USAGE;
    }
    if (tok && (o.metadata_only || o.tensors_only || o.hash || o.filter.set)) {
        cli_errorf(spec.tool, "--%s does not combine with --metadata-only, --tensors-only, "
                              "--hash or --filter",
                   to.tokenize ? "tokenize" : "detokenize");
        return CLI_EXIT_USAGE;
    }
    if ((tok_flags && !to.tokenize) || (to.no_special && !tok)) {
        cli_errorf(spec.tool, "--bos, --no-bos, --eos and --no-eos go with --tokenize, "
                              "--no-special with --tokenize or --detokenize");
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
    to.json = o.json;
    if (tok) {
        ret = inspect_tok_run(spec.tool, argv[optind_], s, &to);
        goto flush;
    }
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
    if (!o.json) {
        inspect_print_text(stdout, s, &o, &d);
    } else if (inspect_print_json(stdout, s, &o, &d) != 0) {
        cli_errorf(spec.tool, "cannot write the JSON report");
        ret = CLI_EXIT_ENV;
        goto flush;
    }
    if (o.filter.set) {
        /* the names the filter looked at: keys, tensors or both */
        const gguf_file *meta = gguf_set_meta(s);
        long long n_names = 0;
        if (!o.tensors_only)
            for (int64_t i = 0; i < gguf_file_kv_count(meta); i++, n_names++)
                cli_filter_match(&o.filter, gguf_file_kv_at(meta, i)->key);
        if (!o.metadata_only)
            for (int64_t i = 0; i < gguf_set_tensor_count(s); i++, n_names++)
                cli_filter_match(&o.filter, gguf_set_tensor_at(s, i)->name);
        fflush(stdout);
        cli_filter_warn_empty(&o.filter, spec.tool, n_names);
    }
flush:
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_errorf(spec.tool, "cannot write the output");
        ret = CLI_EXIT_ENV;
    }
done:
    free(d.tensors);
    free(d.files);
    gguf_set_free(s);
    cli_filter_free(&o.filter);
    return ret;
}
