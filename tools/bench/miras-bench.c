/* miras-bench: speed of the framework against the raw libraries, and how
 * well the models learn (quality). One JSON line per case, then a table with
 * the speed targets marked met or missed.
 *
 *   miras-bench ops    matmul, batched matmul, row-wise ops, dispatch overhead
 *   miras-bench layer  one memory layer, forward + backward (q, k, v, gates, W_0)
 *   miras-bench train  one AdamW step of the byte-level language model
 *   miras-bench generate  greedy decoding after a prompt, per token (bench_generate.c)
 *   miras-bench quality  how well each model learns at a fixed budget: real
 *                      miras-train runs, one after another (bench_quality.c)
 *   miras-bench search   the MIRAS design space by successive halving, with its
 *                      own options (bench_search.c)
 *
 * Each case runs after a warm-up; a repetition times `inner` calls (enough
 * for ≈ 2 ms) and reports the time per call; median/min/max are over the
 * repetitions. The raw figures call OpenBLAS and oneDNN directly, in the same
 * run, so ratios are immune to the machine's drift between runs.
 *
 * layer and train cases take milliseconds to seconds: two warm-up calls,
 * then --reps repetitions of one call each until --budget-s; each case runs
 * in a child process of its own (see "layer and train: cases"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "bench_common.h"
#include "bench_quality.h"
#include "bench_search.h"

typedef struct subcommand {
    const char *name, *help;
    int (*run)(const bench_opts *o);
    int default_reps;
} subcommand;

/* quality's own options (--suite, --steps, --out, --set, --check, --train). */
static quality_opts quality;
static int run_quality(const bench_opts *o) { return bench_quality(o, &quality); }

static const subcommand subcommands[] = {
    {"ops", "matmul 64..1024 and 64x(32x32), softmax/layer norm/gelu/tanh/sigmoid on "
            "4096x128,\n           dispatch overhead; framework against raw OpenBLAS and oneDNN",
     bench_ops, 20},
    {"layer", "one memory layer, forward + backward: B=4, H=4, head dim 32, T=512, chunk "
              "1/16/64;\n           titans, moneta, yaad, memora (MLP memory), gated-deltanet, "
              "linear-attention", bench_layer, LAYER_TRAIN_REPS},
    {"train", "one AdamW step of the byte-level LM: d_model 128, 4 layers, 4 heads, SwiGLU "
              "384,\n           B=16, T=256, chunk 16; transformer, linear-attention, "
              "gated-deltanet, titans,\n           moneta, yaad, memora, lattice, hope",
     bench_train, LAYER_TRAIN_REPS},
    {"generate", "greedy decoding one token at a time after 1024- and 4096-byte prompts "
                 "(prompt\n           timed apart), ms and CPU per token: d_model 128, 4 "
                 "layers; attention, swa,\n           gated-deltanet, titans, mamba2, hope",
     bench_generate, 5},
    {"quality", "learning quality at a fixed budget and seeds: each case a miras-train run;"
                "\n           suites lm (tinyshakespeare, 200 steps), mqar, mqar-hard, quick,\n           experiments (the MIRAS ablations and baseline comparisons)",
     run_quality, 0},
    /* search runs from main (its own options); this row is its --help line */
    {"search", "every valid memory x bias x retention x algorithm trained by successive"
               "\n           halving, resumable, over --jobs or MPI ranks (options below)",
     NULL, 0},
};
#define N_SUBCOMMANDS ((int)(sizeof subcommands / sizeof subcommands[0]))

