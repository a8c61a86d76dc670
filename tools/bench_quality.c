/* miras-bench quality: how well each model learns at a fixed budget with
 * fixed seeds (docs/bench.md "quality"). Every case is a real miras-train run,
 * one after another, in a child process:
 *
 *   miras-train <the suite's arguments> --model VARIANT [--set ...] --out DIR/<suite>-<variant>
 *
 * with its output in DIR/<suite>-<variant>/train.out; the result is the last
 * row of that run's log.csv, read by column name (val_loss, val_acc,
 * train_loss), and the case's wall time. A run that fails (NaN loss, out of
 * memory, a bad override) is a row with status "failed" and miras-train's
 * last line, never an abort. One JSON line per case, then a table per suite
 * and an SVG bar chart DIR/quality-<suite>.svg. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_quality.h"
#include "common.h"

extern char **environ;

/* ================================================================ the suites
 * One entry per suite; tune a config by editing its line. A suite names the
 * miras-train arguments (everything but --model, --data and --out), the
 * log.csv column it is judged by ("val_loss": lower is better; "val_acc":
 * higher is better), its text, its default variants, the baseline row of
 * the Δ column, a floor for every case (0: none) and rules that add --set
 * overrides or a floor to some variants.
 *
 * data: NULL (a synthetic task), DATA_TEXT (--data, else
 * ../shared/data/tinyshakespeare.txt; the suite is skipped when absent) or a
 * file of the checkout (tests/data/quality_text.txt: always there, and frozen,
 * so that the quick suite's floors do not move when the documentation does).
 * variants: comma list of mixer specs; "presets" stands for every MIRAS
 * preset of the registry (mi_preset_at), in its order.
 * rules: `match` is a variant, "@miras" (a MIRAS preset, or samba over
 * one), "@mlp" (the same with an MLP memory) or "*"; `set` is a
 * space-separated list of KEY=VALUE, each given as --set; every matching
 * rule applies in order (a later floor wins). A floor holds for the suite's
 * own steps; --steps N leaves it in place.
 * The small models (d_model 32) run on one thread: at these sizes OpenMP's
 * fork/join costs more than it gains (10-20x slower on 2 busy cores), and
 * one thread makes a result independent of the machine's core count.
 * --threads N given to miras-bench comes later on the command line and wins. */
#define DATA_TEXT "@text"
#define MAX_SUITE_ARGS 40
#define MAX_RULES 32

typedef struct quality_rule {
    const char *match, *set;
    double floor; /* 0: none */
} quality_rule;

typedef struct quality_suite {
    const char *name;
    const char *args[MAX_SUITE_ARGS]; /* NULL-terminated */
    const char *metric;
    const char *data;
    const char *variants, *baseline;
    double floor;
    quality_rule rules[MAX_RULES];
} quality_suite;

static const quality_suite suites[] = {
    /* the `train` benchmark's model at 200 steps; chunk 16 for every MIRAS block */
    {"lm", {"--task", "lm", "--d-model", "128", "--layers", "4", "--heads", "4",
            "--seq-len", "256", "--batch", "16", "--steps", "200", "--lr", "1e-3",
            "--warmup", "20", "--clip", "1", "--eval-every", "200", "--eval-batches", "20",
            "--seed", "1"},
     "val_loss", DATA_TEXT, "attention,presets,swa:64,samba:gated-deltanet,hope", "attention", 0,
     {{"@miras", "chunk=16", 0}, {"hope", "chunk=16", 0}}},
    /* the small MQAR (vocabulary 64, 32 tokens, 4 pairs); swa:16 sees half the sequence (queries past 24 lose the keys) */
    {"mqar", {"--task", "mqar", "--vocab", "64", "--seq-len", "32", "--pairs", "4",
              "--d-model", "32", "--layers", "2", "--heads", "2", "--batch", "32",
              "--steps", "2000", "--lr", "1e-2", "--eval-every", "500", "--eval-batches", "16",
              "--seed", "1", "--threads", "1"},
     "val_acc", NULL, "attention,presets,swa:16,samba:gated-deltanet,hope", "attention", 0,
     {{"@mlp", "chunk=8", 0}, {"hope", "chunk=8", 0}}},
    /* more pairs (12) than a head of dimension 8 holds */
    {"mqar-hard", {"--task", "mqar", "--vocab", "128", "--seq-len", "64", "--pairs", "12",
                   "--d-model", "32", "--layers", "2", "--heads", "4", "--batch", "32",
                   "--steps", "2000", "--lr", "1e-2", "--eval-every", "500",
                   "--eval-batches", "16", "--seed", "1", "--threads", "1"},
     "val_acc", NULL, "attention,presets,swa:32,samba:gated-deltanet,hope", "attention", 0,
     {{"@mlp", "chunk=8", 0}, {"hope", "chunk=8", 0}}},
    /* The test suite's subset (--quick = quick-mqar + quick-lm, about 2.5 minutes here).
     * Floors, from the runs of this table on this machine (one thread, seed 1):
     * quick-mqar, 1000 steps: measured linear-attention 0.992, mamba2 0.981, deltanet 0.990,
     *   gated-deltanet 0.981, longhorn 0.923, titans 0.964, yaad 0.589, lattice-sim 0.980;
     *   each floor about 0.1-0.15 below. The presets that do not yet learn this task in 2000 steps, and
     *   the slow deep ones, are left out (they are in the mqar suite).
     * quick-lm, 150 steps of a 2-layer d_model 32 model on a frozen text (chance 5.545;
     *   attention, the weakest here, 3.52-3.58): each floor is the larger of two measured
     *   losses + 0.12, rounded up. The two runs differed only by 7 bytes of the text (which
     *   moves every training window), and that alone moved losses by up to 0.18: the margin
     *   guards against a changed batch order, not only against a model that stops learning
     *   (yaad 3.271 and 3.324, floor 3.45; the tree before Yaad's sign fix: 3.791 and
     *   quick-mqar 0.222, both below their floors). */
    {"quick-mqar", {"--task", "mqar", "--vocab", "64", "--seq-len", "32", "--pairs", "4",
                    "--d-model", "32", "--layers", "2", "--heads", "2", "--batch", "32",
                    "--steps", "1000", "--lr", "1e-2", "--eval-every", "1000",
                    "--eval-batches", "8", "--seed", "1", "--threads", "1"},
     "val_acc", NULL,
     "linear-attention,mamba2,deltanet,gated-deltanet,longhorn,titans,yaad,lattice-sim", NULL, 0,
     {{"@mlp", "chunk=8", 0},
      {"linear-attention", NULL, 0.85},
      {"mamba2", NULL, 0.85},
      {"deltanet", NULL, 0.85},
      {"gated-deltanet", NULL, 0.85},
      {"longhorn", NULL, 0.75},
      {"titans", NULL, 0.80},
      {"yaad", NULL, 0.45},
      {"lattice-sim", NULL, 0.85}}},
    {"quick-lm", {"--task", "lm", "--d-model", "32", "--layers", "2", "--heads", "2",
                  "--seq-len", "64", "--batch", "8", "--steps", "150", "--lr", "3e-3",
                  "--warmup", "15", "--clip", "1", "--eval-every", "150", "--eval-batches", "8",
                  "--seed", "1", "--threads", "1"},
     "val_loss", "tests/data/quality_text.txt", "attention,presets", NULL, 0,
     {{"@miras", "chunk=16", 0},
      {"attention", NULL, 3.71},
      {"linear-attention", NULL, 3.47},
      {"retnet", NULL, 3.43},
      {"mamba2", NULL, 3.45},
      {"gla", NULL, 3.49},
      {"hgrn2", NULL, 3.43},
      {"deltanet", NULL, 3.55},
      {"gated-deltanet", NULL, 3.49},
      {"rwkv7", NULL, 3.59},
      {"deltaproduct", NULL, 3.49},
      {"longhorn", NULL, 3.48},
      {"ttt-linear", NULL, 3.55},
      {"ttt-mlp", NULL, 3.43},
      {"titans", NULL, 3.42},
      {"moneta", NULL, 3.77},
      {"yaad", NULL, 3.45},
      {"memora", NULL, 3.41},
      {"lattice-dec", NULL, 3.48},
      {"lattice-enc", NULL, 3.55},
      {"lattice-sim", NULL, 3.48}}},
    /* ---- the MIRAS ablations and baseline comparisons at toy scale (docs/experiments.md;
     * tools/experiments.sh runs them all). Every run is one thread; the three task configs: */
#define TOY_LM "--task", "lm", "--d-model", "32", "--layers", "2", "--heads", "2", \
    "--seq-len", "64", "--batch", "8", "--steps", "300", "--lr", "3e-3", "--warmup", "30", \
    "--clip", "1", "--eval-every", "300", "--eval-batches", "32", "--seed", "1", "--threads", "1"
#define TOY_NIAH "--task", "niah", "--seq-len", "176", "--d-model", "32", "--layers", "2", \
    "--heads", "2", "--batch", "16", "--steps", "300", "--lr", "3e-3", "--warmup", "30", \
    "--clip", "1", "--eval-every", "300", "--eval-batches", "16", "--seed", "1", "--threads", "1"
#define TOY_CAPACITY "--task", "capacity", "--vocab", "64", "--d-model", "32", "--layers", "2", \
    "--heads", "2", "--batch", "32", "--steps", "600", "--lr", "1e-2", "--eval-every", "600", \
    "--eval-batches", "16", "--seed", "1", "--threads", "1"
#define BASELINE_VARIANTS "attention,mamba2,gated-deltanet,titans,yaad,moneta,memora"
    /* effect of p in Moneta's lp attentional bias (p = 1: the smooth |e|, eps 1e-6) on the byte LM */
    {"ablation-p", {TOY_LM}, "val_loss", DATA_TEXT,
     "moneta+p=1,moneta+p=1.5,moneta+p=2,moneta+p=3,moneta+p=4", "moneta+p=2", 0,
     {{"@miras", "chunk=16", 0}}},
    /* effect of q in Moneta's lq retention (q = 2: no normalisation) on the byte LM */
    {"ablation-q", {TOY_LM}, "val_loss", DATA_TEXT,
     "moneta+q=2,moneta+q=3,moneta+q=4,moneta+q=8", "moneta+q=2", 0,
     {{"@miras", "chunk=16", 0}}},
    /* deep (MLP, depth 1-3) vs linear (matrix) memory in Titans on the byte LM */
    {"ablation-memory", {TOY_LM}, "val_loss", DATA_TEXT,
     "titans+memory=matrix,titans+memory.depth=1,titans+memory.depth=2,titans+memory.depth=3",
     "titans+memory=matrix", 0, {{"@miras", "chunk=16", 0}}},
    /* Titans with and without momentum (the surprise S) on the byte LM */
    {"ablation-momentum", {TOY_LM}, "val_loss", DATA_TEXT,
     "titans+algorithm=gd,titans+algorithm=momentum", "titans+algorithm=gd", 0,
     {{"@miras", "chunk=16", 0}}},
    /* byte LM: MIRAS models vs a Transformer (attention) and a Mamba-style linear RNN */
    {"baseline-lm", {TOY_LM}, "val_loss", DATA_TEXT, BASELINE_VARIANTS, "attention", 0,
     {{"@miras", "chunk=16", 0}}},
    /* needle in a haystack, 7-digit pass key in noise sentences (accuracy: answer bytes, teacher-forced) */
    {"baseline-niah-passkey", {TOY_NIAH, "--niah", "passkey"}, "val_acc", NULL, BASELINE_VARIANTS,
     "attention", 0, {{"@miras", "chunk=16", 0}}},
    /* needle in a haystack, a word (of 32) in noise sentences; the cheaper variants only */
    {"baseline-niah-word", {TOY_NIAH, "--niah", "word"}, "val_acc", NULL,
     "attention,mamba2,gated-deltanet,titans,yaad", "attention", 0, {{"@miras", "chunk=16", 0}}},
    /* needle in a haystack, pass key in a window of real text; the cheaper variants only */
    {"baseline-niah-text", {TOY_NIAH, "--niah", "text"}, "val_acc", DATA_TEXT,
     "attention,mamba2,gated-deltanet,titans,yaad", "attention", 0, {{"@miras", "chunk=16", 0}}},
    /* memory capacity: N = 2, 4, 8 random pairs stored, then all queried (state size fixed) */
    {"baseline-capacity-2", {TOY_CAPACITY, "--pairs", "2"}, "val_acc", NULL, BASELINE_VARIANTS,
     "attention", 0, {{"@miras", "chunk=8", 0}}},
    {"baseline-capacity-4", {TOY_CAPACITY, "--pairs", "4"}, "val_acc", NULL, BASELINE_VARIANTS,
     "attention", 0, {{"@miras", "chunk=8", 0}}},
    {"baseline-capacity-8", {TOY_CAPACITY, "--pairs", "8"}, "val_acc", NULL, BASELINE_VARIANTS,
     "attention", 0, {{"@miras", "chunk=8", 0}}},
};
#define N_SUITES ((int)(sizeof suites / sizeof suites[0]))

