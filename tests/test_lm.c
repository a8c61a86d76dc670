/* The language model and the mixer factory: parameter names and
 * initialisation, gradcheck of the loss through a whole 2-block LM w.r.t.
 * every parameter with each mixer kind (the samba hybrid's composition is
 * in test_samba.c), causality of the whole model, the loss of a constant
 * prediction (log V) and the ignore index, MIRAS overrides, the config's
 * text form and its checkpoint metadata (round trip through a safetensors
 * file, bad and missing values), and a short training run. */
#include <unistd.h>

#include "harness.h"

enum { V = 7, DM = 4, HEADS = 2, TT = 5 };

static mi_lm_config tiny(const char *mixer, const char *const *ov, int n_ov)
{
    mi_lm_config c = mi_lm_config_default();
    c.vocab = V;
    c.d_model = DM;
    c.layers = 2;
    c.heads = HEADS;
    c.mlp_hidden = 6;
    ck_assert(strlen(mixer) < MI_LM_TEXT);
    strcpy(c.mixer, mixer);
    for (int i = 0; i < n_ov; i++) {
        char kv[MI_LM_TEXT + 8];
        snprintf(kv, sizeof kv, "mixer.%s", ov[i]);
        ck_assert_msg(mi_lm_config_set(&c, kv) == 0, "%s", mi_error());
    }
    return c;
}

static void make_lm(mi_lm *lm, const mi_lm_config *c, mi_dtype dt, uint64_t seed)
{
    ck_assert_msg(mi_lm_init(lm, c, dt, seed, test_scope) == 0, "%s: %s", c->mixer, mi_error());
}

/* Random tokens [B, T] in [0, vocab). */
static mi_tensor *tokens(uint64_t seed, int64_t B, int64_t T, int64_t vocab)
{
    mi_rng r;
    mi_rng_seed(&r, seed);
    mi_tensor *t = mi_zeros(MI_I64, MI_SHAPE(B, T));
    for (int64_t i = 0; i < t->numel; i++) ((int64_t *)t->data)[i] = (int64_t)mi_rng_below(&r, (uint64_t)vocab);
    return t;
}

static void set_token(mi_tensor *t, int64_t i, int64_t v) { ((int64_t *)t->data)[i] = v; }

/* The next-token targets of a [B, T] batch: tokens shifted left by one, the
 * last position of every row ignored. */
static mi_tensor *next_targets(const mi_tensor *tok)
{
    int64_t B = tok->shape[0], T = tok->shape[1];
    mi_tensor *t = mi_zeros(MI_I64, MI_SHAPE(B, T));
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < T; s++)
            set_token(t, b * T + s, s + 1 < T ? ((int64_t *)tok->data)[b * T + s + 1] : MI_LM_IGNORE);
    return t;
}

/* ---------------------------------------------------------------- parameters */

START_TEST(parameters_are_named_listed_and_deterministic)
{
    mi_lm_config c = tiny("attention", NULL, 0);
    mi_lm a, b, other;
    make_lm(&a, &c, MI_F64, 3);
    make_lm(&b, &c, MI_F64, 3);
    make_lm(&other, &c, MI_F64, 4);
    int n, nb;
    const mi_named_tensor *p = mi_lm_params(&a, &n), *pb = mi_lm_params(&b, &nb);
    /* embeddings; per block: mixer norm, 4 projections, mlp norm, 3 MLP; final norm */
    ck_assert_int_eq(n, 1 + 2 * (1 + 4 + 1 + 3) + 1);
    ck_assert_int_eq(nb, n);
    const char *want[] = {"embeddings.weight", "blocks.0.mixer_norm.weight",
                          "blocks.0.mixer.q_proj", "blocks.0.mixer.k_proj",
                          "blocks.0.mixer.v_proj", "blocks.0.mixer.out_proj",
                          "blocks.0.mlp_norm.weight", "blocks.0.mlp.w_gate", "blocks.0.mlp.w_up",
                          "blocks.0.mlp.w_down", "blocks.1.mixer_norm.weight"};
    for (int i = 0; i < 11; i++) ck_assert_str_eq(p[i].name, want[i]);
    ck_assert_str_eq(p[n - 1].name, "final_norm.weight");
    double differs = 0;
    for (int i = 0; i < n; i++) {
        ck_assert(p[i].tensor->requires_grad && p[i].tensor->scope == test_scope);
        ck_assert(p[i].tensor->dtype == MI_F64);
        ck_assert_str_eq(p[i].tensor->name, p[i].name);
        ck_assert_str_eq(p[i].name, pb[i].name);
        for (int j = 0; j < i; j++) ck_assert_str_ne(p[i].name, p[j].name);
        for (int64_t e = 0; e < p[i].tensor->numel; e++) {
            ck_assert(mi_get(p[i].tensor, e) == mi_get(pb[i].tensor, e));
            differs += fabs(mi_get(p[i].tensor, e) - mi_get(other.params[i].tensor, e));
        }
    }
    ck_assert(differs > 0);
    ck_assert_ptr_null(a.lm_head);
    ck_assert_int_eq(a.mlp_hidden, 6);
    ck_assert_int_eq(mi_lm_param_numel(&a), V * DM + 2 * (DM + 4 * DM * DM + DM + 3 * DM * 6) + DM);
    /* the size from the config alone: every parameter but the mixers' and their norms' */
    ck_assert_int_eq(mi_lm_backbone_numel(&c), V * DM + 2 * (DM + 3 * DM * 6) + DM);

    /* untied: an lm_head at the end; samba: no mixer_norm, its own names */
    c = tiny("samba:gated-deltanet:3", (const char *[]){"gate_rank=2"}, 1);
    c.tie_embeddings = false;
    make_lm(&a, &c, MI_F64, 3);
    p = mi_lm_params(&a, &n);
    ck_assert_str_eq(p[n - 1].name, "lm_head.weight");
    ck_assert(p[n - 1].tensor->shape[0] == DM && p[n - 1].tensor->shape[1] == V);
    ck_assert_str_eq(p[1].name, "blocks.0.mixer.miras_norm.weight");
    ck_assert_str_eq(p[2].name, "blocks.0.mixer.miras.q_proj");
    bool swa_norm = false, swa_out = false;
    for (int i = 0; i < n; i++) {
        ck_assert(strstr(p[i].name, "mixer_norm") == NULL);
        swa_norm |= !strcmp(p[i].name, "blocks.1.mixer.swa_norm.weight");
        swa_out |= !strcmp(p[i].name, "blocks.1.mixer.swa.out_proj");
    }
    ck_assert(swa_norm && swa_out);
    ck_assert(a.blocks[0].mixer.residual_inside && a.blocks[0].mixer_norm == NULL);
    int64_t backbone = 0;
    for (int i = 0; i < n; i++)
        if (!strstr(p[i].name, ".mixer.")) backbone += p[i].tensor->numel;
    ck_assert_int_eq(mi_lm_backbone_numel(&c), backbone);
    c.layers = 0;
    ck_assert_int_eq(mi_lm_backbone_numel(&c), -1);
    ck_assert_error_has("layers must be in [1, 1024], got 0");
    mi_error_clear();

    /* every parameter gets a gradient from the loss */
    mi_tensor *tok = tokens(5, 2, TT, V);
    mi_tensor *loss = mi_lm_loss(&a, tok, next_targets(tok));
    ck_assert_msg(loss != NULL, "%s", mi_error());
    ck_assert_int_eq(mi_backward(loss), 0);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(p[i].tensor->grad != NULL, "%s has no gradient", p[i].name);
        double s = mi_item(mi_sum(mi_square(p[i].tensor->grad), MI_ALL, false));
        ck_assert_msg(s > 0 && isfinite(s), "%s: |grad|^2 = %g", p[i].name, s);
    }
}
END_TEST

