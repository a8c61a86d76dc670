/* Installed as miras/data/tasks.h, for users: included by miras.h. */
/* miras synthetic tasks and text data: MQAR (Zoology), single needle in a haystack (three
 * flavours), memory capacity, and byte-level LM windows over a text file.
 *
 * Determinism. Every generator draws each example from its own stream,
 * mi_task_rng(seed, split, index): the same example index always gives the
 * same sequence, whatever the batch size, and the same bits on every
 * platform (xoshiro256**; the only libm call on the way is MQAR's pow() for
 * its gap weights). A batch is the examples first, first+1, …, first+B−1,
 * so a driver asks for first = step · B. Train and held-out streams differ
 * by the split, so train and test examples come from disjoint seeds.
 *
 * Tensors. Generators fill i64 inputs [B, L] and targets [B, L] in the
 * current scope; a target is MI_IGNORE_INDEX (−100, PyTorch's default)
 * where nothing is to be predicted. Errors are values: -1 (or NULL) and a
 * message naming the task and what is wrong. */
#ifndef MIRAS_TASKS_H
#define MIRAS_TASKS_H

#include "tensor/tensor.h"

#define MI_IGNORE_INDEX (-100)

/* Train, or held out (MQAR's test set, the text's last 10 %). */
typedef enum mi_split { MI_SPLIT_TRAIN = 0, MI_SPLIT_VALID = 1 } mi_split;

/* Seeds r with the stream of one example: splitmix64's finaliser folds the
 * seed, the split and the example index into xoshiro256**'s seed. */
void mi_task_rng(mi_rng *r, uint64_t seed, mi_split split, int64_t index);

/* Recall accuracy (Zoology's): per example, the fraction of labelled
 * positions (target ≠ MI_IGNORE_INDEX) predicted exactly, averaged over the
 * examples that have one. pred is logits [B, L, V] (f32/f64; argmax, the
 * first maximum on ties) or predictions [B, L] (i32/i64); targets [B, L]
 * (i32/i64). -1 with a message on bad shapes or when nothing is labelled. */
double mi_task_accuracy(const mi_tensor *pred, const mi_tensor *targets);

/* ---------------------------------------------------------------- MQAR
 * Multi-query associative recall exactly as Zoology generates it.
 * C = 2NP. Per example, in this order of draws from its stream:
 *   keys   N distinct from [1, V/2)   (partial Fisher–Yates, ascending pool)
 *   values N distinct from [V/2, V)   (the same)
 *   gaps   N distinct g ∈ [0, (L−C)/2), g = i − 1 drawn with p_i ∝ a·i^(a−1),
 *          i = 1..(L−C)/2, one at a time from the weights not yet drawn
 *          (successive sampling: the distribution of numpy's
 *          choice(replace=False, p=p), which Zoology calls)
 *   fill   random_non_queries: each input still 0, left to right, becomes a
 *          uniform token of [0, V) (torch.randint(V), so 0 or a key may come
 *          back, as in Zoology)
 * sequence (L+1) = [k1 v1 … kN vN] × P ++ query region of L−C+1 zeros with
 * k_j at 2·g_j; label v_j at C + 2·g_j + 1. inputs = sequence[:-1],
 * targets = labels[1:]: the target v_j sits on the position where k_j is
 * read again, C + 2·g_j. */
typedef struct mi_mqar_config {
    int64_t vocab;            /* V (default 8192); V > L */
    int64_t seq_len;          /* L, even (default 64) */
    int64_t pairs;            /* N (default 4); 2NP + 2N ≤ L */
    double power_a;           /* a > 0 (default 0.01) */
    int64_t passes;           /* P ≥ 1 (default 1) */
    bool random_non_queries;  /* default true (Zoology's) */
} mi_mqar_config;

mi_mqar_config mi_mqar_config_default(void);
/* 0, or -1 with a message naming the violated condition. */
int mi_mqar_check(const mi_mqar_config *c);
/* One example into plain arrays inputs[L], targets[L]. */
int mi_mqar_example(const mi_mqar_config *c, uint64_t seed, mi_split split, int64_t index,
                    int64_t *inputs, int64_t *targets);