/* --suite names that stand for several suites. */
static const struct { const char *name, *suites; } aliases[] = {
    {"quick", "quick-mqar,quick-lm"},
    {"ablations", "ablation-p,ablation-q,ablation-memory,ablation-momentum"},
    {"baseline-niah", "baseline-niah-passkey,baseline-niah-word,baseline-niah-text"},
    {"baseline-capacity", "baseline-capacity-2,baseline-capacity-4,baseline-capacity-8"},
    {"baselines", "baseline-lm,baseline-niah,baseline-capacity"},
    {"experiments", "ablations,baselines"},
};
#define N_ALIASES ((int)(sizeof aliases / sizeof aliases[0]))
#define DEFAULT_SUITES "lm,mqar"
#define DEFAULT_OUT "runs/quality"

/* ================================================================ small helpers */

#define MAX_CASES 512
#define MAX_VARIANTS 64
#define NAME_MAX_LEN 96
#define PATH_LEN 4096

static bool lower_is_better(const char *metric) { return strcmp(metric, "val_acc") != 0; }

/* A growing string (the SVG, the command line). */
typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || b->oom) return;
    if (b->len + (size_t)need + 1 > b->cap) {
        size_t cap = 2 * (b->len + (size_t)need + 1) + 256;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)need;
}

/* s with XML's five special characters escaped. */
static void sb_xml(strbuf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': sb_printf(b, "&amp;"); break;
        case '<': sb_printf(b, "&lt;"); break;
        case '>': sb_printf(b, "&gt;"); break;
        case '"': sb_printf(b, "&quot;"); break;
        case '\'': sb_printf(b, "&#39;"); break;
        default: sb_printf(b, "%c", *s);
        }
    }
}

/* s as a JSON string; bytes < 0x20 escaped, the rest (UTF-8 included) as is. */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_num(const char *key, double v)
{
    if (isfinite(v)) printf(",\"%s\":%.6g", key, v);
    else printf(",\"%s\":null", key);
}

/* src into dst[n], cut short when it does not fit; whether it fit. */
static bool copy_str(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    bool fits = len < n;
    if (!fits) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return fits;
}

/* The executable's directory ("" when /proc/self/exe cannot be read). */
static void exe_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    buf[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';
    else buf[0] = '\0';
}

/* The first of the candidates that can be read, into buf (realpath'd); NULL: none. */
static const char *first_readable(const char *const *cands, int n, char *buf, size_t size)
{
    for (int i = 0; i < n; i++) {
        if (!cands[i][0] || access(cands[i], R_OK) != 0) continue;
        char real[PATH_MAX];
        if (copy_str(buf, size, realpath(cands[i], real) ? real : cands[i])) return buf;
    }
    return NULL;
}

/* The LM text: ../shared/data/tinyshakespeare.txt beside the checkout
 * holding the executable (build/tools/miras-bench), shared/data/ inside it,
 * then the same two relative to the working directory (as `train` finds it). */
static const char *find_shared_text(char *buf, size_t n)
{
    char dir[PATH_LEN], c[4][PATH_LEN + 64];
    exe_dir(dir, sizeof dir);
    snprintf(c[0], sizeof c[0], "%s/../../../shared/data/" TEXT_NAME, dir);
    snprintf(c[1], sizeof c[1], "%s/../../shared/data/" TEXT_NAME, dir);
    snprintf(c[2], sizeof c[2], "../shared/data/" TEXT_NAME);
    snprintf(c[3], sizeof c[3], "shared/data/" TEXT_NAME);
    const char *cands[4] = {dir[0] ? c[0] : "", dir[0] ? c[1] : "", c[2], c[3]};
    return first_readable(cands, 4, buf, n);
}

/* A file of the checkout: beside build/tools/ (../../path), then relative to
 * the working directory. */
static const char *find_checkout_file(const char *path, char *buf, size_t n)
{
    char dir[PATH_LEN], c[2][PATH_LEN + 300];
    exe_dir(dir, sizeof dir);
    snprintf(c[0], sizeof c[0], "%s/../../%s", dir, path);
    snprintf(c[1], sizeof c[1], "%s", path);
    const char *cands[2] = {dir[0] ? c[0] : "", c[1]};
    return first_readable(cands, 2, buf, n);
}

