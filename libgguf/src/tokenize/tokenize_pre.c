/*
 * Pre-tokenizers of byte-level BPE: which regexes each tokenizer.ggml.pre value
 * means, their translation from llama.cpp's regex dialect to PCRE2, and the
 * splitter that runs them.
 *
 * The regex strings below are llama.cpp's (src/llama-vocab.cpp,
 * llm_tokenizer_bpe's constructor, and the tokenizer_pre -> pre_type mapping
 * in llama_vocab::impl::load, as of llama.cpp commit 7e6641f8, March 2026),
 * copied as data. llama.cpp does not run them with a standard engine: it
 * rewrites text and regex into one byte per code point ("collapsed"
 * categories) for std::regex, or uses hand-written splitters for a few exact
 * strings (unicode.cpp). tok_regex_translate turns each string into the PCRE2
 * pattern that gives llama.cpp's results; every rule is listed in
 * docs/tokenize.md ("Where llama.cpp differs from a standard regex engine").
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "util/error_lib.h"
#include "tokenize/tokenize_internal.h"

/* ---- the families ---- */

#define RX_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RX_LLAMA3                                                                          \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2                                                                           \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_CJK_DS "[一-龥ࠀ-一가-퟿]+"
#define RX_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

/* LLAMA_VOCAB_PRE_TYPE_DEFAULT */
const tok_family gguf_tok_family_default = {
    "default",
    {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"},
    false, false, false, false,
};
/* GPT2, MPT, OLMO, JAIS, TRILLION, GRANITE_DOCLING */
static const tok_family fam_gpt2 = {"gpt-2", {RX_GPT2}, false, false, false, false};
/* LLAMA3: the regex llama.cpp adapted from tokenizer.json's (?i:...) form */
static const tok_family fam_llama3 = {"llama3", {RX_LLAMA3}, true, true, false, false};
/* DBRX, SMAUG: the llama3 regex without llama3's flags */
static const tok_family fam_dbrx = {"dbrx", {RX_LLAMA3}, false, false, false, false};
/* CHATGLM4: the llama3 regex; llama.cpp drops the default BOS */
static const tok_family fam_chatglm4 = {"glm4", {RX_LLAMA3}, false, false, true, false};
static const tok_family fam_jais2 = {
    "jais-2",
    {RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                     "\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|"
                     "\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"},
    false, false, false, false,
};
static const tok_family fam_deepseek_llm = {
    "deepseek-llm",
    {"[\r\n]",
     /* \u: letters that editors would silently normalise to others */
     "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-"
     "\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-"
     "ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
     "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", RX_CJK_DS, "\\p{N}+"},
    false, false, false, false,
};
/* DEEPSEEK3_LLM, HUNYUAN_DENSE, JOYAI_LLM */
static const tok_family fam_deepseek_v3 = {
    "deepseek-v3",
    {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
     "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
    false, false, false, false,
};
static const tok_family fam_deepseek_coder = {
    "deepseek-coder",
    {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RX_CJK_DS, "\\p{N}"},
    false, false, false, false,
};
static const tok_family fam_falcon = {
    "falcon",
    {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2, "[0-9][0-9][0-9]"},
    false, false, false, false,
};
/* STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA */
static const tok_family fam_starcoder = {"starcoder", {"\\p{N}", RX_GPT2}, false, false, false,
                                         false};
/* QWEN2, STABLELM2, HUNYUAN, SOLAR_OPEN, GROK_2 (the same string) */
static const tok_family fam_qwen2 = {"qwen2", {RX_QWEN2}, false, false, false, false};
static const tok_family fam_qwen35 = {
    "qwen35",
    {RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    false, false, false, false,
};
/* PORO, BLOOM, GPT3_FINNISH */
static const tok_family fam_bloom = {"bloom", {" ?[^(\\s|.,!?…。，、।۔،)]+"}, false, false, false,
                                     false};
static const tok_family fam_viking = {"viking", {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"}, false,
                                      false, false, false};
/* TEKKEN: llama.cpp's rewrite of the \p{Lu}/\p{Ll} classes as [^a-z] / [^A-Z] */
static const tok_family fam_tekken = {
    "tekken",
    {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?"
     "((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    true, true, false, false,
};
/* GPT4O, MINIMAX_M2 */
static const tok_family fam_gpt4o = {
    "gpt-4o",
    {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" RX_CONTRACTIONS
     "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" RX_CONTRACTIONS
     "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    false, false, false, false,
};
/* KIMI_K2: this string selects llama.cpp's hand-written K2 splitter */
static const tok_family fam_kimi_k2 = {"kimi-k2", {"\\p{Han}+"}, false, false, false, true};
static const tok_family fam_seed_coder = {
    "seed-coder",
    {RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    false, false, false, false,
};
static const tok_family fam_bailingmoe = {
    "bailingmoe",
    {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
     " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
    false, false, false, false,
};
static const tok_family fam_exaone_moe = {
    "exaone-moe",
    {RX_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}|"
                     " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
    false, false, false, false,
};
static const tok_family fam_youtu = {
    "youtu",
    {"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" RX_CONTRACTIONS
     "?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" RX_CONTRACTIONS
     "?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    true, false, false, false,
};
static const tok_family fam_chameleon = {
    "chameleon",
    {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
     "[\\p{P}!-/:-@\\[-`{-~]", RX_GPT2},
    false, true, false, false,
};

/* tokenizer.ggml.pre -> family, in llama.cpp's order. Left out: the values whose
 * llama.cpp handling needs more than a family (jina-v2-*, modern-bert: token
 * attributes by name) and the families with digit splitters of their own
 * (afmoe, tiny_aya, superbpe). */
const tok_pre_name gguf_tok_pre_names[] = {
    {"default", &gguf_tok_family_default},
    {"llama3", &fam_llama3},
    {"llama-v3", &fam_llama3},
    {"llama-bpe", &fam_llama3},
    {"falcon3", &fam_llama3},
    {"falcon-h1", &fam_llama3},
    {"pixtral", &fam_llama3},
    {"midm-2.0", &fam_llama3},
    {"lfm2", &fam_llama3},
    {"jina-v5-nano", &fam_llama3},
    {"deepseek-llm", &fam_deepseek_llm},
    {"deepseek-coder", &fam_deepseek_coder},
    {"deepseek-v3", &fam_deepseek_v3},
    {"youtu", &fam_youtu},
    {"falcon", &fam_falcon},
    {"mpt", &fam_gpt2},
    {"starcoder", &fam_starcoder},
    {"gpt-2", &fam_gpt2},
    {"phi-2", &fam_gpt2},
    {"jina-es", &fam_gpt2},
    {"jina-de", &fam_gpt2},
    {"gigachat", &fam_gpt2},
    {"a.x-4.0", &fam_gpt2},
    {"mellum", &fam_gpt2},
    {"jais-2", &fam_jais2},
    {"jina-v1-en", &fam_gpt2},
    {"roberta-bpe", &fam_gpt2},
    {"refact", &fam_starcoder},
    {"command-r", &fam_starcoder},
    {"qwen2", &fam_qwen2},
    {"deepseek-r1-qwen", &fam_qwen2},
    {"kormo", &fam_qwen2},
    {"f2llmv2", &fam_qwen2},
    {"qwen35", &fam_qwen35},
    {"stablelm2", &fam_qwen2},
    {"olmo", &fam_gpt2},
    {"dbrx", &fam_dbrx},
    {"smaug-bpe", &fam_dbrx},
    {"poro-chat", &fam_bloom},
    {"glm4", &fam_chatglm4},
    {"chatglm-bpe", &fam_chatglm4},
    {"viking", &fam_viking},
    {"jais", &fam_gpt2},
    {"tekken", &fam_tekken},
    {"smollm", &fam_starcoder},
    {"codeshell", &fam_starcoder},
    {"bloom", &fam_bloom},
    {"gpt3-finnish", &fam_bloom},
    {"exaone", &fam_starcoder},
    {"exaone4", &fam_gpt2},
    {"exaone-moe", &fam_exaone_moe},
    {"chameleon", &fam_chameleon},
    {"minerva-7b", &fam_starcoder},
    {"megrez", &fam_qwen2},
    {"gpt-4o", &fam_gpt4o},
    {"llama4", &fam_gpt4o},
    {"kanana2", &fam_gpt4o},
    {"trillion", &fam_gpt2},
    {"granite-docling", &fam_gpt2},
    {"bailingmoe", &fam_bailingmoe},
    {"bailingmoe2", &fam_bailingmoe},
    {"llada-moe", &fam_bailingmoe},
    {"seed-coder", &fam_seed_coder},
    {"hunyuan", &fam_qwen2},
    {"hunyuan-dense", &fam_deepseek_v3},
    {"joyai-llm", &fam_deepseek_v3},
    {"kimi-k2", &fam_kimi_k2},
    {"grok-2", &fam_qwen2},
    {"minimax-m2", &fam_gpt4o},
    {"solar-open", &fam_qwen2},
};
const size_t gguf_tok_pre_name_count = sizeof gguf_tok_pre_names / sizeof gguf_tok_pre_names[0];

const char *const *gguf_tokenizer_pre_names(size_t *n)
{
    static const char *const names[] = {
        "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
        "midm-2.0", "lfm2", "jina-v5-nano", "deepseek-llm", "deepseek-coder", "deepseek-v3",
        "youtu", "falcon", "mpt", "starcoder", "gpt-2", "phi-2", "jina-es", "jina-de",
        "gigachat", "a.x-4.0", "mellum", "jais-2", "jina-v1-en", "roberta-bpe", "refact",
        "command-r", "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "qwen35", "stablelm2",
        "olmo", "dbrx", "smaug-bpe", "poro-chat", "glm4", "chatglm-bpe", "viking", "jais",
        "tekken", "smollm", "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4",
        "exaone-moe", "chameleon", "minerva-7b", "megrez", "gpt-4o", "llama4", "kanana2",
        "trillion", "granite-docling", "bailingmoe", "bailingmoe2", "llada-moe", "seed-coder",
        "hunyuan", "hunyuan-dense", "joyai-llm", "kimi-k2", "grok-2", "minimax-m2",
        "solar-open",
    };
    _Static_assert(sizeof names / sizeof names[0] ==
                       sizeof gguf_tok_pre_names / sizeof gguf_tok_pre_names[0],
                   "one name per table entry");
    if (n)
        *n = sizeof names / sizeof names[0];
    return names;
}

/* ---- translation ---- */

/*
 * What llama.cpp's engine does that PCRE2 (UTF + UCP) would not, and how the
 * pattern is changed so that PCRE2 gives llama.cpp's result:
 *
 *  W  \s is llama.cpp's whitespace set (the White_Space property: it has
 *     U+0085 and not U+180E, unlike PCRE2's UCP \s): \s -> \p{White_Space},
 *     \S -> \P{White_Space}. ECMAScript's \d and \w are ASCII: [0-9],
 *     [A-Za-z0-9_]; its '.' stops only at \n and \r.
 *  V  Before matching, llama.cpp replaces every non-ASCII whitespace code point
 *     of the text with U+000B (std::regex knows no other whitespace). So inside
 *     a character class such a code point matches exactly when U+000B would:
 *     the class "[一-龥ࠀ-一가-퟿]" (deepseek-llm/-coder) does not take U+3000
 *     although its range covers it. Classes whose PCRE2 answer differs for any
 *     of those code points are guarded: (?:(?!WS)[...]) or (?:WS|[...]).
 *  T  With \p{...} in a regex, llama.cpp matches on one byte per code point and
 *     spells each category's ASCII members out; for \p{S} it lists "$+<=>^`|"
 *     and leaves out '~'. So in those regexes '~' is not \p{S}: classes with
 *     \p{S} and no literal '~' exclude it ((?:(?!~)[...])), negated ones admit
 *     it ((?:~|[^...])). Only deepseek-v3's regex is affected.
 *  C  For the same reason \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all mean
 *     \p{L} (youtu's regex).
 *  K  "\p{Han}+" is not run: it selects llama.cpp's hand-written Kimi-K2
 *     splitter, which differs from the regex K2's tokenizer.json has (no case
 *     split inside a word, marks are not letters, Han is a fixed list of CJK
 *     blocks). The pattern below does what that splitter does.
 *  $  ECMAScript's $ is the end of the subject only (PCRE2_DOLLAR_ENDONLY).
 *
 * The GPT-2 and llama3 strings also select hand-written splitters in
 * llama.cpp; those give exactly what their regexes give (with W and V), so the
 * regexes run as they are.
 */

#define WS_PROP "\\p{White_Space}"
#define NAWS "[^\\x00-\\x7F\\P{White_Space}]" /* non-ASCII whitespace */
#define HAN_CLASS                                                                     \
    "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{20000}-\\x{2A6DF}\\x{2A700}-\\x{2B73F}" \
    "\\x{2B740}-\\x{2B81F}\\x{2B820}-\\x{2CEAF}\\x{2CEB0}-\\x{2EBEF}\\x{F900}-\\x{FAFF}"  \
    "\\x{2F800}-\\x{2FA1F}]"

/* llama.cpp's unicode_regex_split_custom_kimi_k2 as a pattern. */
static const char kimi_k2_pattern[] =
    HAN_CLASS "+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!" HAN_CLASS ")\\p{L})+" RX_CONTRACTIONS "?|"
    "\\p{N}{1,3}| ?[^" WS_PROP "\\p{L}\\p{N}]+[\\r\\n]*|" WS_PROP "*[\\r\\n]+|" WS_PROP
    "+(?!\\P{White_Space})|" WS_PROP "+";

/* llama.cpp's whitespace set (unicode_set_whitespace), for deciding rule V. */
static const uint32_t naws_list[] = {0x85,   0xA0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003,
                                     0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                                     0x2028, 0x2029, 0x202F, 0x205F, 0x3000};

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static bool is_category(const char *p, size_t n)
{
    static const char *const cats[] = {"L", "N", "P", "M", "S", "Lu", "Ll", "Lt", "Lm", "Lo"};
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
        if (strlen(cats[i]) == n && !memcmp(p, cats[i], n))
            return true;
    return false;
}

/* Does the regex use the categories that make llama.cpp collapse the text? */
static bool uses_collapse(const char *src)
{
    for (const char *p = strstr(src, "\\p{"); p; p = strstr(p + 1, "\\p{")) {
        const char *e = strchr(p + 3, '}');
        if (e && is_category(p + 3, (size_t)(e - p - 3)))
            return true;
    }
    return false;
}

/* Does PCRE2 match the one-code-point subject cp with the class `cls`? */
static int class_matches(const pcre2_code *code, pcre2_match_data *md, uint32_t cp)
{
    char s[4];
    const size_t n = tok_utf8_encode(cp, s);
    return pcre2_match(code, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 0;
}

/* Rule V: 0 when PCRE2 already treats every non-ASCII whitespace code point
 * as llama.cpp does (like U+000B), else 1 (guard with WS) or 2 (guard without
 * WS); -1 when the class does not compile. */
static int class_ws_guard(const char *cls, size_t n)
{
    sbuf b = {0};
    sb_puts(&b, "^");
    sb_put(&b, cls, n);
    sb_puts(&b, "$");
    if (b.oom)
        return -1;
    int e;
    PCRE2_SIZE eo;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)b.p, b.n, PCRE2_UTF | PCRE2_UCP, &e, &eo, NULL);
    free(b.p);
    if (!code)
        return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    if (!md) {
        pcre2_code_free(code);
        return -1;
    }
    const int vt = class_matches(code, md, 0x0B);
    int guard = 0;
    for (size_t i = 0; i < sizeof naws_list / sizeof naws_list[0]; i++)
        if (class_matches(code, md, naws_list[i]) != vt)
            guard = vt ? 1 : 2;
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return guard;
}

/* The code point an escape or literal inside a class stands for, or -1 when it
 * is a set (\p{..}, \s ...). *adv is the length consumed. */
static int64_t class_atom(const char *p, size_t *adv)
{
    if (p[0] != '\\') {
        *adv = 0;
        const uint32_t cp = tok_utf8_decode((const unsigned char *)p, adv);
        return cp;
    }
    *adv = 2;
    switch (p[1]) {
    case 'r': return '\r';
    case 'n': return '\n';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case 'p':
    case 'P': {
        const char *e = strchr(p, '}');
        *adv = e ? (size_t)(e - p) + 1 : 2;
        return -1;
    }
    case 'x': {
        if (p[2] == '{') {
            const char *e = strchr(p, '}');
            *adv = e ? (size_t)(e - p) + 1 : 2;
            return strtol(p + 3, NULL, 16);
        }
        char h[3] = {p[2], p[2] ? p[3] : 0, 0};
        *adv = 4;
        return strtol(h, NULL, 16);
    }
    case 's':
    case 'S':
    case 'd':
    case 'D':
    case 'w':
    case 'W': return -1;
    default: {
        size_t l = 0;
        const uint32_t cp = tok_utf8_decode((const unsigned char *)p + 1, &l);
        *adv = 1 + l;
        return cp;
    }
    }
}

/* Translate the class starting at src[*i] == '['; appends to out. */
static int translate_class(const char *src, size_t *i, bool collapsed, sbuf *out)
{
    size_t p = *i + 1;
    const bool neg = src[p] == '^';
    if (neg)
        p++;
    sbuf body = {0};
    bool has_s = false, has_tilde = false, first = true;
    int64_t prev = -2; /* last single code point, for ranges */
    for (;;) {
        const char c = src[p];
        if (!c) {
            free(body.p);
            return -1;
        }
        if (c == ']' && !first)
            break;
        first = false;
        if (c == '-' && prev >= 0 && src[p + 1] && src[p + 1] != ']') {
            size_t adv;
            const int64_t hi = class_atom(src + p + 1, &adv);
            if (hi >= 0 && prev <= '~' && hi >= '~')
                has_tilde = true;
            sb_put(&body, src + p, 1 + adv);
            p += 1 + adv;
            prev = -2;
            continue;
        }
        if (c == '\\' && (src[p + 1] == 's' || src[p + 1] == 'S')) {
            sb_puts(&body, src[p + 1] == 's' ? WS_PROP : "\\P{White_Space}");
            p += 2;
            prev = -2;
            continue;
        }
        if (c == '\\' && (src[p + 1] == 'd' || src[p + 1] == 'w')) {
            sb_puts(&body, src[p + 1] == 'd' ? "0-9" : "A-Za-z0-9_");
            p += 2;
            prev = -2;
            continue;
        }
        if (c == '\\' && (src[p + 1] == 'D' || src[p + 1] == 'W')) {
            free(body.p);
            return -1; /* not in any regex of the table */
        }
        if (c == '\\' && src[p + 1] == 'p' && src[p + 2] == '{') {
            const char *e = strchr(src + p, '}');
            if (!e) {
                free(body.p);
                return -1;
            }
            const size_t nlen = (size_t)(e - (src + p + 3));
            if (collapsed && nlen == 2 && src[p + 3] == 'L')
                sb_puts(&body, "\\p{L}"); /* rule C */
            else
                sb_put(&body, src + p, (size_t)(e - (src + p)) + 1);
            if (collapsed && nlen == 1 && src[p + 3] == 'S')
                has_s = true;
            p = (size_t)(e - src) + 1;
            prev = -2;
            continue;
        }
        size_t adv;
        const int64_t cp = class_atom(src + p, &adv);
        if (cp == '~')
            has_tilde = true;
        sb_put(&body, src + p, adv);
        p += adv;
        prev = cp;
    }
    *i = p + 1; /* past ']' */

    sbuf cls = {0};
    sb_puts(&cls, neg ? "[^" : "[");
    sb_put(&cls, body.p ? body.p : "", body.n);
    sb_puts(&cls, "]");
    free(body.p);
    if (cls.oom)
        return -1;
    const int guard = class_ws_guard(cls.p, cls.n);
    if (guard < 0) {
        free(cls.p);
        return -1;
    }
    const bool tilde = has_s && !has_tilde; /* rule T */
    sb_puts(out, "(?:");
    if (guard == 1)
        sb_puts(out, NAWS "|");
    else if (guard == 2)
        sb_puts(out, "(?!" NAWS ")");
    if (tilde)
        sb_puts(out, neg ? "~|" : "(?!~)");
    sb_put(out, cls.p, cls.n);
    sb_puts(out, ")");
    free(cls.p);
    return 0;
}

int tok_regex_translate(const char *src, char **out)
{
    *out = NULL;
    if (!strcmp(src, "\\p{Han}+")) { /* rule K */
        *out = strdup(kimi_k2_pattern);
        return *out ? 0 : -1;
    }
    const bool collapsed = uses_collapse(src);
    sbuf b = {0};
    for (size_t i = 0; src[i];) {
        const char c = src[i];
        if (c == '[') {
            if (translate_class(src, &i, collapsed, &b)) {
                free(b.p);
                return -1;
            }
            continue;
        }
        if (c == '.') {
            sb_puts(&b, "[^\\n\\r]");
            i++;
            continue;
        }
        if (c != '\\') {
            sb_put(&b, src + i, 1);
            i++;
            continue;
        }
        const char e = src[i + 1];
        if (e == 's' || e == 'S') {
            sb_puts(&b, e == 's' ? WS_PROP : "\\P{White_Space}");
            i += 2;
        } else if (e == 'd' || e == 'D') {
            sb_puts(&b, e == 'd' ? "[0-9]" : "[^0-9]");
            i += 2;
        } else if (e == 'w' || e == 'W') {
            sb_puts(&b, e == 'w' ? "[A-Za-z0-9_]" : "[^A-Za-z0-9_]");
            i += 2;
        } else if ((e == 'p' || e == 'P') && src[i + 2] == '{') {
            const char *end = strchr(src + i, '}');
            if (!end) {
                free(b.p);
                return -1;
            }
            const size_t nlen = (size_t)(end - (src + i + 3));
            if (collapsed && e == 'p' && nlen == 2 && src[i + 3] == 'L')
                sb_puts(&b, "\\p{L}"); /* rule C */
            else if (collapsed && e == 'p' && nlen == 1 && src[i + 3] == 'S')
                sb_puts(&b, "(?:(?!~)\\p{S})"); /* rule T */
            else
                sb_put(&b, src + i, (size_t)(end - (src + i)) + 1);
            i = (size_t)(end - src) + 1;
        } else if (e) {
            sb_put(&b, src + i, 2);
            i += 2;
        } else {
            free(b.p);
            return -1;
        }
    }
    if (b.oom || !b.p) {
        free(b.p);
        return -1;
    }
    *out = b.p;
    return 0;
}

/* ---- compiled regexes and the splitter ---- */

struct tok_regex {
    pcre2_code *code;
    bool jit;
};

struct tok_matcher {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *stack;
};

int tok_regex_compile_raw(tok_regex **out, const char *pattern, const char *path,
                          gguf_error *err)
{
    *out = NULL;
    tok_regex *r = calloc(1, sizeof *r);
    if (!r)
        return gguf_fail(err, GGUF_E_NOMEM, GGUF_NO_OFFSET, "%s: tokenizer regex", path);
    int e;
    PCRE2_SIZE eo;
    r->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &e, &eo, NULL);
    if (!r->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(e, msg, sizeof msg);
        free(r);
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.pre: regex does not compile with PCRE2 (%s at %zu)",
                         path, (const char *)msg, (size_t)eo);
    }
    /* JIT when the platform allows it (it may not, e.g. under W^X policies). */
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    *out = r;
    return 0;
}

int tok_regex_compile(tok_regex **out, const char *src, const char *path, gguf_error *err)
{
    char *pattern;
    if (tok_regex_translate(src, &pattern))
        return gguf_fail(err, GGUF_E_UNSUPPORTED, GGUF_NO_OFFSET,
                         "%s: tokenizer.ggml.pre: cannot translate the regex '%s'", path, src);
    const int rc = tok_regex_compile_raw(out, pattern, path, err);
    free(pattern);
    return rc;
}

void tok_regex_free(tok_regex *r)
{
    if (!r)
        return;
    pcre2_code_free(r->code);
    free(r);
}

int tok_matcher_create(tok_matcher **out)
{
    tok_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return GGUF_E_NOMEM;
    m->md = pcre2_match_data_create(16, NULL);
    m->mctx = pcre2_match_context_create(NULL);
    /* Repeated groups (tekken, gpt-4o) keep a frame per letter on the JIT
     * stack: allow long words. */
    m->stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    if (!m->md || !m->mctx || !m->stack) {
        tok_matcher_free(m);
        return GGUF_E_NOMEM;
    }
    pcre2_jit_stack_assign(m->mctx, NULL, m->stack);
    *out = m;
    return 0;
}

void tok_matcher_free(tok_matcher *m)
{
    if (!m)
        return;
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    pcre2_jit_stack_free(m->stack);
    free(m);
}

static int run_match(const tok_regex *r, tok_matcher *m, const char *s, size_t len, size_t off,
                     uint32_t opts)
{
    /* The text was checked for valid UTF-8 once, before any regex. */
    if (r->jit)
        return pcre2_jit_match(r->code, (PCRE2_SPTR)s, len, off, opts, m->md, m->mctx);
    return pcre2_match(r->code, (PCRE2_SPTR)s, len, off, opts | PCRE2_NO_UTF_CHECK, m->md,
                       m->mctx);
}

/*
 * std::regex_iterator's walk, which llama.cpp's splitter follows: search from
 * the end of the last match; after an empty match, first try a non-empty
 * match at the same place, else move one character on. Text between matches
 * is a piece of its own.
 */
int tok_regex_scan(const tok_regex *r, tok_matcher *m, const char *s, size_t len,
                   tok_group_fn fn, void *ctx)
{
    size_t off = 0, gap = 0;
    uint32_t opts = 0;
    while (off <= len) {
        const int rc = run_match(r, m, s, len, off, opts);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (!opts || off >= len)
                break;
            opts = 0; /* no non-empty match here: step over one character */
            off += tok_utf8_len((unsigned char)s[off]);
            continue;
        }
        if (rc < 0)
            return GGUF_E_LIMIT;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        const size_t ms = ov[0], me = ov[1];
        int group = 1;
        for (int g = 1; g < rc; g++)
            if (ov[2 * g] != PCRE2_UNSET) {
                group = g;
                break;
            }
        int ret;
        if (ms > gap && (ret = fn(ctx, 0, gap, ms - gap)))
            return ret;
        if (me > ms && (ret = fn(ctx, group, ms, me - ms)))
            return ret;
        gap = me;
        off = me;
        opts = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    }
    int ret;
    if (gap < len && (ret = fn(ctx, 0, gap, len - gap)))
        return ret;
    return 0;
}

typedef struct split_ctx {
    tok_emit_fn emit;
    void *ctx;
} split_ctx;

static int split_adapter(void *ctx, int group, size_t off, size_t n)
{
    (void)group;
    const split_ctx *c = ctx;
    return c->emit(c->ctx, off, n);
}

int tok_regex_split(const tok_regex *r, tok_matcher *m, const char *s, size_t len,
                    tok_emit_fn emit, void *ctx)
{
    split_ctx c = {emit, ctx};
    return tok_regex_scan(r, m, s, len, split_adapter, &c);
}