/* BENCH's train configuration is the default; the initialisation follows
 * lm.c's table, and a fresh model predicts nearly uniformly. */
START_TEST(defaults_and_initialisation)
{
    mi_lm_config c = mi_lm_config_default();
    ck_assert(c.vocab == 256 && c.d_model == 128 && c.layers == 4 && c.heads == 4);
    ck_assert(c.mlp_hidden == 0 && c.tie_embeddings && c.window == 64);
    ck_assert_str_eq(c.mixer, "gated-deltanet");
    mi_lm lm;
    make_lm(&lm, &c, MI_F32, 1);
    ck_assert_int_eq(lm.mlp_hidden, 384);
    const mi_tensor *checks[] = {lm.embeddings, lm.blocks[0].w_gate, lm.blocks[3].w_down};
    const double stds[] = {0.02, 1 / sqrt(128.0), 1 / sqrt(8.0 * 384)};
    for (int i = 0; i < 3; i++) {
        double s = 0, m = 0;
        for (int64_t e = 0; e < checks[i]->numel; e++) {
            double v = mi_get(checks[i], e);
            s += v * v;
            m += v;
        }
        double sd = sqrt(s / (double)checks[i]->numel);
        ck_assert_msg(fabs(sd / stds[i] - 1) < 0.03, "std %g, want %g", sd, stds[i]);
        ck_assert(fabs(m / (double)checks[i]->numel) < 0.1 * stds[i]);
    }
    for (int64_t e = 0; e < DM; e++) ck_assert(mi_get(lm.final_norm, e) == 1);
    /* the MIRAS block's output projection takes out_scale 1/√(2·layers) */
    const mi_miras_block *blk = lm.blocks[0].mixer.self;
    ck_assert_close(blk->config.out_scale, 1 / sqrt(8.0), 1e-15);
    mi_tensor *tok = tokens(2, 1, 8, 256);
    mi_tensor *loss = mi_lm_loss(&lm, tok, next_targets(tok));
    ck_assert_msg(loss != NULL, "%s", mi_error());
    ck_assert_msg(fabs(mi_item(loss) - log(256.0)) < 0.1, "initial loss %g, log V %g",
                  mi_item(loss), log(256.0));
}
END_TEST

/* ---------------------------------------------------------------- gradcheck */

typedef struct lm_ctx {
    const mi_lm *lm;
    mi_tensor *tokens, *targets;
} lm_ctx;

static int loss_fn(mi_tensor *const *in, int n, mi_tensor **out, void *ctx)
{
    const lm_ctx *c = ctx;
    out[0] = mi_lm_loss(c->lm, c->tokens, c->targets);
    return out[0] ? 1 : -1;
}

/* The loss of a tiny 2-block LM (vocab 7, d 4, 2 heads, T 5, gate rank 2)
 * against central differences w.r.t. every parameter, MI_MAX_INPUTS at a
 * time (gradcheck perturbs them in place, the loss reads them).
 * The embeddings are rescaled to unit size first: at the N(0, 0.02²) init a
 * 4-wide row can have an rms of 0.006, and the first RMSNorm, x/√(mean x² +
 * 1e-6), then bends on the scale of 1e-4 — central differences with eps
 * 1e-6 stop being accurate to 1e-3 (measured: they converge to the
 * analytic value only below eps 1e-7). At unit scale they agree to 1e-9. */