/* ================================================================ variants
 * A variant is a mixer spec (what miras-train's --model takes: titans,
 * swa:32, samba:gated-deltanet) optionally followed by its own overrides,
 * each `+KEY=VALUE`: `moneta+p=2+q=4`, `titans+algorithm=gd`. No mixer spec
 * holds a '+', so the spec is the part before the first one; each override
 * becomes a --set KEY=VALUE of that case only. A '+' that is not followed by
 * KEY= (as in eta=1e+3) belongs to the value before it. */

/* The mixer spec of variant v (the part before the first '+') into buf. */
static const char *variant_spec(const char *v, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s", (int)strcspn(v, "+"), v);
    return buf;
}

static bool is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.';
}

/* Whether p (just after a '+') starts an override: KEY= with KEY of [A-Za-z0-9_.]. */
static bool starts_override(const char *p)
{
    size_t k = 0;
    while (is_key_char(p[k])) k++;
    return k > 0 && p[k] == '=';
}

/* The next override of a variant: *at points into v (initially v itself);
 * copies "KEY=VALUE" into buf and advances; false when there is none left. */
static bool next_override(const char **at, char *buf, size_t n)
{
    const char *p = *at;
    while (*p && !(*p == '+' && starts_override(p + 1))) p++;
    if (!*p) return *at = p, false;
    const char *q = ++p;
    while (*q && !(*q == '+' && starts_override(q + 1))) q++;
    snprintf(buf, n, "%.*s", (int)(q - p), p);
    *at = q;
    return true;
}

/* The value variant v's own overrides give KEY (the last one wins); NULL: none. */
static const char *variant_override(const char *v, const char *key, char *buf, size_t n)
{
    const char *at = v, *found = NULL;
    char kv[NAME_MAX_LEN];
    size_t len = strlen(key);
    while (next_override(&at, kv, sizeof kv))
        if (!strncmp(kv, key, len) && kv[len] == '=') {
            snprintf(buf, n, "%s", kv + len + 1);
            found = buf;
        }
    return found;
}

/* The preset under a "samba:<preset>[:W]" spec; NULL when there is none. */
static const mi_preset *samba_preset(const char *spec)
{
    if (strncmp(spec, "samba:", 6) != 0) return NULL;
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(spec + 6, ":+"), spec + 6);
    return mi_preset_find(name);
}

/* The MIRAS preset a variant runs (its spec, or samba's); NULL for the others. */
static const mi_preset *variant_preset(const char *v)
{
    char spec[NAME_MAX_LEN];
    variant_spec(v, spec, sizeof spec);
    const mi_preset *p = mi_preset_find(spec);
    return p ? p : samba_preset(spec);
}

/* Whether variant v runs an MLP memory: its preset's, unless its own memory= says otherwise. */
static bool variant_mlp(const char *v)
{
    char mem[NAME_MAX_LEN];
    const mi_preset *p = variant_preset(v);
    if (!p) return false;
    const char *own = variant_override(v, "memory", mem, sizeof mem);
    return !strcmp(own ? own : p->config.memory, "mlp");
}

/* A rule's match: "*", "@miras", "@mlp" (the memory the variant really runs),
 * or a name: the whole variant or its mixer spec (titans matches titans+p=2). */
static bool rule_matches(const char *match, const char *v)
{
    char spec[NAME_MAX_LEN];
    if (!strcmp(match, "*")) return true;
    if (!strcmp(match, "@miras")) return variant_preset(v) != NULL;
    if (!strcmp(match, "@mlp")) return variant_mlp(v);
    return !strcmp(match, v) || !strcmp(match, variant_spec(v, spec, sizeof spec));
}

/* Whether mixer spec v is one miras-train's --model takes; else a message. */
static bool spec_valid(const char *v, char *msg, size_t n)
{
    if (mi_preset_find(v)) return true;
    for (int i = 0; mi_mixer_kind_at(i); i++) {
        const mi_mixer_kind *k = mi_mixer_kind_at(i);
        size_t len = k->name ? strlen(k->name) : 0;
        if (!k->name || strncmp(v, k->name, len) != 0 || (v[len] && v[len] != ':')) continue;
        const char *arg = v[len] ? v + len + 1 : NULL;
        if (!strcmp(k->name, "samba")) {
            if (!arg || !samba_preset(v)) {
                snprintf(msg, n, "'%s': samba takes samba:<preset>[:W] with a MIRAS preset", v);
                return false;
            }
            arg = strchr(arg, ':') ? strchr(arg, ':') + 1 : NULL;
        } else if (strcmp(k->name, "swa") != 0 && arg) {
            snprintf(msg, n, "'%s': %s takes no ':' argument", v, k->name);
            return false;
        }
        if (arg && mi_mixer_window_arg(arg, 64) < 0) {
            snprintf(msg, n, "'%s': %s", v, mi_error());
            mi_error_clear();
            return false;
        }
        return true;
    }
    size_t used = (size_t)snprintf(msg, n, "unknown variant '%s'; known: presets (every MIRAS "
                                   "preset), ", v);
    for (int i = 0; mi_mixer_kind_at(i) && used < n; i++)
        if (mi_mixer_kind_at(i)->name)
            used += (size_t)snprintf(msg + used, n - used, "%s, ", mi_mixer_kind_at(i)->usage);
    for (int i = 0; mi_preset_at(i) && used < n; i++)
        used += (size_t)snprintf(msg + used, n - used, "%s%s", i ? ", " : "",
                                 mi_preset_at(i)->name);
    return false;
}

/* Whether variant v (SPEC[+KEY=VALUE]...) is well formed and its spec
 * known; else a message. The keys themselves are miras-train's to judge:
 * an unknown one fails that case (exit status 2, its message in the row). */
static bool variant_valid(const char *v, char *msg, size_t n)
{
    char spec[NAME_MAX_LEN], kv[NAME_MAX_LEN];
    variant_spec(v, spec, sizeof spec);
    if (!spec_valid(spec, msg, n)) return false;
    const char *plus = strchr(v, '+');
    if (plus && !starts_override(plus + 1)) {
        snprintf(msg, n, "variant '%s': after the mixer spec each override is +KEY=VALUE "
                 "(moneta+p=2+q=4)", v);
        return false;
    }
    for (const char *at = v; next_override(&at, kv, sizeof kv);)
        if (!kv[strcspn(kv, "=") + 1]) {
            snprintf(msg, n, "variant '%s': override '%s' has no value", v, kv);
            return false;
        }
    return true;
}

static int add_variant(char (*names)[NAME_MAX_LEN], int count, const char *v, char *msg,
                       size_t n)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(names[i], v)) return count; /* once each */
    if (count == MAX_VARIANTS)
        return snprintf(msg, n, "more than %d variants", MAX_VARIANTS), -1;
    if (strlen(v) >= NAME_MAX_LEN) return snprintf(msg, n, "variant '%s' is too long", v), -1;
    if (!variant_valid(v, msg, n)) return -1;
    snprintf(names[count], NAME_MAX_LEN, "%s", v);
    return count + 1;
}

/* A comma list of variants ("presets": every preset) into names; the count,
 * or -1 with a message. */
static int expand_variants(const char *list, char (*names)[NAME_MAX_LEN], char *msg, size_t n)
{
    char buf[2048];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf)
        return snprintf(msg, n, "the variant list is too long"), -1;
    int count = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && count >= 0;
         t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "presets"))
            for (int i = 0; mi_preset_at(i) && count >= 0; i++)
                count = add_variant(names, count, mi_preset_at(i)->name, msg, n);
        else count = add_variant(names, count, t, msg, n);
    }
    if (count == 0) return snprintf(msg, n, "no variant given"), -1;
    return count;
}

/* ================================================================ one case */

typedef enum { CASE_OK, CASE_FAILED, CASE_SKIPPED } case_status;

typedef struct quality_case {
    const quality_suite *suite;
    char variant[NAME_MAX_LEN];
    char dir[PATH_LEN];
    char *command;           /* the miras-train command line, shell-quoted */
    int64_t steps, params;   /* params: -1 when miras-train did not say */
    double val_loss, val_acc, train_loss, wall_s;
    double floor;            /* 0: none */
    case_status status;
    char message[512];       /* failed or skipped: why */
    char overrides[512];     /* the checkpoint's lm.mixer_overrides, as the model got them */
} quality_case;

static double metric_of(const quality_case *c)
{
    return lower_is_better(c->suite->metric) ? c->val_loss : c->val_acc;
}

static bool below_floor(const quality_case *c)
{
    if (c->status != CASE_OK || c->floor == 0) return false;
    double m = metric_of(c);
    return lower_is_better(c->suite->metric) ? !(m <= c->floor) : !(m >= c->floor);
}

