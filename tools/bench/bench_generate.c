/* miras-bench generate: greedy decoding of the byte-level language model
 * one token at a time (mi_lm_step) after a prompt, per mixer and prompt
 * length; each case in a child process of its own (bench_common).
 *
 * A case: an untrained model (the train case's shape: vocab 256, d_model
 * 128, 4 layers, 4 heads, SwiGLU 384, f32, seed 1; each preset's own chunk
 * size), a state with room for every token (mi_lm_state_reserve, as
 * mi_generate makes it), the first P bytes of the text read by steps (timed
 * once: the prompt), then --reps repetitions of GEN_TOKENS greedy tokens, each fed
 * back, continuing the same sequence (the decode: time per token). The
 * decode's prefix grows from P to P + reps·GEN_TOKENS over the repetitions.
 * Full attention's cost per token grows with the prefix, a recurrent
 * model's does not: the table ends with each variant's CPU time per token
 * (the median over the repetitions) at its longest prompt over that at its
 * shortest. Wall times on a shared machine say more about the neighbours. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

#define GEN_TOKENS 16 /* greedy tokens a repetition */
#define GEN_MAX_PROMPTS 8

static const char gen_default_variants[] = "attention,swa,gated-deltanet,titans,mamba2,hope";
static const int64_t gen_default_prompts[] = {1024, 4096};

typedef struct gen_case {
    const char *spec;
    const uint8_t *text; /* at least P bytes */
    int64_t P, batch;
    const bench_opts *o;
} gen_case;

typedef struct gen_state {
    const mi_lm *lm;
    mi_lm_state *state;
    mi_scope *step[2]; /* the logits of one step live until the next */
    mi_tensor *logits;
    int cur;
    int64_t batch;
    mi_sampler greedy;
    bool failed;
} gen_state;

/* One token per sequence: row b's byte (text, or the argmax of the last
 * logits when text is NULL) through mi_lm_step. */
static void gen_step(gen_state *s, const uint8_t *text)
{
    if (s->failed) return;
    mi_scope *sc = s->step[s->cur];
    mi_scope_reset(sc);
    mi_scope_enter(sc);
    mi_tensor *tok = mi_tensor_new(MI_I64, MI_SHAPE(s->batch));
    for (int64_t b = 0; tok && b < s->batch && !s->failed; b++) {
        int64_t t = text ? text[0] : mi_sample_token(s->logits, b, &s->greedy);
        if (t < 0) s->failed = true;
        ((int64_t *)tok->data)[b] = t;
    }
    if (!tok || s->failed || !(s->logits = mi_lm_step(s->lm, s->state, tok))) s->failed = true;
    mi_scope_leave();
    s->cur = !s->cur;
}

static double user_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* reps repetitions of GEN_TOKENS greedy tokens (until budget_s once one is
 * done): wall and CPU time per token of each, their medians; getrusage's
 * user and system time and faults over them all, per token. */
static void time_decode(gen_state *s, const bench_opts *o, result *out)
{
    double *wall = malloc(sizeof(double) * (size_t)o->reps * 2), *cpu = wall + o->reps;
    if (!wall) {
        s->failed = true;
        mi_error_set("out of memory");
        return;
    }
    timing *t = &out->t;
    *t = (timing){.inner = 1};
    struct rusage u0, u1;
    getrusage(RUSAGE_SELF, &u0);
    double start = now_s();
    for (; t->reps < o->reps && !s->failed; t->reps++) {
        if (t->reps >= 1 && now_s() - start > o->budget_s) break;
        double w = now_s(), c = cpu_s();
        for (int i = 0; i < GEN_TOKENS; i++) gen_step(s, NULL);
        wall[t->reps] = (now_s() - w) * 1e3 / GEN_TOKENS;
        cpu[t->reps] = (cpu_s() - c) * 1e3 / GEN_TOKENS;
    }
    getrusage(RUSAGE_SELF, &u1);
    double tokens = (double)t->reps * GEN_TOKENS;
    t->faults = (double)(u1.ru_minflt - u0.ru_minflt) / tokens;
    t->user_ms = ((double)(u1.ru_utime.tv_sec - u0.ru_utime.tv_sec) * 1e3 +
                  (double)(u1.ru_utime.tv_usec - u0.ru_utime.tv_usec) / 1e3) / tokens;
    t->sys_ms = ((double)(u1.ru_stime.tv_sec - u0.ru_stime.tv_sec) * 1e3 +
                 (double)(u1.ru_stime.tv_usec - u0.ru_stime.tv_usec) / 1e3) / tokens;
    out->cpu_ms_median = median_of(cpu, t->reps);
    t->median_ms = median_of(wall, t->reps);
    t->min_ms = wall[0];
    t->max_ms = wall[t->reps - 1];
    free(wall);
}