static void gradcheck_lm(const char *mixer, const char *const *ov, int n_ov, int64_t B, bool tied)
{
    mi_lm_config c = tiny(mixer, ov, n_ov);
    c.tie_embeddings = tied;
    mi_lm lm;
    make_lm(&lm, &c, MI_F64, 17);
    for (int64_t e = 0; e < lm.embeddings->numel; e++)
        mi_set(lm.embeddings, e, mi_get(lm.embeddings, e) / 0.02);
    mi_tensor *tok = tokens(18, B, TT, V);
    mi_tensor *tgt = next_targets(tok);
    set_token(tgt, 1, MI_LM_IGNORE);  /* an ignored target inside the sequence too */
    lm_ctx ctx = {&lm, tok, tgt};
    int n;
    const mi_named_tensor *p = mi_lm_params(&lm, &n);
    int64_t entries = gradcheck_params(mixer, loss_fn, &ctx, NULL, p, n);
    ck_assert_int_eq(entries, mi_lm_param_numel(&lm));  /* every parameter entry, once */
    if (getenv("LM_VERBOSE"))
        fprintf(stderr, "%s: %d parameters, %lld entries\n", mixer, n, (long long)entries);
}

START_TEST(gradcheck_attention)
{
    gradcheck_lm("attention", NULL, 0, 2, true);
    gradcheck_lm("swa:2", NULL, 0, 1, false);
}
END_TEST

/* Gate levels as in tests/test_block.c: mid-range, so the inner loop matters. */
START_TEST(gradcheck_gated_deltanet)
{
    const char *ov[] = {"gate_rank=2", "chunk=2", "eta=0.5", "alpha=0.9"};
    gradcheck_lm("gated-deltanet", ov, 4, 2, true);
}
END_TEST

START_TEST(gradcheck_titans)
{
    const char *ov[] = {"gate_rank=2", "eta=0.2", "alpha=0.9", "mu=0.6"};
    gradcheck_lm("titans", ov, 4, 1, false);
}
END_TEST

/* Yaad: δ far below the error norm (the ℓ1 branch), away from the switch. */
START_TEST(gradcheck_yaad)
{
    const char *ov[] = {"gate_rank=2", "eta=0.2", "delta=0.02", "sign_sharpness=10"};
    gradcheck_lm("yaad", ov, 4, 1, true);
}
END_TEST

START_TEST(gradcheck_lattice_dec)
{
    const char *ov[] = {"gate_rank=2", "alpha=0.9"};
    gradcheck_lm("lattice-dec", ov, 2, 2, true);
}
END_TEST

/* HOPE (Nested Learning): self-modifying memories and a CMS updated every 2 tokens. */
START_TEST(gradcheck_hope)
{
    const char *ov[] = {"cms=2"}; /* (overrides cannot hold a comma) */
    gradcheck_lm("hope", ov, 1, 2, true);
}
END_TEST

START_TEST(gradcheck_samba)
{
    const char *ov[] = {"gate_rank=2", "chunk=2", "eta=0.5", "alpha=0.9"};
    gradcheck_lm("samba:gated-deltanet:3", ov, 4, 2, false);
}
END_TEST

/* ---------------------------------------------------------------- causality */

START_TEST(logits_at_t_ignore_later_tokens)
{
    const char *specs[] = {"attention", "swa:2", "gated-deltanet", "titans", "lattice-dec",
                           "samba:gated-deltanet:2", "hope"};
    const char *att_ov[] = {NULL};
    const char *miras_ov[] = {"gate_rank=2", "chunk=2", "eta=0.3"};
    enum { T = 6 };
    for (int k = 0; k < 7; k++) {
        bool miras = k >= 2 && k < 6;
        mi_lm_config c = tiny(specs[k], miras ? miras_ov : att_ov, miras ? 3 : 0);
        mi_lm lm;
        make_lm(&lm, &c, MI_F64, 21);
        mi_tensor *tok = tokens(22, 2, T, V);
        mi_tensor *y = mi_lm_forward(&lm, tok);
        ck_assert_msg(y != NULL, "%s: %s", specs[k], mi_error());
        ck_assert(y->rank == 3 && y->shape[0] == 2 && y->shape[1] == T && y->shape[2] == V);
        for (int s = 0; s < T; s++) {
            mi_tensor *tok2 = mi_tensor_to(tok, MI_I64);
            set_token(tok2, s, (((int64_t *)tok->data)[s] + 3) % V);
            mi_tensor *y2 = mi_lm_forward(&lm, tok2);
            ck_assert_ptr_nonnull(y2);
            double changed = 0;
            for (int t = 0; t < T; t++)
                for (int v = 0; v < V; v++) {
                    double diff = fabs(mi_get(y2, t * V + v) - mi_get(y, t * V + v));
                    if (t < s)
                        ck_assert_msg(diff == 0, "%s: logits[t=%d] moved by %g when token %d "
                                      "changed", specs[k], t, diff, s);
                    if (t == s) changed += diff;
                    ck_assert(mi_get(y2, (T + t) * V + v) == mi_get(y, (T + t) * V + v));
                }
            ck_assert_msg(changed > 0, "%s: logits[%d] ignore token %d", specs[k], s, s);
        }
    }
}
END_TEST