/* The argument vector of one run; the strings that are not the suite's
 * literals live in buf. */
#define MAX_ARGV 128
typedef struct cmdline {
    const char *argv[MAX_ARGV + 1];
    int argc;
    char buf[8192];
    size_t used;
    bool full;
} cmdline;

static void cmd_add(cmdline *c, const char *s)
{
    if (!s || c->argc == MAX_ARGV) {
        c->full = true;
        return;
    }
    c->argv[c->argc++] = s;
    c->argv[c->argc] = NULL;
}

static const char *cmd_keep(cmdline *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *cmd_keep(cmdline *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(c->buf + c->used, sizeof c->buf - c->used, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof c->buf - c->used) return c->full = true, NULL;
    const char *s = c->buf + c->used;
    c->used += (size_t)w + 1;
    return s;
}

/* --set for each KEY=VALUE of a space-separated list. */
static void cmd_sets(cmdline *c, const char *list)
{
    const char *p = list;
    while (*p) {
        p += strspn(p, " ");
        size_t len = strcspn(p, " ");
        if (len) {
            cmd_add(c, "--set");
            cmd_add(c, cmd_keep(c, "%.*s", (int)len, p));
        }
        p += len;
    }
}

/* The steps a suite's arguments ask for (miras-train's default: 1000). */
static int64_t suite_steps(const quality_suite *s)
{
    for (int i = 0; s->args[i] && s->args[i + 1]; i++)
        if (!strcmp(s->args[i], "--steps")) return strtoll(s->args[i + 1], NULL, 10);
    return 1000;
}

/* miras-train's command for case c: the suite's arguments (--steps and a
 * warmup that no longer fits replaced under --steps N), --data, --model
 * (the variant's mixer spec), the rules' --set, the user's --set, the
 * variant's own overrides (last, so they win), --threads, --out. */
static void build_command(cmdline *cmd, const quality_case *c, const char *train,
                          const char *data, const quality_opts *q)
{
    const quality_suite *s = c->suite;
    cmd_add(cmd, train);
    bool steps_seen = false;
    for (int i = 0; s->args[i]; i++) {
        const char *a = s->args[i], *prev = i ? s->args[i - 1] : "";
        if (q->steps && !strcmp(prev, "--steps")) {
            a = cmd_keep(cmd, "%lld", (long long)q->steps);
            steps_seen = true;
        } else if (q->steps && !strcmp(prev, "--warmup") && strtoll(a, NULL, 10) >= q->steps) {
            a = cmd_keep(cmd, "%lld", (long long)(q->steps / 10)); /* miras-train's own rule */
        }
        cmd_add(cmd, a);
    }
    if (q->steps && !steps_seen) {
        cmd_add(cmd, "--steps");
        cmd_add(cmd, cmd_keep(cmd, "%lld", (long long)q->steps));
    }
    if (data) cmd_add(cmd, "--data"), cmd_add(cmd, data);
    char spec[NAME_MAX_LEN], kv[NAME_MAX_LEN];
    cmd_add(cmd, "--model");
    cmd_add(cmd, cmd_keep(cmd, "%s", variant_spec(c->variant, spec, sizeof spec)));
    for (int r = 0; r < MAX_RULES && s->rules[r].match; r++)
        if (s->rules[r].set && rule_matches(s->rules[r].match, c->variant))
            cmd_sets(cmd, s->rules[r].set);
    if (variant_preset(c->variant))
        for (int i = 0; i < q->n_sets; i++) cmd_add(cmd, "--set"), cmd_add(cmd, q->sets[i]);
    for (const char *at = c->variant; next_override(&at, kv, sizeof kv);) /* last: they win */
        cmd_add(cmd, "--set"), cmd_add(cmd, cmd_keep(cmd, "%s", kv));
    if (q->threads) cmd_add(cmd, "--threads"), cmd_add(cmd, cmd_keep(cmd, "%d", q->threads));
    cmd_add(cmd, "--out");
    cmd_add(cmd, c->dir);
}

/* The argument vector as one shell line, each argument quoted when it needs it. */
static char *join_command(const cmdline *cmd)
{
    strbuf b = {0};
    for (int i = 0; i < cmd->argc; i++) {
        const char *a = cmd->argv[i];
        bool plain = a[0] && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_.,/:=+@%") == strlen(a);
        sb_printf(&b, "%s", i ? " " : "");
        if (plain) sb_printf(&b, "%s", a);
        else {
            sb_printf(&b, "'");
            for (const char *p = a; *p; p++)
                sb_printf(&b, *p == '\'' ? "'\\''" : "%c", *p);
            sb_printf(&b, "'");
        }
    }
    if (b.oom) free(b.s), b.s = NULL;
    return b.s;
}

/* Reads at most n - 1 bytes of path from offset (negative: that far from the
 * end) into buf; the bytes read. */
static size_t read_part(const char *path, long offset, char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    if (offset < 0 && fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        offset = size + offset > 0 ? size + offset : 0;
    }
    size_t got = fseek(f, offset, SEEK_SET) == 0 ? fread(buf, 1, n - 1, f) : 0;
    buf[got] = '\0';
    fclose(f);
    return got;
}

/* From train.out: the parameter count its first line states
 * ("miras-train: titans, 12345 parameters, ..."), or -1. */
static int64_t params_from_output(const char *path)
{
    char head[4096];
    read_part(path, 0, head, sizeof head);
    head[strcspn(head, "\n")] = '\0';
    char *p = strstr(head, " parameters");
    if (!p) return -1;
    char *d = p;
    while (d > head && d[-1] >= '0' && d[-1] <= '9') d--;
    return d < p ? strtoll(d, NULL, 10) : -1;
}

/* From train.out: its last non-empty line (what a failed run said last). */
static void last_line(const char *path, char *out, size_t n)
{
    char tail[4096];
    size_t len = read_part(path, -(long)sizeof tail + 1, tail, sizeof tail);
    while (len && (tail[len - 1] == '\n' || tail[len - 1] == '\r' || tail[len - 1] == ' '))
        tail[--len] = '\0';
    char *line = strrchr(tail, '\n');
    line = line ? line + 1 : tail;
    /* a progress bar redrawn with '\r' on the same line: its last state */
    if (strrchr(line, '\r')) line = strrchr(line, '\r') + 1;
    copy_str(out, n, *line ? line : "(no output)");
}

/* The idx-th comma-separated field of a CSV line as a number (empty or
 * missing: NaN). */
static double csv_field(const char *line, int idx)
{
    for (int i = 0; i < idx; i++) {
        line = strchr(line, ',');
        if (!line) return NAN;
        line++;
    }
    size_t len = strcspn(line, ",\r\n");
    if (!len) return NAN;
    char num[64], *end;
    snprintf(num, sizeof num, "%.*s", (int)(len < 63 ? len : 63), line);
    double v = strtod(num, &end);
    return *end ? NAN : v;
}

/* The run's log.csv, by column name: train_loss of the last row, val_loss
 * and val_acc of the last row that has a validation; 0, or -1 with a message. */
static int read_log(quality_case *c, char *msg, size_t n)
{
    char path[PATH_LEN + 16];
    snprintf(path, sizeof path, "%s/log.csv", c->dir);
    FILE *f = fopen(path, "r");
    if (!f) return snprintf(msg, n, "no log.csv in the run's directory: %s", strerror(errno)), -1;
    char line[4096];
    int col_train = -1, col_vl = -1, col_va = -1;
    if (fgets(line, sizeof line, f)) {
        int idx = 0;
        for (char *save = NULL, *t = strtok_r(line, ",\r\n", &save); t;
             t = strtok_r(NULL, ",\r\n", &save), idx++) {
            if (!strcmp(t, "train_loss")) col_train = idx;
            else if (!strcmp(t, "val_loss")) col_vl = idx;
            else if (!strcmp(t, "val_acc")) col_va = idx;
        }
    }
    int rows = 0;
    while (col_vl >= 0 && fgets(line, sizeof line, f)) {
        if (line[0] == '\n' || line[0] == '\0') continue;
        rows++;
        if (col_train >= 0) c->train_loss = csv_field(line, col_train);
        double vl = csv_field(line, col_vl);
        if (!isnan(vl)) {
            c->val_loss = vl;
            c->val_acc = col_va >= 0 ? csv_field(line, col_va) : NAN;
        }
    }
    fclose(f);
    if (col_vl < 0) return snprintf(msg, n, "log.csv has no val_loss column"), -1;
    if (!rows) return snprintf(msg, n, "log.csv has no rows"), -1;
    if (!lower_is_better(c->suite->metric) && col_va < 0)
        return snprintf(msg, n, "log.csv has no val_acc column"), -1;
    if (!isfinite(metric_of(c)))
        return snprintf(msg, n, "log.csv: no finite %s in the last validation",
                        c->suite->metric), -1;
    return 0;
}

/* The model keys of miras-train's --set (the rest go to the mixer). */
static const char *const model_keys[] = {"vocab", "d_model", "layers", "heads", "mlp_hidden",
                                         "tie_embeddings", "norm_eps", "rope_base", "window"};

/* A metadata value as a number (true/false as 1/0); NaN when it is none. */
static double meta_number(const char *s)
{
    if (!strcmp(s, "true")) return 1;
    if (!strcmp(s, "false")) return 0;
    char *end;
    double v = strtod(s, &end);
    return *s && !*end ? v : NAN;
}

/* Whether the run's model got the variant's own overrides: its checkpoint's
 * lm.mixer_overrides ends up with KEY=VALUE for a mixer key (the last entry
 * for KEY, as the block applies them in order), lm.KEY equals VALUE for a
 * model key. Keeps lm.mixer_overrides in c->overrides. 0, or -1 with a message. */
static int check_overrides(quality_case *c, char *msg, size_t n)
{
    char path[PATH_LEN + 32], kv[NAME_MAX_LEN];
    snprintf(path, sizeof path, "%s/ckpt.safetensors", c->dir);
    mi_scope *scope = mi_scope_new("quality-ckpt");
    mi_scope_enter(scope);
    int rc = 0;
    const mi_safetensors *st = mi_safetensors_load(path);
    const char *got = st ? mi_safetensors_meta(st, "lm.mixer_overrides") : NULL;
    if (!st) {
        rc = -1;
        snprintf(msg, n, "cannot read the run's checkpoint: %s", mi_error());
        mi_error_clear();
    } else {
        copy_str(c->overrides, sizeof c->overrides, got ? got : "");
    }
    for (const char *at = c->variant; rc == 0 && next_override(&at, kv, sizeof kv);) {
        size_t klen = strcspn(kv, "=");
        const char *want = kv + klen + 1, *have = NULL;
        char key[NAME_MAX_LEN + 8], last[NAME_MAX_LEN] = "";
        bool model = false;
        for (size_t i = 0; i < sizeof model_keys / sizeof *model_keys; i++)
            model |= strlen(model_keys[i]) == klen && !strncmp(kv, model_keys[i], klen);
        if (model) {
            snprintf(key, sizeof key, "lm.%.*s", (int)klen, kv);
            have = mi_safetensors_meta(st, key);
            if (have && (meta_number(have) == meta_number(want) || !strcmp(have, want))) continue;
        } else {
            /* the last comma-separated entry of lm.mixer_overrides that sets KEY */
            for (const char *e = c->overrides; *e;) {
                size_t len = strcspn(e, ",");
                if (len > klen && !strncmp(e, kv, klen) && e[klen] == '=')
                    snprintf(last, sizeof last, "%.*s", (int)(len - klen - 1), e + klen + 1);
                e += len + (e[len] == ',');
            }
            if (!strcmp(last, want)) continue;
            snprintf(key, sizeof key, "lm.mixer_overrides");
            have = c->overrides;
        }
        rc = -1;
        snprintf(msg, n, "the override %s did not reach the model: its checkpoint has %s = "
                 "'%s'", kv, key, have ? have : "(none)");
    }
    mi_scope_leave();
    mi_scope_free(scope);
    return rc;
}

/* Runs miras-train for case c (output to DIR/train.out) and reads its log. */
static void run_case(quality_case *c, const char *train, const char *data, const quality_opts *q)
{
    char msg[1024], out_path[PATH_LEN + 16], log_path[PATH_LEN + 16];
    cmdline cmd = {.argc = 0};
    build_command(&cmd, c, train, data, q);
    c->command = join_command(&cmd);
    c->status = CASE_FAILED;
    if (cmd.full) {
        snprintf(c->message, sizeof c->message, "the command line is too long");
        return;
    }
    if (make_dir(c->dir, msg, sizeof msg) != 0) {
        copy_str(c->message, sizeof c->message, msg);
        return;
    }
    snprintf(out_path, sizeof out_path, "%s/train.out", c->dir);
    snprintf(log_path, sizeof log_path, "%s/log.csv", c->dir);
    remove(log_path); /* a failed run must not leave an old log to read */

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    fflush(stdout);
    fflush(stderr);
    double t0 = now_s();
    pid_t pid;
    int e = posix_spawn(&pid, train, &fa, NULL, (char *const *)cmd.argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e != 0) {
        snprintf(c->message, sizeof c->message, "cannot start %.300s: %s", train,
                 strerror(e));
        return;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    c->wall_s = now_s() - t0;
    c->params = params_from_output(out_path);
    char last[400];
    last_line(out_path, last, sizeof last);
    if (WIFSIGNALED(status)) {
        snprintf(c->message, sizeof c->message, "killed by signal %d (%s)%s: %s",
                 WTERMSIG(status), strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == 9 ? ", perhaps out of memory" : "", last);
        return;
    }
    if (WEXITSTATUS(status) != 0) {
        snprintf(c->message, sizeof c->message, "exit status %d: %s", WEXITSTATUS(status), last);
        return;
    }
    if (read_log(c, msg, sizeof msg) != 0 || check_overrides(c, msg, sizeof msg) != 0) {
        copy_str(c->message, sizeof c->message, msg);
        return;
    }
    c->status = CASE_OK;
}

/* ================================================================ output */

static const char *status_name(case_status s)
{
    return s == CASE_OK ? "ok" : s == CASE_FAILED ? "failed" : "skipped";
}

static void print_case_json_line(const quality_case *c)
{
    printf("{\"suite\":");
    json_str(c->suite->name);
    printf(",\"variant\":");
    json_str(c->variant);
    printf(",\"command\":");
    if (c->command) json_str(c->command);
    else printf("null");
    printf(",\"steps\":%lld", (long long)c->steps);
    if (c->params >= 0) printf(",\"params\":%lld", (long long)c->params);
    else printf(",\"params\":null");
    printf(",\"metric\":\"%s\"", c->suite->metric);
    json_num("val_loss", c->val_loss);
    json_num("val_acc", c->val_acc);
    json_num("train_loss", c->train_loss);
    json_num("wall_s", c->wall_s);
    if (c->status == CASE_OK) printf(",\"mixer_overrides\":"), json_str(c->overrides);
    else printf(",\"mixer_overrides\":null");
    printf(",\"status\":\"%s\"", status_name(c->status));
    if (c->status != CASE_OK) printf(",\"message\":"), json_str(c->message);
    json_num("floor", c->floor != 0 ? c->floor : NAN);
    if (c->status == CASE_SKIPPED) printf(",\"ok\":null");
    else printf(",\"ok\":%s", c->status == CASE_OK && !below_floor(c) ? "true" : "false");
    printf(",\"out\":");
    json_str(c->dir);
    printf("}\n");
    fflush(stdout);
}

/* The baseline case of c's suite that ran, or NULL. */
static const quality_case *baseline_of(const quality_case *cases, int n, const quality_suite *s)
{
    if (!s->baseline) return NULL;
    for (int i = 0; i < n; i++)
        if (cases[i].suite == s && !strcmp(cases[i].variant, s->baseline)
            && cases[i].status == CASE_OK)
            return &cases[i];
    return NULL;
}

static void fmt_params(char *buf, size_t n, int64_t p)
{
    if (p < 0) snprintf(buf, n, "-");
    else if (p >= 1000000) snprintf(buf, n, "%.2fM", (double)p / 1e6);
    else if (p >= 1000) snprintf(buf, n, "%.1fk", (double)p / 1e3);
    else snprintf(buf, n, "%lld", (long long)p);
}

static void fmt_floor(char *buf, size_t n, const quality_case *c)
{
    if (c->floor == 0) snprintf(buf, n, "-");
    else snprintf(buf, n, "%s %g", lower_is_better(c->suite->metric) ? "<=" : ">=", c->floor);
}

static int64_t suite_steps_run(const quality_case *cases, int n, const quality_suite *s)
{
    int64_t steps = 0;
    for (int i = 0; i < n; i++)
        if (cases[i].suite == s) steps = cases[i].steps;
    return steps;
}

/* The table of one suite's cases: the metric, its delta to the baseline
 * (when the suite has one and it ran), val_loss beside an accuracy, the
 * last train_loss, parameters, wall time, floor and status. */
static void print_suite_table(const quality_case *cases, int n, const quality_suite *s,
                              const char *data_name, const char *svg)
{
    const quality_case *base = baseline_of(cases, n, s);
    bool acc = !lower_is_better(s->metric);
    int64_t steps = suite_steps_run(cases, n, s);
    int w = 22; /* the variant column: the longest name */
    for (int i = 0; i < n; i++)
        if (cases[i].suite == s && (int)strlen(cases[i].variant) > w)
            w = (int)strlen(cases[i].variant);
    printf("\nquality %s: %s after %lld step%s (%s)%s%s%s%s\n", s->name, s->metric,
           (long long)steps, steps == 1 ? "" : "s", acc ? "higher is better" : "lower is better",
           base ? "; delta vs " : "", base ? s->baseline : "", data_name ? "; text " : "",
           data_name ? data_name : "");
    printf("%-*s %9s", w, "variant", s->metric);
    if (base) printf(" %9s", "delta");
    if (acc) printf(" %9s", "val_loss");
    printf(" %10s %8s %9s %7s  %s\n", "train_loss", "params", "wall", "floor", "status");
    for (int i = 0; i < n; i++) {
        const quality_case *c = &cases[i];
        if (c->suite != s) continue;
        char floor[24], params[24], wall[24] = "-";
        fmt_floor(floor, sizeof floor, c);
        fmt_params(params, sizeof params, c->params);
        if (c->status != CASE_SKIPPED && c->wall_s > 0)
            snprintf(wall, sizeof wall, c->wall_s < 10 ? "%.2f s" : "%.1f s", c->wall_s);
        if (c->status != CASE_OK) {
            printf("%-*s %9s", w, c->variant, "-");
            if (base) printf(" %9s", "-");
            if (acc) printf(" %9s", "-");
            printf(" %10s %8s %9s %7s  %s: %.100s%s\n", "-", params, wall, floor,
                   c->status == CASE_FAILED ? "FAILED" : "skipped", c->message,
                   strlen(c->message) > 100 ? "..." : "");
            continue;
        }
        printf("%-*s %9.4f", w, c->variant, metric_of(c));
        if (base && c == base) printf(" %9s", "base");
        else if (base) printf(" %+9.4f", metric_of(c) - metric_of(base));
        if (acc) printf(" %9.4f", c->val_loss);
        printf(" %10.4f %8s %9s %7s  %s\n", c->train_loss, params, wall, floor,
               below_floor(c) ? "BELOW FLOOR" : "ok");
    }
    if (svg) printf("chart: %s\n", svg);
}

/* s for a Markdown table cell: '|' escaped, line breaks as spaces. */
static void sb_md(strbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') sb_printf(b, "\\|");
        else sb_printf(b, "%c", *s == '\n' || *s == '\r' ? ' ' : *s);
    }
}

/* The same table in Markdown (DIR/quality-<suite>.md): a line saying what
 * the metric is, then the table; the variant names in code spans. The rows
 * in the suite's order; a failed or skipped case says why. */
static char *suite_markdown(const quality_case *cases, int n, const quality_suite *s,
                            const char *data_name, size_t *size)
{
    const quality_case *base = baseline_of(cases, n, s);
    bool acc = !lower_is_better(s->metric);
    int64_t steps = suite_steps_run(cases, n, s);
    strbuf b = {0};
    sb_printf(&b, "`%s` after %lld step%s (%s)", s->metric, (long long)steps,
              steps == 1 ? "" : "s", acc ? "higher is better" : "lower is better");
    if (base) sb_printf(&b, "; Δ vs `%s`", s->baseline);
    if (data_name) sb_printf(&b, "; text `%s`", data_name);
    sb_printf(&b, ".\n\n| variant | %s |%s%s train_loss | params | wall | status |\n", s->metric,
              base ? " Δ |" : "", acc ? " val_loss |" : "");
    sb_printf(&b, "|---|---:|%s%s---:|---:|---:|---|\n", base ? "---:|" : "", acc ? "---:|" : "");
    for (int i = 0; i < n; i++) {
        const quality_case *c = &cases[i];
        if (c->suite != s) continue;
        char params[24], wall[24] = "-";
        fmt_params(params, sizeof params, c->params);
        if (c->status != CASE_SKIPPED && c->wall_s > 0)
            snprintf(wall, sizeof wall, c->wall_s < 10 ? "%.2f s" : "%.1f s", c->wall_s);
        sb_printf(&b, "| `");
        sb_md(&b, c->variant);
        if (c->status != CASE_OK) {
            sb_printf(&b, "` | - |%s%s - | %s | %s | %s: ", base ? " - |" : "", acc ? " - |" : "",
                      params, wall, c->status == CASE_FAILED ? "FAILED" : "skipped");
            sb_md(&b, c->message);
            sb_printf(&b, " |\n");
            continue;
        }
        sb_printf(&b, "` | %.4f |", metric_of(c));
        if (base && c == base) sb_printf(&b, " base |");
        else if (base) sb_printf(&b, " %+.4f |", metric_of(c) - metric_of(base));
        if (acc) sb_printf(&b, " %.4f |", c->val_loss);
        sb_printf(&b, " %.4f | %s | %s | %s |\n", c->train_loss, params, wall,
                  below_floor(c) ? "BELOW FLOOR" : "ok");
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *size = b.len;
    return b.s;
}

/* ---------------------------------------------------------------- the chart
 * Horizontal bars, best first, one per variant, the value (and its delta to
 * the baseline) beside each; the baseline's bar in its own colour with a
 * dashed line at its value across the chart; a floor as a black tick on its
 * row; a failed or skipped case as a word instead of a bar. */
#define SVG_RIGHT_W 170 /* the value and delta beside the longest bar */
#define SVG_LABEL_W 190 /* variant names; a longer name takes 16 + 8 px a character */
#define SVG_BAR_W 400   /* the axis from 0 to the scale's top */
#define SVG_ROW 22
#define SVG_TOP 58

static const quality_case *sort_cases_base;
static int cmp_by_metric(const void *a, const void *b)
{
    const quality_case *x = &sort_cases_base[*(const int *)a];
    const quality_case *y = &sort_cases_base[*(const int *)b];
    bool rx = x->status == CASE_OK, ry = y->status == CASE_OK;
    if (rx != ry) return rx ? -1 : 1;
    if (!rx) return *(const int *)a - *(const int *)b;
    double mx = metric_of(x), my = metric_of(y);
    if (!lower_is_better(x->suite->metric)) mx = -mx, my = -my;
    return mx < my ? -1 : mx > my ? 1 : *(const int *)a - *(const int *)b;
}

/* A round top for the axis and its tick step (1, 2 or 5 times a power of 10). */
static double axis_top(double max, double *tick)
{
    if (!(max > 0)) max = 1;
    double mag = pow(10, floor(log10(max)));
    const double m[] = {0.1, 0.2, 0.5, 1, 2, 5, 10};
    *tick = mag;
    for (int i = 0; i < 7; i++)
        if (max / (m[i] * mag) <= 6) {
            *tick = m[i] * mag;
            break;
        }
    return ceil(max / *tick - 1e-9) * *tick;
}

static char *suite_svg(const quality_case *cases, int n, const quality_suite *s, int64_t steps,
                       size_t *size)
{
    int idx[MAX_CASES], rows = 0;
    double max = 0;
    for (int i = 0; i < n; i++) {
        if (cases[i].suite != s) continue;
        idx[rows++] = i;
        if (cases[i].status == CASE_OK) max = fmax(max, metric_of(&cases[i]));
        if (cases[i].floor != 0) max = fmax(max, cases[i].floor);
    }
    sort_cases_base = cases;
    qsort(idx, (size_t)rows, sizeof *idx, cmp_by_metric);
    bool acc = !lower_is_better(s->metric);
    double tick, top = acc ? 1.0 : axis_top(max, &tick);
    if (acc) tick = 0.2;
    const quality_case *base = baseline_of(cases, n, s);
    int h = SVG_TOP + rows * SVG_ROW + 44, label_w = SVG_LABEL_W;
    for (int r = 0; r < rows; r++)
        if (16 + 8 * (int)strlen(cases[idx[r]].variant) > label_w)
            label_w = 16 + 8 * (int)strlen(cases[idx[r]].variant);
    strbuf b = {0};
    sb_printf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
              "font-family=\"sans-serif\" font-size=\"12\">\n"
              "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
              label_w + SVG_BAR_W + SVG_RIGHT_W, h);
    sb_printf(&b, "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">quality ");
    sb_xml(&b, s->name);
    sb_printf(&b, ": %s after %lld step%s</text>\n", s->metric, (long long)steps,
              steps == 1 ? "" : "s");
    sb_printf(&b, "<text x=\"10\" y=\"38\" fill=\"#555\">%s; best first%s", acc
              ? "validation accuracy, higher is better" : "validation loss, lower is better",
              base ? "; dashed line: the baseline, " : "");
    if (base) sb_xml(&b, s->baseline);
    bool floors = false;
    for (int r = 0; r < rows; r++) floors |= cases[idx[r]].floor != 0;
    sb_printf(&b, "%s</text>\n", floors ? "; black tick: a floor" : "");
    double x0 = label_w, scale = SVG_BAR_W / top;
    int y_axis = SVG_TOP + rows * SVG_ROW;
    for (double t = 0; t <= top + 1e-9; t += tick) {
        double x = x0 + t * scale;
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n"
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%g</text>\n",
                  x, SVG_TOP - 4, x, y_axis, x, y_axis + 16, t);
    }
    for (int r = 0; r < rows; r++) {
        const quality_case *c = &cases[idx[r]];
        int y = SVG_TOP + r * SVG_ROW;
        sb_printf(&b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", label_w - 8, y + 15);
        sb_xml(&b, c->variant);
        sb_printf(&b, "</text>\n");
        if (c->status != CASE_OK) {
            sb_printf(&b, "<text x=\"%.1f\" y=\"%d\" fill=\"%s\">%s</text>\n", x0 + 4, y + 15,
                      c->status == CASE_FAILED ? "#c62828" : "#888",
                      c->status == CASE_FAILED ? "failed" : "skipped");
            continue;
        }
        double m = metric_of(c), w = fmax(0.0, fmin(m, top)) * scale;
        const char *fill = c == base ? "#f58518" : below_floor(c) ? "#e45756" : "#4c78a8";
        sb_printf(&b, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"16\" fill=\"%s\"/>\n",
                  x0, y + 3, w, fill);
        sb_printf(&b, "<text x=\"%.1f\" y=\"%d\">%.4f", x0 + w + 5, y + 15, m);
        if (base && c != base) sb_printf(&b, " (%+.4f)", m - metric_of(base));
        if (c == base) sb_printf(&b, " (baseline)");
        if (below_floor(c)) sb_printf(&b, " below floor");
        sb_printf(&b, "</text>\n");
        if (c->floor != 0) {
            double fx = x0 + fmin(c->floor, top) * scale;
            sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#222\" "
                      "stroke-width=\"2\"/>\n", fx, y + 1, fx, y + 21);
        }
    }
    if (base) {
        double bx = x0 + fmin(metric_of(base), top) * scale;
        sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#f58518\" "
                  "stroke-dasharray=\"4 3\"/>\n", bx, SVG_TOP - 4, bx, y_axis);
    }
    sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n", x0,
              SVG_TOP - 4, x0, y_axis);
    sb_printf(&b, "</svg>\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *size = b.len;
    return b.s;
}

