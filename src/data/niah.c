/* Single needle in a haystack, byte-level (after RULER's S-NIAH
 * and the MIRAS paper's table): pass key, word (or UUID-like) and real-text
 * flavours. The layout is in tasks.h. Draws per sample, in order: the key's
 * adjective and noun, the value (7 digits: one below(9000000); a word: one
 * below(words); a UUID: 32 below(16)), then the place (noise: the sentence
 * index; text: the window's start and a uniform depth). */
#include <stdio.h>
#include <string.h>

#include "tasks_internal.h"

static const char *const noise[] = {"The grass is green.", "The sky is blue.",
                                    "The sun is yellow.", "Here we go.",
                                    "There and back again."};
enum { N_NOISE = sizeof noise / sizeof noise[0], SNAP_BACK = 64 };

static const char *const adjectives[] = {
    "amber", "brave", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly",
    "keen", "lucky", "mellow", "narrow", "odd", "quiet", "rapid", "silent", "tidy", "vivid",
    "wild", "young", "zesty", "bold", "crisp", "dizzy", "fuzzy", "grumpy", "humble", "loyal",
    "misty", "noble"};
static const char *const nouns[] = {
    "otter", "falcon", "harbor", "lantern", "meadow", "canyon", "violin", "pebble", "comet",
    "walrus", "orchid", "glacier", "tunnel", "parrot", "beacon", "marble", "anchor", "badger",
    "cobalt", "dragon", "ember", "fossil", "gazebo", "heron", "island", "jigsaw", "kettle",
    "ladder", "magnet", "nectar", "oyster", "puzzle"};
/* Word values: none of them occurs in the noise sentences. */
static const char *const words[] = {
    "apricot", "bicycle", "cinnamon", "dolphin", "elephant", "flamingo", "giraffe", "hammock",
    "igloo", "jasmine", "kangaroo", "lemonade", "mushroom", "noodle", "octopus", "pumpkin",
    "quilt", "raccoon", "saxophone", "tornado", "umbrella", "volcano", "waffle", "xylophone",
    "yogurt", "zeppelin", "avocado", "blueberry", "cactus", "dandelion", "espresso", "firefly"};
#define COUNT(a) ((uint64_t)(sizeof a / sizeof a[0]))

mi_niah_config mi_niah_config_default(void)
{
    return (mi_niah_config){.kind = MI_NIAH_PASSKEY, .length = 1024};
}

int mi_niah_check(const mi_niah_config *c)
{
    if (!c) return mi_error_set("niah: NULL config"), -1;
    if (c->kind != MI_NIAH_PASSKEY && c->kind != MI_NIAH_WORD && c->kind != MI_NIAH_TEXT)
        return mi_error_set("niah: unknown kind %d (passkey 0, word 1, text 2)", (int)c->kind), -1;
    if (c->length < 1 || c->length > MI_TEXT_MAX_BYTES)
        return mi_error_set("niah: length %lld out of range [1, %lld]", (long long)c->length,
                            (long long)MI_TEXT_MAX_BYTES), -1;
    if (c->kind == MI_NIAH_TEXT && (!c->text || c->text_size < 1))
        return mi_error_set("niah: the text flavour needs a text (text and text_size)"), -1;
    return 0;
}

/* The noise stream "s0 s1 … " (each sentence and one space) from byte `at`. */
static int64_t noise_sentence_bytes(int64_t i) { return (int64_t)strlen(noise[i % N_NOISE]) + 1; }

static void noise_fill(char *dst, int64_t n)
{
    for (int64_t i = 0, w = 0; w < n; i++) {
        const char *s = noise[i % N_NOISE];
        for (size_t k = 0; s[k] && w < n; k++) dst[w++] = s[k];
        if (w < n) dst[w++] = ' ';
    }
}