/* ---------------------------------------------------------------- the loss */

/* A model whose logits are all equal (final norm weight 0) pays log V per
 * counted target, tied or not, whatever the targets. */
START_TEST(constant_prediction_costs_log_v)
{
    for (int tied = 0; tied < 2; tied++)
        for (int64_t vocab = 2; vocab <= 300; vocab += 149) {
            mi_lm_config c = tiny("attention", NULL, 0);
            c.vocab = vocab;
            c.tie_embeddings = tied;
            mi_lm lm;
            make_lm(&lm, &c, MI_F64, 7);
            mi_fill(lm.final_norm, 0);
            mi_tensor *tok = tokens(8, 2, TT, vocab);
            mi_tensor *tgt = next_targets(tok);
            set_token(tgt, 2, MI_LM_IGNORE);
            mi_tensor *loss = mi_lm_loss(&lm, tok, tgt);
            ck_assert_msg(loss && loss->rank == 0, "%s", mi_error());
            ck_assert_close(mi_item(loss), log((double)vocab), 1e-12);
        }
}
END_TEST

/* The mean runs over the targets ≠ −100 only; all ignored gives 0. */
START_TEST(ignored_targets_are_left_out_of_the_mean)
{
    mi_lm_config c = tiny("gated-deltanet", (const char *[]){"gate_rank=2"}, 1);
    mi_lm lm;
    make_lm(&lm, &c, MI_F64, 9);
    enum { B = 2, T = 6 };
    mi_tensor *tok = tokens(10, B, T, V);
    mi_tensor *tgt = next_targets(tok);
    int ignored[] = {0, 3, 7, 11};  /* 11: the end of row 1, already ignored */
    for (int i = 0; i < 4; i++) set_token(tgt, ignored[i], MI_LM_IGNORE);
    mi_tensor *logits = mi_lm_forward(&lm, tok);
    double sum = 0;
    int counted = 0;
    for (int i = 0; i < B * T; i++) {
        int64_t y = ((int64_t *)tgt->data)[i];
        if (y == MI_LM_IGNORE) continue;
        double mx = -INFINITY, z = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, mi_get(logits, i * V + v));
        for (int v = 0; v < V; v++) z += exp(mi_get(logits, i * V + v) - mx);
        sum += -(mi_get(logits, i * V + y) - mx - log(z));
        counted++;
    }
    ck_assert_int_eq(counted, B * T - 5);  /* 5 ignored: 0, 3, 5 (end of row 0), 7, 11 */
    mi_tensor *loss = mi_lm_loss(&lm, tok, tgt);
    ck_assert_msg(loss != NULL, "%s", mi_error());
    ck_assert_close(mi_item(loss), sum / counted, 1e-12);
    /* every target ignored: 0, and no gradient */
    for (int i = 0; i < B * T; i++) set_token(tgt, i, MI_LM_IGNORE);
    loss = mi_lm_loss(&lm, tok, tgt);
    ck_assert(loss && mi_item(loss) == 0);
    ck_assert_int_eq(mi_backward(loss), 0);
    double g = 0;
    for (int64_t e = 0; lm.embeddings->grad && e < lm.embeddings->numel; e++)
        g += fabs(mi_get(lm.embeddings->grad, e));
    ck_assert(g == 0);
}
END_TEST

/* ---------------------------------------------------------------- overrides */