/* ================================================================ the run */

/* Adds the suites of a comma list to out (aliases expanded, an alias may name
 * aliases; each suite once); the new count, or -1 with a message. */
static int add_suites(const char *list, int depth, const quality_suite **out, int count,
                      char *msg, size_t n)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && count >= 0;
         t = strtok_r(NULL, ",", &save)) {
        const char *alias = NULL;
        for (int a = 0; a < N_ALIASES; a++)
            if (!strcmp(t, aliases[a].name)) alias = aliases[a].suites;
        if (alias && depth < 4) {
            count = add_suites(alias, depth + 1, out, count, msg, n);
            continue;
        }
        const quality_suite *s = NULL;
        for (int k = 0; k < N_SUITES; k++)
            if (!strcmp(t, suites[k].name)) s = &suites[k];
        if (!s) {
            size_t used = (size_t)snprintf(msg, n, "unknown suite '%s'; known:", t);
            for (int k = 0; k < N_SUITES && used < n; k++)
                used += (size_t)snprintf(msg + used, n - used, " %s", suites[k].name);
            for (int a = 0; a < N_ALIASES && used < n; a++)
                used += (size_t)snprintf(msg + used, n - used, " %s (%s)", aliases[a].name,
                                         aliases[a].suites);
            return -1;
        }
        bool seen = false;
        for (int k = 0; k < count; k++) seen |= out[k] == s;
        if (!seen) out[count++] = s;
    }
    return count;
}