static void gen_child(const void *ctx, result *out)
{
    const gen_case *gc = ctx;
    mi_scope *model = mi_scope_new("bench-generate-model");
    gen_state s = {.batch = gc->batch, .greedy = {.temperature = 0},
                   .step = {mi_scope_new("bench-generate-a"), mi_scope_new("bench-generate-b")}};
    mi_lm lm;
    mi_set_grad_enabled(false);
    mi_scope_enter(model);
    mi_lm_config c = mi_lm_config_default();
    char set[MI_LM_TEXT + 8];
    snprintf(set, sizeof set, "mixer=%s", gc->spec);
    if (!model || !s.step[0] || !s.step[1] || mi_lm_config_set(&c, "vocab=256") != 0 ||
        mi_lm_config_set(&c, "d_model=128") != 0 || mi_lm_config_set(&c, "layers=4") != 0 ||
        mi_lm_config_set(&c, "heads=4") != 0 || mi_lm_config_set(&c, "mlp_hidden=384") != 0 ||
        mi_lm_config_set(&c, set) != 0 || mi_lm_init(&lm, &c, MI_F32, 1, model) != 0) {
        note_error(out, "model");
        goto done;
    }
    s.lm = &lm;
    if (!(s.state = mi_lm_state_new(&lm, gc->batch))) {
        note_error(out, "state");
        goto done;
    }
    /* as mi_generate: room for every token at once */
    if (mi_lm_state_reserve(&lm, s.state, gc->P + (int64_t)gc->o->reps * GEN_TOKENS) != 0) {
        note_error(out, "state");
        goto done;
    }
    double w0 = now_s(), u0 = user_s();
    for (int64_t i = 0; i < gc->P && !s.failed; i++) gen_step(&s, gc->text + i);
    out->prompt_ms = (now_s() - w0) * 1e3;
    out->prompt_user_ms = (user_s() - u0) * 1e3;
    if (s.failed) {
        note_error(out, "prompt");
        goto done;
    }
    time_decode(&s, gc->o, out);
    if (s.failed) note_error(out, "decode");
    out->state_kb = (long)(mi_lm_state_bytes(s.state) / 1024);
done:
    mi_scope_leave();
    out->rss_kb = peak_rss_kb();
    mi_lm_state_free(s.state);
    mi_scope_free(s.step[0]);
    mi_scope_free(s.step[1]);
    mi_scope_free(model);
}

/* The prompt bytes: the text's first n, else generated printable bytes. */
static uint8_t *prompt_bytes(const char *path, int64_t n, bool *generated)
{
    uint8_t *b = malloc((size_t)n);
    if (!b) return NULL;
    FILE *f = path ? fopen(path, "rb") : NULL;
    size_t got = f ? fread(b, 1, (size_t)n, f) : 0;
    if (f) fclose(f);
    *generated = got < (size_t)n;
    if (*generated) {
        mi_rng r;
        mi_rng_seed(&r, 3);
        for (int64_t i = 0; i < n; i++) b[i] = (uint8_t)(' ' + mi_rng_below(&r, 95));
    }
    return b;
}