/* Examples first … first+batch−1 as i64 [batch, L] tensors. */
int mi_mqar_batch(const mi_mqar_config *c, uint64_t seed, mi_split split, int64_t first,
                  int64_t batch, mi_tensor **inputs, mi_tensor **targets);

/* ---------------------------------------------------------------- memory capacity
 * One sequence stores N random key→value pairs, then queries every key once,
 * in a random order. Tokens: 0 unused, 1 the query marker Q, keys N distinct
 * from [2, V/2), values independent uniform from [V/2, V) (a random mapping;
 * two keys may share a value).
 *   sequence (4N+1) = k1 v1 … kN vN  Q  k_π1 v_π1 … k_πN v_πN
 *   inputs = sequence[:-1] (L = 4N), targets = sequence[1:] kept only where
 *   the input is a queried key (positions 2N+1+2m), MI_IGNORE_INDEX elsewhere.
 * Draws per example: keys (partial Fisher–Yates), values, then π (a
 * Fisher–Yates shuffle from the end). Accuracy: mi_task_accuracy; a sweep
 * over N at a fixed model is the drivers' job. */
typedef struct mi_capacity_config {
    int64_t vocab;   /* V (default 8192); N ≤ V/2 − 2 */
    int64_t pairs;   /* N ≥ 1 (default 16) */
} mi_capacity_config;

mi_capacity_config mi_capacity_config_default(void);
int mi_capacity_check(const mi_capacity_config *c);
/* L = 4N, the length of inputs and targets. */
int64_t mi_capacity_seq_len(const mi_capacity_config *c);
int mi_capacity_example(const mi_capacity_config *c, uint64_t seed, mi_split split,
                        int64_t index, int64_t *inputs, int64_t *targets);
int mi_capacity_batch(const mi_capacity_config *c, uint64_t seed, mi_split split,
                      int64_t first, int64_t batch, mi_tensor **inputs, mi_tensor **targets);

/* ---------------------------------------------------------------- text (byte-level LM)
 * A text file as bytes (vocabulary 256): the first floor(0.9 · size) bytes
 * train, the rest validate (nanoGPT's split). A window of T+1 bytes gives
 * inputs = bytes[s, s+T) and targets = bytes[s+1, s+T+1); every window lies
 * inside its split. Load into a long-lived scope (the bytes live there). */
#define MI_TEXT_MAX_BYTES ((int64_t)1 << 31)

typedef struct mi_text {
    const char *name;   /* the path (or the name given), for messages */
    uint8_t *data;
    int64_t size;       /* 1 ≤ size ≤ MI_TEXT_MAX_BYTES */
    int64_t valid_begin; /* floor(0.9 · size): the first validation byte */
} mi_text;

/* Reads a regular, non-empty file of at most MI_TEXT_MAX_BYTES into the
 * current scope. NULL with "text: <what>: '<path>': <strerror>" style
 * messages. */
mi_text *mi_text_load(const char *path);
/* The same over bytes already in memory (copied into the current scope). */
mi_text *mi_text_from_bytes(const void *bytes, int64_t size, const char *name);
/* The split's byte range [*begin, *end). */
void mi_text_split_range(const mi_text *t, mi_split split, int64_t *begin, int64_t *end);
/* Random windows: window `index` starts uniformly in the split, at
 * begin + below(n − T) for a split of n bytes (which must hold T+1). */
int mi_text_batch(const mi_text *t, int64_t seq_len, uint64_t seed, mi_split split,
                  int64_t first, int64_t batch, mi_tensor **inputs, mi_tensor **targets);
/* Consecutive windows for a full pass (validation loss): window w starts at
 * begin + w·T, so every byte of the split but the first is a target exactly
 * once over mi_text_window_count = (n − 1) / T windows (a tail shorter than
 * T is left out). */