/* The suites asked for (aliases expanded, each once); the count, or -1 with a message. */
static int select_suites(const quality_opts *q, const quality_suite **out, char *msg, size_t n)
{
    int count = 0;
    if (!q->n_suites) return add_suites(DEFAULT_SUITES, 0, out, 0, msg, n);
    for (int l = 0; l < q->n_suites && count >= 0; l++)
        count = add_suites(q->suites[l], 0, out, count, msg, n);
    return count;
}

/* miras-train: --train, else beside this executable. 0, 1 (not found next to
 * us: a runtime failure) or 2 (--train is not executable: a usage error). */
static int find_train(const quality_opts *q, char *buf, size_t n)
{
    if (q->train) {
        if (access(q->train, X_OK) != 0) {
            fprintf(stderr, "miras-bench: --train '%s': %s\n", q->train, strerror(errno));
            return 2;
        }
        snprintf(buf, n, "%s", q->train);
        return 0;
    }
    char dir[PATH_LEN];
    exe_dir(dir, sizeof dir);
    snprintf(buf, n, "%s/miras-train", dir[0] ? dir : ".");
    if (access(buf, X_OK) == 0) return 0;
    fprintf(stderr, "miras-bench: miras-train not found: looked for %s (beside this "
            "executable, from /proc/self/exe); give --train PATH\n", buf);
    return 1;
}