START_TEST(miras_overrides_pass_through)
{
    mi_mixer_options o = mi_mixer_options_default(8, 2);
    mi_mixer m;
    mi_rng r;
    mi_rng_seed(&r, 1);
    const char *ov[] = {"bias=huber", "memory.depth=3", "chunk=16", "gate_rank=2", "eta=0.3",
                        "mu=const:0.5"};
    o.overrides = ov;
    o.n_overrides = 6;
    ck_assert_msg(mi_mixer_create(&m, "titans", &o, MI_F64, &r, test_scope) == 0, "%s", mi_error());
    const mi_miras_block *b = m.self;
    ck_assert_str_eq(b->miras.config.bias, "huber");
    ck_assert_int_eq(b->miras.config.mlp_depth, 3);
    ck_assert_int_eq(b->n_w0, 3);
    ck_assert_int_eq(b->miras.config.chunk, 16);
    ck_assert_int_eq(b->config.gate_rank, 2);
    ck_assert(b->config.eta.kind == MI_GATE_HEAD && b->config.eta.value == 0.3);
    ck_assert(b->config.mu.kind == MI_GATE_CONST && b->gate_down[MI_BLOCK_MU] == NULL);
    /* huber needs δ, which titans leaves unused: the block default fills it */
    ck_assert(b->config.delta.kind == MI_GATE_HEAD && b->config.delta.value == 1);
    ck_assert_ptr_nonnull(b->gate_down[MI_BLOCK_DELTA]);
    ck_assert_ptr_nonnull(m.forward(m.self, mi_zeros(MI_F64, MI_SHAPE(1, 3, 8))));

    /* channel-wise gates on a matrix memory; a lattice memory gets m = head_dim */
    const char *ov2[] = {"alpha=channel:0.95", "memory=lattice", "bias=lattice-dec",
                         "retention=sphere-forget"};
    o.overrides = ov2;
    o.n_overrides = 1;
    ck_assert_int_eq(mi_mixer_create(&m, "gated-deltanet", &o, MI_F64, &r, test_scope), 0);
    b = m.self;
    ck_assert(b->config.alpha.kind == MI_GATE_CHANNEL && b->gate_up[MI_BLOCK_ALPHA]->shape[1] == 8);
    o.overrides = ov2 + 1;
    o.n_overrides = 3;
    ck_assert_msg(mi_mixer_create(&m, "gated-deltanet", &o, MI_F64, &r, test_scope) == 0, "%s",
                  mi_error());
    ck_assert_int_eq(((const mi_miras_block *)m.self)->miras.config.slots, 4);

    const struct { const char *ov, *needle; } bad[] = {
        {"nonsense=1", "mixer 'titans': config: unknown key 'nonsense'"},
        {"eta=fast", "override: eta: 'fast' is not a number"},
        {"gate_rank=1.5", "override: gate_rank: '1.5' is not a whole number"},
        {"chunk", "expected KEY=VALUE, got 'chunk'"},
        {"chunk=0", "chunk must be >= 1"},
        {"alpha=1.5", "gate alpha starts at 1.5"},
        {"gate_rank=1e99", "override: gate_rank: '1e99' is not a whole number"},
    };
    for (int i = 0; i < 7; i++) {
        o.overrides = &bad[i].ov;
        o.n_overrides = 1;
        mi_error_clear();
        ck_assert_int_eq(mi_mixer_create(&m, "titans", &o, MI_F64, &r, test_scope), -1);
        ck_assert_error_has(bad[i].needle);
    }
    mi_error_clear();
    o.n_overrides = 0;
    ck_assert_int_eq(mi_mixer_create(&m, "samba:no-such", &o, MI_F64, &r, test_scope), -1);
    ck_assert_error_has("mixer 'samba:no-such': 'no-such' is not a MIRAS preset");
    mi_error_clear();
    ck_assert_int_eq(mi_mixer_create(&m, "titans:3", &o, MI_F64, &r, test_scope), -1);
    ck_assert_error_has("unknown spec 'titans:3'");
    mi_error_clear();
    /* the same judgement without making a mixer: each kind checks its own argument */
    const struct { const char *spec; int want; const char *needle; } spec[] = {
        {"samba:titans", 1, NULL},
        {"samba:titans:32", 1, NULL},
        {"swa:32", 1, NULL},
        {"swa", 1, NULL},
        {"hope", 1, NULL},
        {"gated-deltanet", 1, NULL},
        {"samba:no-such", -1, "mixer 'samba:no-such': 'no-such' is not a MIRAS preset"},
        {"samba", -1, "mixer 'samba': expected samba:<preset>[:W]"},
        {"samba:titans:0", -1, "window '0' is not a whole number >= 1"},
        {"swa:x", -1, "mixer 'swa:x': window 'x' is not a whole number >= 1"},
        {"attention:3", -1, "mixer 'attention:3': attention takes no ':' argument"},
        {"hope:1", -1, "mixer 'hope:1': hope takes no ':' argument"},
        {"titans:3", 0, "unknown spec 'titans:3'"},
        {"bogus", 0, "unknown spec 'bogus'"},
    };
    for (size_t k = 0; k < sizeof spec / sizeof spec[0]; k++) {
        mi_error_clear();
        ck_assert_msg(mi_mixer_spec_check(spec[k].spec) == spec[k].want, "%s", spec[k].spec);
        if (spec[k].needle) ck_assert_error_has(spec[k].needle);
    }
    mi_error_clear();
    /* the keys a kind's overrides take, from its own field table */
    const struct { const char *spec, *key; int want; } keys[] = {
        {"titans", "chunk", 1}, {"gated-deltanet", "chunk", 1}, {"titans", "memory_chunk", 0},
        {"hope", "chunk", 1}, {"hope", "memory_chunk", 1}, {"hope", "cms", 1},
        {"attention", "chunk", 0}, {"swa:8", "chunk", 0}, {"samba:titans", "chunk", 0},
    };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        ck_assert_msg(mi_mixer_has_key(keys[k].spec, keys[k].key) == keys[k].want, "%s %s",
                      keys[k].spec, keys[k].key);
    ck_assert_int_eq(mi_mixer_has_key("bogus", "chunk"), -1);
    ck_assert_error_has("unknown spec 'bogus'");
    mi_error_clear();
    /* the table lists the kinds, the presets' row last */
    ck_assert_str_eq(mi_mixer_kind_at(0)->name, "attention");
    int i = 0;
    while (mi_mixer_kind_at(i + 1)) i++;
    ck_assert_ptr_null(mi_mixer_kind_at(i)->name);
}
END_TEST

/* ---------------------------------------------------------------- config and metadata */

static mi_lm_config unusual_config(void)
{
    mi_lm_config c = mi_lm_config_default();
    const char *set[] = {"vocab=300", "d_model=12", "layers=3", "heads=3", "mlp_hidden=20",
                         "tie_embeddings=false", "norm_eps=1.25e-5", "rope_base=500.3",
                         "window=17", "mixer=samba:titans:9", "mixer.chunk=4",
                         "mixer.memory.depth=3", "mixer.bias=huber", "mixer.chunk=2"};
    for (int i = 0; i < 14; i++) ck_assert_msg(mi_lm_config_set(&c, set[i]) == 0, "%s", mi_error());
    return c;
}