int64_t mi_text_window_count(const mi_text *t, int64_t seq_len, mi_split split);
int mi_text_windows(const mi_text *t, int64_t seq_len, mi_split split, int64_t first,
                    int64_t batch, mi_tensor **inputs, mi_tensor **targets);

/* ---------------------------------------------------------------- needle in a haystack
 * Single needle, byte-level (after RULER's S-NIAH). The prompt is exactly
 * `length` bytes: haystack ++ question, with
 *   needle   "The special magic number for KEY is: VALUE."
 *   question "\nWhat is the special magic number for KEY? The special magic
 *            number for KEY is: "   (the model generates VALUE next)
 * KEY is "adjective-noun" from two built-in lists. Flavours:
 *   PASSKEY  VALUE a 7-digit number [1000000, 9999999]; the haystack is the
 *            noise sentences "The grass is green. The sky is blue. The sun is
 *            yellow. Here we go. There and back again." repeated, one space
 *            after each, the needle inserted before noise sentence `sentence`
 *            (uniform over the positions where it fits whole), the stream cut
 *            at the haystack's length (its last sentence may end early).
 *   WORD     the same noise, VALUE a word from a built-in list (no noise
 *            word), or with `uuid` an 8-4-4-4-12 lowercase hex string.
 *   TEXT     VALUE a 7-digit number; the haystack is a window of the given
 *            text at a uniform start, the needle (and a space) inserted at a
 *            uniform depth, moved back to just after the nearest whitespace
 *            (at most 64 bytes back) so no word is split.
 * Score: mi_niah_exact_match of the greedy continuation up to the needle's
 * terminator, per haystack length (1K, 2K, 4K … bytes). */
typedef enum mi_niah_kind { MI_NIAH_PASSKEY = 0, MI_NIAH_WORD = 1, MI_NIAH_TEXT = 2 } mi_niah_kind;

typedef struct mi_niah_config {
    mi_niah_kind kind;
    int64_t length;       /* bytes of the whole prompt (default 1024) */
    bool uuid;            /* WORD: a UUID-like value instead of a word */
    const uint8_t *text;  /* TEXT: the haystack's source, e.g. a mi_text's bytes */
    int64_t text_size;
} mi_niah_config;

typedef struct mi_niah_sample {
    mi_tensor *tokens;      /* i64 [length]: the prompt's bytes */
    char *prompt;           /* the same bytes, NUL-terminated, in the scope */
    int64_t length;
    char key[48];
    char answer[48];        /* the expected VALUE */
    int64_t needle_offset;  /* where the needle sentence starts in the prompt */
    int64_t needle_length;
    int64_t sentence;       /* PASSKEY/WORD: noise sentences before the needle; TEXT: -1 */
    double depth;           /* needle_offset / haystack bytes, in [0, 1) */
} mi_niah_sample;

mi_niah_config mi_niah_config_default(void);
int mi_niah_check(const mi_niah_config *c);
/* Sample `index` of the stream (seed, split) into *out (its memory in the
 * current scope). -1 with a message when the length cannot hold the needle
 * and the question, or the text is too short. */
int mi_niah_example(const mi_niah_config *c, uint64_t seed, mi_split split, int64_t index,
                    mi_niah_sample *out);
/* The needle's last byte, after VALUE: what training labels after the
 * answer, and where greedy generation is scored up to. */
#define MI_NIAH_TERMINATOR '.'
/* The longest VALUE of the flavour plus its terminator, in bytes (pass key
 * 8, word 10, UUID 37): what a training sequence holds after the prompt and
 * the cap of a generated answer. It depends on the kind (and uuid) only.
 * -1 with a message on an unknown kind. */
int64_t mi_niah_answer_bytes(const mi_niah_config *c);
/* Exact match of a greedy continuation, judged up to the first terminator:
 * it must be the answer's bytes and then MI_NIAH_TERMINATOR. For 1234567,
 * "1234567." and "1234567.9" match; "12345678" (no end where the answer
 * ends), "1234568." and " 1234567." do not. */
bool mi_niah_exact_match(const mi_niah_sample *s, const char *generated, size_t n);

#endif