/* A directory name of variant v: characters other than [A-Za-z0-9._+=-] as '_'. */
static void case_dir(char *buf, size_t n, const char *out, const quality_suite *s, const char *v)
{
    int w = snprintf(buf, n, "%s/%s-", out, s->name);
    for (char *p = buf + (w > 0 && (size_t)w < n ? w : 0); *v && (size_t)(p - buf) + 1 < n; v++)
        *p++ = (strchr("._-+=", *v) || (*v >= '0' && *v <= '9') || (*v >= 'a' && *v <= 'z') ||
                (*v >= 'A' && *v <= 'Z')) ? *v : '_', *p = '\0';
}

int bench_quality(const bench_opts *o, const quality_opts *q)
{
    char msg[2048];
    const quality_suite *chosen[N_SUITES];
    int n_suites = select_suites(q, chosen, msg, sizeof msg);
    if (n_suites < 0) {
        fprintf(stderr, "miras-bench: --suite: %s\n", msg);
        return 2;
    }
    static char variants[N_SUITES][MAX_VARIANTS][NAME_MAX_LEN];
    int n_variants[N_SUITES];
    for (int s = 0; s < n_suites; s++) {
        n_variants[s] = expand_variants(o->variants ? o->variants : chosen[s]->variants,
                                        variants[s], msg, sizeof msg);
        if (n_variants[s] < 0) {
            if (o->variants) fprintf(stderr, "miras-bench: --variants: %s\n", msg);
            else fprintf(stderr, "miras-bench: suite %s's default variants: %s\n",
                         chosen[s]->name, msg);
            return 2;
        }
    }
    for (int i = 0; i < q->n_sets; i++)
        if (!strchr(q->sets[i], '=') || q->sets[i][0] == '=' || strchr(q->sets[i], ' ')) {
            fprintf(stderr, "miras-bench: --set wants KEY=VALUE, got '%s'\n", q->sets[i]);
            return 2;
        }
    if (o->data && access(o->data, R_OK) != 0) {
        fprintf(stderr, "miras-bench: --data '%s': %s\n", o->data, strerror(errno));
        return 2;
    }
    char train[PATH_LEN + 32];
    int found = find_train(q, train, sizeof train);
    if (found) return found;
    const char *out = q->out ? q->out : DEFAULT_OUT;
    if (make_dir(out, msg, sizeof msg) != 0) {
        fprintf(stderr, "miras-bench: --out: %s\n", msg);
        return 1;
    }

    /* every case, with its text or the reason its suite is skipped */
    quality_case *cases = calloc(MAX_CASES, sizeof *cases);
    static char data[N_SUITES][PATH_LEN];
    const char *data_of[N_SUITES];
    if (!cases) {
        fprintf(stderr, "miras-bench: out of memory\n");
        return 1;
    }
    int n = 0, to_run = 0;
    for (int s = 0; s < n_suites && n < MAX_CASES; s++) {
        const quality_suite *su = chosen[s];
        char skip[512] = "";
        data_of[s] = NULL;
        if (su->data && !strcmp(su->data, DATA_TEXT)) {
            data_of[s] = o->data ? o->data : find_shared_text(data[s], sizeof data[s]);
            if (!data_of[s])
                snprintf(skip, sizeof skip, TEXT_NAME " not found (../shared/data/ beside the "
                         "checkout or the working directory); give --data PATH");
        } else if (su->data) {
            data_of[s] = find_checkout_file(su->data, data[s], sizeof data[s]);
            if (!data_of[s])
                snprintf(skip, sizeof skip, "%s not found in the checkout holding this "
                         "executable nor in the working directory", su->data);
        }
        if (skip[0]) fprintf(stderr, "miras-bench: skipping suite %s: %s\n", su->name, skip);
        for (int v = 0; v < n_variants[s] && n < MAX_CASES; v++) {
            quality_case *c = &cases[n++];
            *c = (quality_case){.suite = su, .steps = q->steps ? q->steps : suite_steps(su),
                                .params = -1, .val_loss = NAN, .val_acc = NAN,
                                .train_loss = NAN, .wall_s = NAN, .floor = su->floor,
                                .status = skip[0] ? CASE_SKIPPED : CASE_OK};
            snprintf(c->variant, sizeof c->variant, "%s", variants[s][v]);
            case_dir(c->dir, sizeof c->dir, out, su, c->variant);
            for (int r = 0; r < MAX_RULES && su->rules[r].match; r++)
                if (su->rules[r].floor != 0 && rule_matches(su->rules[r].match, c->variant))
                    c->floor = su->rules[r].floor;
            if (skip[0]) snprintf(c->message, sizeof c->message, "%s", skip);
            else to_run++;
        }
    }

    /* one after another: [i/N] suite variant ... wall  metric */
    int done = 0, failed = 0, below = 0;
    for (int s = 0, i = 0; s < n_suites; s++) {
        for (; i < n && cases[i].suite == chosen[s]; i++) {
            quality_case *c = &cases[i];
            if (c->status == CASE_SKIPPED) {
                print_case_json_line(c);
                continue;
            }
            fprintf(stderr, "[%d/%d] %s %s ... ", ++done, to_run, c->suite->name, c->variant);
            fflush(stderr);
            run_case(c, train, data_of[s], q);
            if (c->status == CASE_OK) {
                const quality_case *base = baseline_of(cases, i + 1, c->suite);
                fprintf(stderr, c->wall_s < 10 ? "%.2f s  %s %.4f" : "%.1f s  %s %.4f", c->wall_s,
                        lower_is_better(c->suite->metric) ? "val_loss" : "acc", metric_of(c));
                if (base && base != c)
                    fprintf(stderr, " (%+.4f vs %s)", metric_of(c) - metric_of(base),
                            base->variant);
                fprintf(stderr, "%s\n", below_floor(c) ? "  BELOW FLOOR" : "");
            } else {
                fprintf(stderr, "FAILED: %s\n", c->message);
            }
            failed += c->status == CASE_FAILED;
            below += below_floor(c);
            print_case_json_line(c);
        }
    }

    /* a table and a chart per suite */
    for (int s = 0; s < n_suites; s++) {
        const quality_suite *su = chosen[s];
        char svg_path[PATH_LEN + 64];
        const char *svg = NULL;
        bool ran = false;
        int64_t steps = 0;
        for (int i = 0; i < n; i++) {
            if (cases[i].suite != su) continue;
            ran |= cases[i].status != CASE_SKIPPED;
            steps = cases[i].steps;
        }
        if (ran) {
            size_t size = 0;
            char *doc = suite_svg(cases, n, su, steps, &size);
            snprintf(svg_path, sizeof svg_path, "%s/quality-%s.svg", out, su->name);
            if (doc && write_atomic(svg_path, doc, size, msg, sizeof msg) == 0) svg = svg_path;
            else fprintf(stderr, "miras-bench: %s\n", doc ? msg : "out of memory for the chart");
            free(doc);
        }
        const char *name = data_of[s] ? strrchr(data_of[s], '/') : NULL;
        const char *data_name = data_of[s] ? (name ? name + 1 : data_of[s]) : NULL;
        if (ran) {
            size_t size = 0;
            char *doc = suite_markdown(cases, n, su, data_name, &size), md_path[PATH_LEN + 64];
            snprintf(md_path, sizeof md_path, "%s/quality-%s.md", out, su->name);
            if (!doc || write_atomic(md_path, doc, size, msg, sizeof msg) != 0)
                fprintf(stderr, "miras-bench: %s\n", doc ? msg : "out of memory for the table");
            free(doc);
        }
        if (!o->json_only) print_suite_table(cases, n, su, data_name, svg);
    }
    if (!o->json_only)
        printf("each case: one miras-train run (its output in <out>/<suite>-<variant>/train.out);"
               "\nthe metric is the last validation in its log.csv; wall = the run's own time.\n");
    for (int i = 0; i < n; i++) free(cases[i].command);
    free(cases);
    if (q->check && (failed || below)) {
        fprintf(stderr, "miras-bench: --check: %d case%s failed, %d below %s floor\n", failed,
                failed == 1 ? "" : "s", below, below == 1 ? "its" : "their");
        return 1;
    }
    return 0;
}