static void print_gen_table(int first, const int64_t *prompts, int np, const char **variants,
                            int nv)
{
    printf("\n%-32s %6s %9s %9s %9s %9s %9s %8s %9s %9s %8s %9s\n", "case", "prompt",
           "read", "user", "ms/token", "min", "max", "CPU ms", "user ms", "tokens/s", "state",
           "peak RSS");
    for (int i = first; i < n_results; i++) {
        const result *r = &results[i];
        if (r->failed || r->note[0]) {
            printf("%-32s %s%.160s%s\n", r->name, r->failed ? "FAILED: " : "skipped (", r->note,
                   r->failed ? "" : ")");
            continue;
        }
        printf("%-32s %6.0f %8.2fs %8.2fs %9.3f %9.3f %9.3f %8.3f %9.3f %9.1f %6ldkB "
               "%7.0fMB\n", r->name, r->prompt_tokens, r->prompt_ms / 1e3,
               r->prompt_user_ms / 1e3, r->t.median_ms, r->t.min_ms, r->t.max_ms,
               r->cpu_ms_median, r->t.user_ms,
               1e3 / r->t.median_ms * r->tokens,
               r->state_kb, (double)r->rss_kb / 1024.0);
    }
    printf("prompt: the bytes read by steps before decoding (read: wall time, user: CPU); "
           "ms/token: median/min/max\nwall time per token over the repetitions of %d greedy "
           "tokens; CPU ms: the median over them of the\nprocess's CPU time per token; user ms: "
           "user CPU time per token over them all; tokens/s = B / median;\nstate: "
           "mi_lm_state_bytes after the last token.\n", GEN_TOKENS);
    if (np < 2) return;
    printf("CPU ms per token at prompt %lld / at prompt %lld:", (long long)prompts[np - 1],
           (long long)prompts[0]);
    for (int v = 0; v < nv; v++) {
        const result *lo = &results[first + v * np], *hi = &results[first + v * np + np - 1];
        bool ok = !lo->failed && !hi->failed && !lo->note[0] && !hi->note[0];
        printf(" %s %s", variants[v], ok ? "" : "-");
        if (ok) printf("%.2fx", hi->cpu_ms_median / lo->cpu_ms_median);
        printf(v + 1 < nv ? "," : "\n");
    }
}

int bench_generate(const bench_opts *o)
{
    char vbuf[512], path[4352];
    const char *variants[32];
    int nv = variant_list(o->variants, gen_default_variants, NULL, NULL, "generate", vbuf,
                          sizeof vbuf, variants, 32);
    if (nv < 0) return 2;
    int64_t prompts[GEN_MAX_PROMPTS];
    int np = 0;
    if (o->seq_len) prompts[np++] = o->seq_len;
    else
        for (size_t i = 0; i < sizeof gen_default_prompts / sizeof gen_default_prompts[0]; i++)
            prompts[np++] = gen_default_prompts[i];
    int64_t longest = prompts[np - 1];
    const char *data = o->data;
    if (data && access(data, R_OK) != 0) {
        fprintf(stderr, "miras-bench: --data '%s': %s\n", data, strerror(errno));
        return 2;
    }
    if (!data) data = find_checkout_file(TEXT_PATH, path, sizeof path);
    bool generated = false;
    uint8_t *text = prompt_bytes(data, longest, &generated);
    if (!text) {
        fprintf(stderr, "miras-bench: generate: out of memory\n");
        return 1;
    }
    char data_txt[120];
    const char *base = data ? strrchr(data, '/') : NULL;
    if (generated)
        snprintf(data_txt, sizeof data_txt, "prompt: generated bytes (%.60s has fewer than %lld)",
                 data ? data : TEXT_PATH, (long long)longest);
    else snprintf(data_txt, sizeof data_txt, "prompt: the first bytes of %.80s",
                  base ? base + 1 : data);
    int first = n_results, failed = 0;
    int64_t batch = o->batch ? o->batch : 1;
    for (int v = 0; v < nv; v++)
        for (int p = 0; p < np && n_results < MAX_RESULTS; p++) {
            gen_case gc = {.spec = variants[v], .text = text, .P = prompts[p], .batch = batch,
                           .o = o};
            result *r = &results[n_results++];
            memset(r, 0, sizeof *r);
            snprintf(r->name, sizeof r->name, "generate.%s.%lld", variants[v],
                     (long long)prompts[p]);
            snprintf(r->config, sizeof r->config, "mixer %s; vocab 256 d_model 128 layers 4 "
                     "heads 4 SwiGLU 384; f32, untrained (seed 1); B=%lld; prompt %lld bytes "
                     "by steps, then %d x %d greedy tokens (prefix %lld to %lld); %.120s",
                     variants[v], (long long)batch, (long long)prompts[p], o->reps, GEN_TOKENS,
                     (long long)prompts[p], (long long)(prompts[p] + o->reps * GEN_TOKENS),
                     data_txt);
            r->threads = o->threads;
            r->raw = -1;
            r->loss = NAN;
            r->tokens = (double)batch; /* a step's */
            r->prompt_tokens = (double)prompts[p];
            run_isolated(gen_child, &gc, o, r);
            failed += r->failed;
            print_case_json(r);
        }
    free(text);
    if (!o->json_only) print_gen_table(first, prompts, np, variants, nv);
    return failed ? 1 : 0;
}
