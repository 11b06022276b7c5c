/* Tensor types: --type, --type-map REGEX=TYPE, and the fallback for rows that are not whole blocks. */
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gen.h"

int gen_types_add_rule(gen_types *ty, const char *spec)
{
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || !eq[1]) {
        fprintf(stderr, "%s: error: --type-map wants REGEX=TYPE, got '%s'\n", GEN_TOOL, spec);
        return -1;
    }
    int type = gguf_type_from_name(eq + 1);
    if (type < 0 || !gguf_type_is_valid((uint32_t)type)) {
        fprintf(stderr, "%s: error: --type-map '%s': unknown tensor type '%s'\n", GEN_TOOL, spec,
                eq + 1);
        return -1;
    }
    gen_type_rule *n = realloc(ty->rules, (ty->n_rules + 1) * sizeof *n);
    if (!n)
        return -1;
    ty->rules = n;
    gen_type_rule *r = &ty->rules[ty->n_rules];
    r->pattern = strndup(spec, (size_t)(eq - spec));
    r->re = malloc(sizeof(regex_t));
    r->type = (uint32_t)type;
    if (!r->pattern || !r->re)
        return -1;
    int rc = regcomp(r->re, r->pattern, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char msg[256];
        regerror(rc, r->re, msg, sizeof msg);
        fprintf(stderr, "%s: error: --type-map '%s': bad regular expression: %s\n", GEN_TOOL,
                spec, msg);
        free(r->re);
        free(r->pattern);
        return -1;
    }
    ty->n_rules++;
    return 0;
}

void gen_types_free(gen_types *ty)
{
    for (uint32_t i = 0; i < ty->n_rules; i++) {
        regfree(ty->rules[i].re);
        free(ty->rules[i].re);
        free(ty->rules[i].pattern);
    }
    free(ty->rules);
    ty->rules = NULL;
    ty->n_rules = 0;
}

static bool fits(uint32_t type, int64_t ne0)
{
    const gguf_type_info *ti = gguf_type_get(type);
    return ti && ne0 % ti->block_size == 0;
}

/* What llama-quantize picks when a row is not whole blocks of the asked type. */
static uint32_t llama_fallback(uint32_t type)
{
    switch (type) {
    case GGUF_TYPE_TQ1_0:
    case GGUF_TYPE_TQ2_0:
        return GGUF_TYPE_Q4_0;
    case GGUF_TYPE_IQ2_XXS:
    case GGUF_TYPE_IQ2_XS:
    case GGUF_TYPE_IQ2_S:
    case GGUF_TYPE_IQ3_XXS:
    case GGUF_TYPE_IQ3_S:
    case GGUF_TYPE_IQ1_S:
    case GGUF_TYPE_IQ1_M:
    case GGUF_TYPE_Q2_K:
    case GGUF_TYPE_Q3_K:
    case GGUF_TYPE_IQ4_XS:
        return GGUF_TYPE_IQ4_NL;
    case GGUF_TYPE_Q4_K:
        return GGUF_TYPE_Q5_0;
    case GGUF_TYPE_Q5_K:
        return GGUF_TYPE_Q5_1;
    case GGUF_TYPE_Q6_K:
        return GGUF_TYPE_Q8_0;
    default:
        return GGUF_TYPE_F16;
    }
}

int gen_types_apply(const gen_types *ty, gen_plan *p, bool quiet)
{
    uint32_t n_fallback = 0;
    const gen_tensor *first = NULL;
    uint32_t first_from = 0;
    for (uint32_t i = 0; i < p->n_t; i++) {
        gen_tensor *t = &p->t[i];
        uint32_t type = t->weight ? ty->weight : t->type;
        for (uint32_t k = 0; k < ty->n_rules; k++) {
            if (regexec(ty->rules[k].re, t->name, 0, NULL, 0) == 0) {
                type = ty->rules[k].type;
                break;
            }
        }
        uint32_t asked = type;
        if (!fits(type, t->ne[0])) {
            type = llama_fallback(type);
            if (!fits(type, t->ne[0]))
                type = GGUF_TYPE_F16;
            n_fallback++;
            if (!first) {
                first = t;
                first_from = asked;
            }
            if (cli_verbosity >= 2)
                fprintf(stderr, "%s: note: %s: ne[0] = %lld is not a multiple of %s's block of %u; "
                                "written as %s\n",
                        GEN_TOOL, t->name, (long long)t->ne[0], gguf_type_name(asked),
                        gguf_type_get(asked)->block_size, gguf_type_name(type));
        }
        t->type = type;
    }
    if (n_fallback && !quiet && cli_verbosity == 1)
        fprintf(stderr,
                "%s: note: %u tensor(s) have rows that are not whole blocks of the asked type and "
                "fall back as llama-quantize does (first: %s, %s -> %s); -v lists them\n",
                GEN_TOOL, n_fallback, first->name, gguf_type_name(first_from),
                gguf_type_name(first->type));
    return 0;
}