static bool is_space(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

int mi_niah_example(const mi_niah_config *c, uint64_t seed, mi_split split, int64_t index,
                    mi_niah_sample *out)
{
    if (mi_niah_check(c) != 0) return -1;
    if (!out) return mi_error_set("niah: NULL output"), -1;
    if (index < 0) return mi_error_set("niah: sample index %lld < 0", (long long)index), -1;
    mi_niah_sample s = {.length = c->length, .sentence = -1};
    mi_rng r;
    mi_task_rng(&r, seed, split, index);
    snprintf(s.key, sizeof s.key, "%s-%s", adjectives[mi_rng_below(&r, COUNT(adjectives))],
             nouns[mi_rng_below(&r, COUNT(nouns))]);
    if (c->kind == MI_NIAH_WORD && c->uuid) {
        static const char hex[] = "0123456789abcdef";
        int w = 0;
        for (int i = 0; i < 32; i++) {
            if (i == 8 || i == 12 || i == 16 || i == 20) s.answer[w++] = '-';
            s.answer[w++] = hex[mi_rng_below(&r, 16)];
        }
        s.answer[w] = '\0';
    } else if (c->kind == MI_NIAH_WORD) {
        snprintf(s.answer, sizeof s.answer, "%s", words[mi_rng_below(&r, COUNT(words))]);
    } else {
        snprintf(s.answer, sizeof s.answer, "%llu",
                 (unsigned long long)(1000000 + mi_rng_below(&r, 9000000)));
    }
    char needle[160], question[192];
    int nn = snprintf(needle, sizeof needle, "The special magic number for %s is: %s%c", s.key,
                      s.answer, MI_NIAH_TERMINATOR);
    int nq = snprintf(question, sizeof question,
                      "\nWhat is the special magic number for %s? The special magic number "
                      "for %s is: ", s.key, s.key);
    int64_t H = c->length - nq; /* haystack bytes, the needle and its space included */
    if (H < nn + 1)
        return mi_error_set("niah: length %lld cannot hold the needle (%d bytes and a space) and "
                            "the question (%d bytes); needs at least %d",
                            (long long)c->length, nn, nq, nn + 1 + nq), -1;
    s.needle_length = nn;

    s.prompt = mi_scope_current() ? mi_scope_alloc(mi_scope_current(), (size_t)c->length + 1) : NULL;
    if (!s.prompt) return mi_error_set("niah: no scope or out of memory for %lld bytes",
                                       (long long)c->length), -1;
    char *p = s.prompt;
    if (c->kind != MI_NIAH_TEXT) {
        /* Sentence k is a place when the needle and its space fit after the
         * k sentences before it: offset(k) + nn + 1 ≤ H. */
        int64_t places = 0, off = 0;
        while (off + nn + 1 <= H) {
            places++;
            off += noise_sentence_bytes(places - 1);
        }
        int64_t k = (int64_t)mi_rng_below(&r, (uint64_t)places);
        int64_t at = 0;
        for (int64_t i = 0; i < k; i++) at += noise_sentence_bytes(i);
        noise_fill(p, at);
        memcpy(p + at, needle, (size_t)nn);
        p[at + nn] = ' ';
        /* The stream goes on from sentence k after the needle. */
        int64_t rest = H - at - nn - 1, w = 0;
        for (int64_t i = k; w < rest; i++) {
            const char *t = noise[i % N_NOISE];
            for (size_t j = 0; t[j] && w < rest; j++) p[at + nn + 1 + w++] = t[j];
            if (w < rest) p[at + nn + 1 + w++] = ' ';
        }
        s.sentence = k;
        s.needle_offset = at;
    } else {
        int64_t W = H - nn - 1; /* bytes of real text */
        if (c->text_size < W)
            return mi_error_set("niah: the text has %lld bytes, fewer than the %lld this length "
                                "needs", (long long)c->text_size, (long long)W), -1;
        int64_t start = (int64_t)mi_rng_below(&r, (uint64_t)(c->text_size - W + 1));
        int64_t at = (int64_t)(mi_rng_uniform(&r) * (double)W);
        if (at > W) at = W;
        for (int64_t back = 0; back < SNAP_BACK && at - back > 0; back++)
            if (is_space(c->text[start + at - back - 1])) {
                at -= back;
                break;
            }
        memcpy(p, c->text + start, (size_t)at);
        memcpy(p + at, needle, (size_t)nn);
        p[at + nn] = ' ';
        memcpy(p + at + nn + 1, c->text + start + at, (size_t)(W - at));
        s.needle_offset = at;
    }
    memcpy(p + H, question, (size_t)nq);
    p[c->length] = '\0';
    s.depth = (double)s.needle_offset / (double)H;

    s.tokens = mi_tensor_new(MI_I64, MI_SHAPE(c->length));
    if (!s.tokens) return mi_error_prefix("niah"), -1;
    for (int64_t i = 0; i < c->length; i++) ((int64_t *)s.tokens->data)[i] = (uint8_t)p[i];
    *out = s;
    return 0;
}

int64_t mi_niah_answer_bytes(const mi_niah_config *c)
{
    if (!c) return mi_error_set("niah: NULL config"), -1;
    if (c->kind != MI_NIAH_PASSKEY && c->kind != MI_NIAH_WORD && c->kind != MI_NIAH_TEXT)
        return mi_error_set("niah: unknown kind %d (passkey 0, word 1, text 2)", (int)c->kind), -1;
    size_t longest = 7; /* a pass key */
    if (c->kind == MI_NIAH_WORD && c->uuid) longest = 36;
    else if (c->kind == MI_NIAH_WORD)
        for (uint64_t i = 0; i < COUNT(words); i++)
            if (strlen(words[i]) > longest) longest = strlen(words[i]);
    return (int64_t)longest + 1;
}

/* Greedy generation is scored up to the needle's terminator (RULER's S-NIAH
 * as the MIRAS paper scores it): the continuation must be the answer's bytes
 * and then the terminator. No answer holds a terminator, so the first one in
 * the continuation ends what is judged and nothing after it counts. */
bool mi_niah_exact_match(const mi_niah_sample *s, const char *generated, size_t n)
{
    if (!s || !generated) return false;
    size_t m = strlen(s->answer);
    return m > 0 && n > m && memcmp(generated, s->answer, m) == 0 &&
           generated[m] == MI_NIAH_TERMINATOR;
}