static void assert_same_config(const mi_lm_config *a, const mi_lm_config *b)
{
    ck_assert(a->vocab == b->vocab && a->d_model == b->d_model && a->layers == b->layers);
    ck_assert(a->heads == b->heads && a->mlp_hidden == b->mlp_hidden && a->window == b->window);
    ck_assert(a->tie_embeddings == b->tie_embeddings);
    ck_assert(a->norm_eps == b->norm_eps && a->rope_base == b->rope_base);
    ck_assert_str_eq(a->mixer, b->mixer);
    ck_assert_int_eq(a->n_overrides, b->n_overrides);
    for (int i = 0; i < a->n_overrides; i++) ck_assert_str_eq(a->overrides[i], b->overrides[i]);
}

START_TEST(config_text_and_metadata_round_trip)
{
    mi_lm_config c = unusual_config();
    ck_assert_int_eq(c.n_overrides, 3);  /* chunk=2 replaced chunk=4 in place */
    ck_assert_str_eq(c.overrides[0], "chunk=2");
    ck_assert_str_eq(c.overrides[2], "bias=huber");
    mi_metadata md;
    ck_assert_int_eq(mi_lm_config_to_metadata(&c, &md), 0);
    ck_assert_int_eq(md.count, 12);
    const char *want[][2] = {{"lm.format", "1"}, {"lm.vocab", "300"}, {"lm.tie_embeddings", "false"},
                             {"lm.mixer", "samba:titans:9"},
                             {"lm.mixer_overrides", "chunk=2,memory.depth=3,bias=huber"}};
    for (int w = 0; w < 5; w++) {
        bool found = false;
        for (int i = 0; i < md.count; i++)
            if (!strcmp(md.keys[i], want[w][0])) {
                ck_assert_str_eq(md.values[i], want[w][1]);
                found = true;
            }
        ck_assert_msg(found, "%s missing", want[w][0]);
    }
    mi_lm_config back;
    ck_assert_msg(mi_lm_config_from_metadata(&back, &md) == 0, "%s", mi_error());
    assert_same_config(&c, &back);
    /* the defaults, no overrides */
    mi_lm_config d = mi_lm_config_default();
    ck_assert_int_eq(mi_lm_config_to_metadata(&d, &md), 0);
    ck_assert_int_eq(mi_lm_config_from_metadata(&back, &md), 0);
    assert_same_config(&d, &back);

    /* through a checkpoint file: the model's tensors and its config */
    mi_lm lm;
    make_lm(&lm, &c, MI_F32, 31);
    ck_assert_int_eq(mi_lm_config_to_metadata(&lm.config, &md), 0);
    char path[128];
    snprintf(path, sizeof path, "/tmp/miras-test-lm-%d.safetensors", (int)getpid());
    int n;
    const mi_named_tensor *p = mi_lm_params(&lm, &n);
    ck_assert_msg(mi_safetensors_save(path, p, n, &md) == 0, "%s", mi_error());
    mi_safetensors *st = mi_safetensors_load(path);
    unlink(path);
    ck_assert_msg(st != NULL, "%s", mi_error());
    ck_assert_int_eq(mi_lm_config_from_metadata(&back, &st->metadata), 0);
    assert_same_config(&c, &back);
    mi_lm again;
    make_lm(&again, &back, MI_F32, 31);
    int n2;
    const mi_named_tensor *p2 = mi_lm_params(&again, &n2);
    ck_assert_int_eq(n2, n);
    for (int i = 0; i < n; i++) {
        mi_tensor *t = mi_safetensors_get(st, p[i].name);
        ck_assert_msg(t != NULL, "%s not in the file", p[i].name);
        ck_assert_str_eq(p2[i].name, p[i].name);
        for (int64_t e = 0; e < t->numel; e++) {
            ck_assert(mi_get(t, e) == mi_get(p[i].tensor, e));
            ck_assert(mi_get(p2[i].tensor, e) == mi_get(p[i].tensor, e));
        }
    }
}
END_TEST

/* Replaces (or, with value NULL, drops) one key of a copy of md. */
static mi_metadata edited(const mi_metadata *md, const char *key, const char *value)
{
    const char **k = mi_scope_alloc(test_scope, sizeof(char *) * (size_t)(md->count + 1));
    const char **v = mi_scope_alloc(test_scope, sizeof(char *) * (size_t)(md->count + 1));
    int n = 0;
    bool found = false;
    for (int i = 0; i < md->count; i++) {
        if (!strcmp(md->keys[i], key)) {
            found = true;
            if (!value) continue;
            k[n] = key, v[n++] = value;
        } else {
            k[n] = md->keys[i], v[n++] = md->values[i];
        }
    }
    if (!found && value) k[n] = key, v[n++] = value;
    return (mi_metadata){n, k, v};
}