static void usage(FILE *f)
{
    fprintf(f, "usage: miras-bench SUBCOMMAND [options]\n"
               "subcommands:\n");
    for (int i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].help);
    fprintf(f,
        "options:\n"
        "  --threads N       OpenMP threads for the framework and oneDNN (default: every "
        "core,\n                    whatever MIRAS_THREADS says); quality: passed to "
        "miras-train\n"
        "  --reps N          timed repetitions per case after the warm-up (default 20 for "
        "ops,\n                    %d for layer and train)\n"
        "  --json-only       only the JSON lines, no table\n"
        "layer and train:\n"
        "  --variants A,B,.. the variants to run (layer: any MIRAS preset, with +KEY=VALUE "
        "overrides\n                    as titans+bias=logcosh; train: any mixer spec, plus "
        "transformer =\n                    attention and lattice = lattice-dec)\n"
        "  --seq-len T       tokens per sequence (default: layer 512, train 256)\n"
        "  --batch B         sequences per batch (default: layer 4, train 16)\n"
        "  --budget-s S      no new repetition of a case starts S seconds after its first "
        "(default\n                    %g); the two warm-up calls and one repetition always "
        "run\n"
        "  --max-rss-gb G    skip a case whose estimated peak RSS exceeds G GB (default %g): "
        "the\n                    step memory of two small probe runs (layer: T = 32 and 64, "
        "rounded\n                    up to whole chunks; train: one sequence of about T/4 "
        "and T/2\n                    tokens), extrapolated linearly, + 5 %%; each case runs "
        "in a child\n                    process whose address space is capped at 1.25 G + 0.5 "
        "GB (running\n                    out of memory under the cap is a skip too)\n"
        "  --rounds N        run the case list N times over (default 1, at most %d), each "
        "case in a\n                    child of its own every round: a slow spell of a loaded "
        "machine then\n                    falls on every case alike; a case's median is the "
        "median of its\n                    rounds' medians, and a target relative to another "
        "case (hope against\n                    titans) is the median of the two's per-round "
        "ratios\n"
        "layer only:\n"
        "  --chunks b1,b2,.. chunk sizes (default 1,16,64); chunk 1 (the per-token "
        "recurrence, the\n                    slow reference) runs at T = %d unless --seq-len "
        "is given\n"
        "train only:\n"
        "  --recompute       recompute each block in the backward instead of keeping its\n"
        "                    activations (mi_lm's checkpoint_blocks): less memory, one more\n"
        "                    forward a step; the config says so\n"
        "  --data PATH       the text (default: " TEXT_PATH " of the checkout this\n"
        "                    executable was built in, else of the working directory; generated\n"
        "                    bytes when absent, said so in the config)\n"
        "generate (also --variants: any mixer spec with a recurrent form, --budget-s,\n"
        "--max-rss-gb and --data, the prompt's text, as for train):\n"
        "  --seq-len P       one prompt length (default: 1024 and 4096 bytes)\n"
        "  --batch B         sequences decoded together (default 1)\n"
        "  --reps N          repetitions of 16 greedy tokens after the prompt (default 5)\n"
        "Output: one JSON line per case, then a table. ops: name, config, threads, "
        "median/min/max\nms per call, GFLOP/s with the FLOP count assumed (matmul 2n^3) or "
        "GB/s, peak RSS, for\nframework cases the time ratio to the raw library case; the "
        "table marks the speed\ntargets met or missed. layer and train: median/min/max ms "
        "per forward+backward or\noptimizer step, tokens (B*T) and tokens/s, the case's own "
        "peak RSS (and the estimate\nit was checked against), train's last loss; a case not "
        "run has \"skipped\" or \"error\"\nwith the reason. Exit status (ops, layer, train) 1 if a "
        "case failed, 2 on bad\narguments.\n",
        LAYER_TRAIN_REPS, LAYER_TRAIN_BUDGET_S, MAX_RSS_GB, MAX_ROUNDS, LAYER_PER_TOKEN_MAX_T);
    bench_quality_usage(f);
    bench_search_usage(f);
}

