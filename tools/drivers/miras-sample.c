/* miras-sample: generates bytes from a byte-level checkpoint of miras-train,
 * printing the prompt and then each new byte as it comes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void usage(void)
{
    printf(
"usage: miras-sample CKPT [options]\n"
"Generates bytes from a byte-level checkpoint (vocabulary 256) and writes the\n"
"prompt and its continuation to stdout. It runs the model one token at a time\n"
"(its recurrent form): a MIRAS model's memory stays the same size however long\n"
"the text.\n"
"  --prompt TEXT      the start of the text (a newline)\n"
"  --length N         bytes to generate (256)\n"
"  --temperature X    softmax temperature; 0: greedy (0.8)\n"
"  --top-k K          sample among the K likeliest bytes; 0: all (40)\n"
"  --seed N           (1)\n"
"  --threads N        (all cores)\n"
"  --help, --version\n"
"exit status: 0 done, 1 runtime failure (unreadable or mismatched checkpoint),\n"
"2 usage error\n");
}

static void put_byte(int64_t row, int64_t token, void *ctx)
{
    putchar((int)token);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    tool_start("miras-sample");
    const char *path = NULL, *prompt = "\n", *v;
    int64_t length = 256;
    mi_sampler s = {.temperature = 0.8, .top_k = 40};
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) usage(), exit(0);
        else if (!strcmp(arg, "--version")) printf("miras-sample %s\n", MIRAS_VERSION), exit(0);
        else if (opt_is(argc, argv, &i, "--prompt", &v)) prompt = v;
        else if (opt_is(argc, argv, &i, "--length", &v)) length = parse_int(arg, v, 0, 1 << 24);
        else if (opt_is(argc, argv, &i, "--temperature", &v))
            s.temperature = parse_real(arg, v, 0, 1e6);
        else if (opt_is(argc, argv, &i, "--top-k", &v)) s.top_k = parse_int(arg, v, 0, 1 << 24);
        else if (opt_is(argc, argv, &i, "--seed", &v))
            seed = (uint64_t)parse_int(arg, v, 0, INT64_MAX);
        else if (opt_is(argc, argv, &i, "--threads", &v))
            mi_set_threads((int)parse_int(arg, v, 1, 4096));
        else if (arg[0] == '-') die_usage("unknown option '%s'", arg);
        else if (path) die_usage("one checkpoint at a time ('%s' and '%s')", path, arg);
        else path = arg;
    }
    if (!path) die_usage("no checkpoint given");
    if (!prompt[0]) die_usage("--prompt: give at least one byte");
    mi_rng_seed(&s.rng, seed);

    mi_scope *keep = mi_scope_new("model");
    mi_scope_enter(keep);
    mi_checkpoint_file ck;
    mi_lm lm;
    if (mi_checkpoint_load_model(&ck, &lm, path, keep) != 0) die("%s", mi_error());
    if (lm.config.vocab != 256)
        die("'%s' is not a byte-level model (vocabulary %lld, not 256): nothing to print", path,
            (long long)lm.config.vocab);
    int64_t P = (int64_t)strlen(prompt);
    int64_t *seq = malloc(sizeof(int64_t) * (size_t)(P + length));
    if (!seq) die("out of memory");
    for (int64_t i = 0; i < P; i++) seq[i] = (unsigned char)prompt[i];
    fputs(prompt, stdout);
    if (mi_generate(&lm, seq, 1, P, length, &s, put_byte, NULL) != 0) die("%s", mi_error());
    putchar('\n');
    free(seq);
    mi_scope_leave();
    mi_scope_free(keep);
    return 0;
}