START_TEST(bad_or_missing_metadata_is_reported)
{
    mi_lm_config c = unusual_config(), out = mi_lm_config_default();
    mi_metadata md;
    ck_assert_int_eq(mi_lm_config_to_metadata(&c, &md), 0);
    const struct { const char *key, *value, *needle; } bad[] = {
        {"lm.heads", NULL, "lm config: metadata lacks 'lm.heads'"},
        {"lm.mixer_overrides", NULL, "metadata lacks 'lm.mixer_overrides'"},
        {"lm.d_model", "12x", "lm config: d_model: '12x' is not a whole number"},
        {"lm.d_model", "", "d_model: '' is not a whole number"},
        {"lm.norm_eps", "nan", "lm config: norm_eps must be > 0, got nan"},
        {"lm.tie_embeddings", "maybe", "tie_embeddings: 'maybe' is not true or false"},
        {"lm.heads", "5", "heads (5) must divide d_model (12)"},
        {"lm.vocab", "0", "lm config: vocab must be in [1, 16777216], got 0"},
        {"lm.window", "-3", "lm config: window must be in [1, 16777216], got -3"},
        /* sizes that would have the model take the machine's memory: refused as read */
        {"lm.layers", "1000000", "lm config: layers must be in [1, 1024], got 1000000"},
        {"lm.vocab", "100000000", "lm config: vocab must be in [1, 16777216], got 100000000"},
        {"lm.d_model", "1000000", "lm config: d_model must be in [1, 65536], got 1000000"},
        {"lm.mlp_hidden", "100000000", "mlp_hidden must be in [0, 1048576], got 100000000"},
        {"lm.format", "2", "lm.format is '2'; this build reads format 1"},
        {"lm.colour", "red", "unknown metadata key 'lm.colour'"},
        {"lm.mixer_overrides", "chunk", "mixer override 'chunk' is not KEY=VALUE"},
        {"lm.mixer_overrides", "chunk=2,", "lm.mixer_overrides ends with ','"},
        {"lm.mixer", "", "mixer is empty"},
        {"lm.mixer", "attention-with-a-name-far-too-long-for-the-sixty-four-byte-field-x",
         "mixer: 'attention-with-a-name-far-too-long-for-the-sixty-four-byte-field-x' is "
         "longer than 63 characters"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mi_metadata e = edited(&md, bad[i].key, bad[i].value);
        mi_error_clear();
        ck_assert_int_eq(mi_lm_config_from_metadata(&out, &e), -1);
        ck_assert_error_has(bad[i].needle);
        ck_assert_int_eq(out.vocab, 256);  /* unchanged on failure */
    }
    mi_error_clear();
    /* keys of other owners are ignored */
    mi_metadata e = edited(&md, "opt.kind", "adamw");
    ck_assert_int_eq(mi_lm_config_from_metadata(&out, &e), 0);
    ck_assert_int_eq(out.vocab, 300);
    /* a config that does not check does not serialise */
    c.heads = 5;
    ck_assert_int_eq(mi_lm_config_to_metadata(&c, &md), -1);
    ck_assert_error_has("heads (5) must divide d_model (12)");
    mi_error_clear();
}
END_TEST

START_TEST(bad_configs_and_inputs_are_reported)
{
    mi_lm_config c = mi_lm_config_default();
    const struct { const char *set, *needle; } bad[] = {
        {"layers=x", "lm config: layers: 'x' is not a whole number"},
        {"colour=red", "lm config: unknown key 'colour'"},
        {"mixer.chunk", "expected KEY=VALUE, got 'mixer.chunk'"},
        {"mixer.=3", "mixer override '=3' is not KEY=VALUE"},
        {"mixer.a=b,c", "holds a ','"},
        {"tie_embeddings=yes", "'yes' is not true or false"},
    };
    for (int i = 0; i < 6; i++) {
        mi_error_clear();
        ck_assert_int_eq(mi_lm_config_set(&c, bad[i].set), -1);
        ck_assert_error_has(bad[i].needle);
    }
    for (int i = 0; i < MI_LM_MAX_OVERRIDES; i++) {
        char kv[32];
        snprintf(kv, sizeof kv, "mixer.k%d=1", i);
        ck_assert_int_eq(mi_lm_config_set(&c, kv), 0);
    }
    ck_assert_int_eq(mi_lm_config_set(&c, "mixer.k0=2"), 0);  /* a replacement still fits */
    mi_error_clear();
    ck_assert_int_eq(mi_lm_config_set(&c, "mixer.one_more=1"), -1);
    ck_assert_error_has("more than 16 mixer overrides");

    mi_lm lm;
    mi_error_clear();
    c = tiny("transformer", NULL, 0);
    ck_assert_int_eq(mi_lm_init(&lm, &c, MI_F64, 1, test_scope), -1);
    ck_assert_error_has("lm: block 0: mixer: unknown spec 'transformer'");
    mi_error_clear();
    c = tiny("attention", NULL, 0);
    c.heads = 3;
    ck_assert_int_eq(mi_lm_init(&lm, &c, MI_F64, 1, test_scope), -1);
    ck_assert_error_has("lm config: heads (3) must divide d_model (4)");
    mi_error_clear();
    c = tiny("attention", (const char *[]){"chunk=2"}, 1);
    ck_assert_int_eq(mi_lm_init(&lm, &c, MI_F64, 1, test_scope), -1);
    ck_assert_error_has("lm: block 0: mixer 'attention': takes no overrides");
    mi_error_clear();
    c = tiny("attention", NULL, 0);
    ck_assert_int_eq(mi_lm_init(&lm, &c, MI_I32, 1, test_scope), -1);
    ck_assert_error_has("f32 or f64");
    mi_error_clear();

    make_lm(&lm, &c, MI_F64, 1);
    mi_tensor *tok = tokens(1, 1, 4, V);
    set_token(tok, 2, V);
    ck_assert_ptr_null(mi_lm_forward(&lm, tok));
    ck_assert_error_has("out of range");
    mi_error_clear();
    ck_assert_ptr_null(mi_lm_forward(&lm, mi_zeros(MI_F64, MI_SHAPE(1, 4))));
    ck_assert_error_has("lm: tokens must be i32 or i64 [B, T], got f64 [1,4]");
    mi_error_clear();
    ck_assert_ptr_null(mi_lm_loss(&lm, tokens(1, 1, 4, V), tokens(1, 1, 3, V)));
    ck_assert_error_has("lm: targets [1,3] must have the shape of tokens [1,4]");
    mi_error_clear();
    /* i32 tokens work like i64 */
    mi_tensor *t64 = tokens(2, 2, 4, V), *t32 = mi_tensor_to(t64, MI_I32);
    mi_tensor *a = mi_lm_forward(&lm, t64), *b = mi_lm_forward(&lm, t32);
    ck_assert(a && b);
    for (int64_t i = 0; i < a->numel; i++) ck_assert(mi_get(a, i) == mi_get(b, i));
}
END_TEST

/* ---------------------------------------------------------------- training */

/* 30 AdamW steps (lr 1e-2) of a byte LM (d 64, 2 layers, 2 heads, tied) on a
 * repeating 8-byte pattern read from a random offset in each row: the loss
 * falls from ≈ log 256 by a factor of at least 20, for attention and for
 * gated DeltaNet (chunk 8). Measured: 5.56 → 0.012 and 5.50 → 0.004. (At
 * d 32 a tied model is still on the unigram plateau, log 8, after 30 steps.) */
START_TEST(thirty_adamw_steps_learn_a_repeating_pattern)
{
    const char *specs[] = {"attention", "gated-deltanet"};
    const char pattern[] = "miras! \n";
    enum { B = 4, T = 32, STEPS = 30 };
    for (int k = 0; k < 2; k++) {
        mi_lm_config c = mi_lm_config_default();
        c.d_model = 64;
        c.layers = 2;
        c.heads = 2;
        strcpy(c.mixer, specs[k]);
        if (k == 1) ck_assert_int_eq(mi_lm_config_set(&c, "mixer.chunk=8"), 0);
        mi_lm lm;
        make_lm(&lm, &c, MI_F32, 42);
        int n;
        const mi_named_tensor *p = mi_lm_params(&lm, &n);
        mi_tensor *params[256];
        ck_assert(n <= 256);
        for (int i = 0; i < n; i++) params[i] = p[i].tensor;
        mi_optim_hparams hp = mi_optim_defaults(MI_OPT_ADAMW);
        hp.lr = 1e-2;
        mi_optim *opt = mi_optim_new_simple(MI_OPT_ADAMW, params, n, &hp);
        ck_assert_msg(opt != NULL, "%s", mi_error());
        mi_scope *step = mi_scope_new("step");
        mi_rng r;
        mi_rng_seed(&r, 43);
        double first = 0, last = 0;
        for (int it = 0; it < STEPS; it++) {
            mi_scope_enter(step);
            mi_tensor *tok = mi_zeros(MI_I64, MI_SHAPE(B, T)), *tgt = mi_zeros(MI_I64, MI_SHAPE(B, T));
            for (int b = 0; b < B; b++) {
                uint64_t off = mi_rng_below(&r, 8);
                for (int t = 0; t < T; t++) {
                    set_token(tok, b * T + t, (unsigned char)pattern[(off + (uint64_t)t) % 8]);
                    set_token(tgt, b * T + t, (unsigned char)pattern[(off + (uint64_t)t + 1) % 8]);
                }
            }
            mi_tensor *loss = mi_lm_loss(&lm, tok, tgt);
            ck_assert_msg(loss != NULL, "%s", mi_error());
            ck_assert_int_eq(mi_backward(loss), 0);
            double l = mi_item(loss);
            if (it == 0) first = l;
            last = l;
            if (getenv("LM_VERBOSE")) fprintf(stderr, "%s step %d: %.4f\n", specs[k], it, l);
            mi_scope_leave();
            ck_assert_msg(mi_optim_step(opt) == 0, "%s", mi_error());
            mi_optim_zero_grad(opt);
            mi_scope_reset(step);
        }
        mi_scope_free(step);
        mi_optim_free(opt);
        if (getenv("LM_VERBOSE")) fprintf(stderr, "%s: loss %.4f -> %.4f\n", specs[k], first, last);
        ck_assert_msg(fabs(first - log(256.0)) < 0.1, "%s: first loss %g", specs[k], first);
        ck_assert_msg(last < first / 20, "%s: loss %g -> %g, not 20 times lower", specs[k], first,
                      last);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("lm");
    TCase *tc = tcase_slow("lm");
    tcase_add_test(tc, parameters_are_named_listed_and_deterministic);
    tcase_add_test(tc, defaults_and_initialisation);
    tcase_add_test(tc, gradcheck_attention);
    tcase_add_test(tc, gradcheck_gated_deltanet);
    tcase_add_test(tc, gradcheck_titans);
    tcase_add_test(tc, gradcheck_yaad);
    tcase_add_test(tc, gradcheck_lattice_dec);
    tcase_add_test(tc, gradcheck_hope);
    tcase_add_test(tc, gradcheck_samba);
    tcase_add_test(tc, logits_at_t_ignore_later_tokens);
    tcase_add_test(tc, constant_prediction_costs_log_v);
    tcase_add_test(tc, ignored_targets_are_left_out_of_the_mean);
    tcase_add_test(tc, miras_overrides_pass_through);
    tcase_add_test(tc, config_text_and_metadata_round_trip);
    tcase_add_test(tc, bad_or_missing_metadata_is_reported);
    tcase_add_test(tc, bad_configs_and_inputs_are_reported);
    tcase_add_test(tc, thirty_adamw_steps_learn_a_repeating_pattern);
    suite_add_tcase(s, tc);
    return s;
}