static int parse_positive(const char *text, double *out)
{
    char *end;
    double v = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !(v > 0) || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* The options followed by a value. */
static bool takes_value(const char *a)
{
    static const char *const names[] = {"--threads", "--reps", "--rounds", "--seq-len",
                                         "--batch", "--budget-s", "--max-rss-gb", "--variants",
                                         "--chunks", "--data", "--suite", "--set", "--steps",
                                         "--seed", "--out", "--train", "--replot"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(a, names[i])) return true;
    return false;
}

int main(int argc, char **argv)
{
    tool_start("miras-bench");
    /* search parses its own options (bench_search.c) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "search")) {
            if (i != 1) {
                fprintf(stderr, "miras-bench: search comes first: miras-bench search [options]\n");
                return 2;
            }
            int rc = bench_search_main(argc - 1, argv + 1);
            return rc;
        }
        if (takes_value(argv[i])) i++;
    }
    bench_opts o = {.threads = 0, .reps = 0, .budget_s = LAYER_TRAIN_BUDGET_S,
                    .max_rss_gb = MAX_RSS_GB};
    const subcommand *cmd = NULL;
    const char *quality_only = NULL; /* the first option only quality takes */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int n = 0;
        double x = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json-only") == 0) {
            o.json_only = true;
            continue;
        } else if (strcmp(a, "--recompute") == 0) {
            o.recompute = true;
            continue;
        } else if (!strcmp(a, "--check") || !strcmp(a, "--quick")) {
            if (!strcmp(a, "--check")) quality.check = true;
            else if (quality.n_suites < QUALITY_MAX_OPTS)
                quality.suites[quality.n_suites++] = "quick";
            quality_only = quality_only ? quality_only : a;
            continue;
        } else if (!v && takes_value(a)) {
            fprintf(stderr, "miras-bench: %s wants a value\n", a);
            return 2;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--reps") || !strcmp(a, "--seq-len")
                   || !strcmp(a, "--batch") || !strcmp(a, "--rounds")) {
            if (parse_count(v, &n) != 0) {
                fprintf(stderr, "miras-bench: %s wants a positive integer, got '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--threads")) o.threads = quality.threads = n;
            else if (!strcmp(a, "--reps")) o.reps = n;
            else if (!strcmp(a, "--rounds")) o.rounds = n;
            else if (!strcmp(a, "--seq-len")) o.seq_len = n;
            else o.batch = n;
        } else if (!strcmp(a, "--budget-s") || !strcmp(a, "--max-rss-gb")) {
            if (parse_positive(v, &x) != 0) {
                fprintf(stderr, "miras-bench: %s wants a positive number, got '%s'\n", a, v);
                return 2;
            }
            if (!strcmp(a, "--budget-s")) o.budget_s = x;
            else o.max_rss_gb = x;
        } else if (!strcmp(a, "--variants")) {
            o.variants = v;
        } else if (!strcmp(a, "--chunks")) {
            o.chunks = v;
        } else if (!strcmp(a, "--data")) {
            o.data = v;
        } else if (!strcmp(a, "--suite") || !strcmp(a, "--set")) {
            bool suite = !strcmp(a, "--suite");
            int *count = suite ? &quality.n_suites : &quality.n_sets;
            if (*count == QUALITY_MAX_OPTS) {
                fprintf(stderr, "miras-bench: %s may be given at most %d times\n", a,
                        QUALITY_MAX_OPTS);
                return 2;
            }
            (suite ? quality.suites : quality.sets)[(*count)++] = v;
            quality_only = quality_only ? quality_only : a;
        } else if (!strcmp(a, "--steps")) {
            if (parse_count(v, &n) != 0) {
                fprintf(stderr, "miras-bench: %s wants a positive integer, got '%s'\n", a, v);
                return 2;
            }
            quality.steps = n;
            quality_only = quality_only ? quality_only : a;
        } else if (!strcmp(a, "--seed")) {
            if (parse_count(v, &n) != 0) {
                fprintf(stderr, "miras-bench: %s wants a positive integer, got '%s'\n", a, v);
                return 2;
            }
            quality.seed = n;
            quality_only = quality_only ? quality_only : a;
        } else if (!strcmp(a, "--replot")) {
            quality.replot = v;
            quality_only = quality_only ? quality_only : a;
        } else if (!strcmp(a, "--out") || !strcmp(a, "--train")) {
            if (!strcmp(a, "--out")) quality.out = v;
            else quality.train = v;
            quality_only = quality_only ? quality_only : a;
        } else if (!cmd && a[0] != '-') {
            for (int k = 0; k < N_SUBCOMMANDS; k++)
                if (strcmp(a, subcommands[k].name) == 0) cmd = &subcommands[k];
            if (!cmd) {
                fprintf(stderr, "miras-bench: unknown subcommand '%s'\n", a);
                usage(stderr);
                return 2;
            }
            continue;
        } else {
            fprintf(stderr, "miras-bench: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!cmd) {
        usage(stderr);
        return 2;
    }
    bool is_quality = cmd->run == run_quality;
    if (quality_only && !is_quality) {
        fprintf(stderr, "miras-bench: %s is an option of quality, not of %s\n", quality_only,
                cmd->name);
        return 2;
    }
    if (is_quality && (o.reps || o.seq_len || o.batch || o.chunks
                       || o.budget_s != LAYER_TRAIN_BUDGET_S || o.max_rss_gb != MAX_RSS_GB)) {
        fprintf(stderr, "miras-bench: quality takes no --reps, --seq-len, --batch, --chunks, "
                "--budget-s or --max-rss-gb: its cases are miras-train runs (see --help)\n");
        return 2;
    }
    if (quality.replot && (quality.n_suites || quality.n_sets || quality.steps || quality.seed ||
                           quality.check || quality.train || o.variants || o.data)) {
        fprintf(stderr, "miras-bench: --replot runs nothing: it takes only --out and --json-only "
                "(the suites and variants are the files')\n");
        return 2;
    }
    /* ops times fixed shapes, no variants: ignoring the list would pass off a typo */
    if (cmd->run == bench_ops && o.variants) {
        fprintf(stderr, "miras-bench: --variants is an option of layer, train and quality, "
                "not of ops\n");
        return 2;
    }
    if (o.rounds && cmd->run != bench_layer && cmd->run != bench_train) {
        fprintf(stderr, "miras-bench: --rounds is an option of layer and train, not of %s\n",
                cmd->name);
        return 2;
    }
    if (o.rounds > MAX_ROUNDS) {
        fprintf(stderr, "miras-bench: --rounds wants at most %d, got %d\n", MAX_ROUNDS, o.rounds);
        return 2;
    }
    if (cmd->run == bench_generate && (o.chunks || o.recompute)) {
        fprintf(stderr, "miras-bench: generate takes no --chunks or --recompute\n");
        return 2;
    }
    if (!o.reps) o.reps = cmd->default_reps;
    (void)mi_threads(); /* reads MIRAS_THREADS first, so --threads wins */
    mi_set_threads(o.threads);
    o.threads = mi_threads();
    int rc = cmd->run(&o);
    if (!o.json_only) print_machine();
    return rc;
}