/* ================================================================ --help */

static const char *suite_arg(const quality_suite *s, const char *opt)
{
    for (int i = 0; s->args[i] && s->args[i + 1]; i++)
        if (!strcmp(s->args[i], opt)) return s->args[i + 1];
    return NULL;
}

void bench_quality_usage(FILE *f)
{
    fprintf(f, "quality (each case one miras-train run, one after another; docs/bench.md):\n"
               "  --suite A,B,..    suites, a comma list or repeated (default " DEFAULT_SUITES
               "):\n");
    int w = 11;
    for (int i = 0; i < N_SUITES; i++)
        if ((int)strlen(suites[i].name) > w) w = (int)strlen(suites[i].name);
    for (int i = 0; i < N_SUITES; i++) {
        const quality_suite *s = &suites[i];
        const char *task = suite_arg(s, "--task"), *d = s->data, *kind = suite_arg(s, "--niah");
        const char *pairs = !strcmp(task ? task : "", "capacity") ? suite_arg(s, "--pairs") : NULL;
        fprintf(f, "    %-*s task %s%s%s%s%s%s, %s, %lld steps%s%s\n", w, s->name, task ? task : "lm",
                kind ? " " : "", kind ? kind : "", pairs ? " " : "", pairs ? pairs : "",
                pairs ? " pairs" : "", s->metric, (long long)suite_steps(s), d ? ", text " : "",
                !d ? "" : !strcmp(d, DATA_TEXT) ? TEXT_NAME : d);
    }
    for (int i = 0; i < N_ALIASES; i++)
        fprintf(f, "    %-*s = %s\n", w, aliases[i].name, aliases[i].suites);
    fprintf(f,
        "  --quick           --suite quick: the test suite's subset (<= 3 minutes)\n"
        "  --variants A,B,.. variants in place of every suite's own list. A variant is a mixer\n"
        "                    spec -- a MIRAS preset, presets (every one), attention, swa[:W],\n"
        "                    samba:<preset>[:W], hope -- then optionally its own overrides,\n"
        "                    each +KEY=VALUE: moneta+p=2+q=4, titans+algorithm=gd,\n"
        "                    titans+memory=matrix; each becomes --set KEY=VALUE for that case\n"
        "                    (after the suite's and the user's, so it wins) and the run checks\n"
        "                    it reached the model (its checkpoint's lm.mixer_overrides)\n"
        "  --steps N         every suite's steps instead of its own (a --warmup >= N becomes "
        "N/10)\n"
        "  --set KEY=VALUE   a --set for every MIRAS case (presets, samba:<preset>); "
        "repeatable\n"
        "  --data PATH       the text of the suites that take one (default: as train's; they\n"
        "                    are skipped without one)\n"
        "  --out DIR         runs in DIR/<suite>-<variant>/, per suite a chart\n"
        "                    DIR/quality-<suite>.svg and a Markdown table\n"
        "                    DIR/quality-<suite>.md (default " DEFAULT_OUT ")\n"
        "  --train PATH      the miras-train to run (default: the one beside this "
        "executable)\n"
        "  --check           exit status 1 when a case failed or is below its floor\n"
        "Output: one JSON line per case (suite, variant, command, steps, params, metric,\n"
        "val_loss, val_acc, train_loss, wall_s, mixer_overrides, status ok/failed/skipped,\n"
        "message, floor, ok, out), then a table per suite (delta to the baseline, floor, ok or\n"
        "BELOW FLOOR), its chart and its Markdown table. Exit status 0 (a failed run is a\n"
        "row); with --check 1 when a case failed or is below its floor; 1 when miras-train\n"
        "is missing; 2 on bad arguments.\n");
}
