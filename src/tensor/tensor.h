/* Installed as miras/tensor/tensor.h, for users: included by miras.h. */
/* miras tensor layer: dtypes, shapes, contiguous storage, scopes (arenas),
 * the seeded random generator, errors, safetensors I/O, and the field
 * tables that declare a configuration struct's parameters (fields.h).
 *
 * Every tensor lives in a scope. Creation functions and ops allocate in the
 * current scope (mi_scope_enter / mi_scope_leave); resetting or freeing a
 * scope releases everything in it at once. */
#ifndef MIRAS_TENSOR_H
#define MIRAS_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fields.h"

#define MI_MAX_RANK 6

typedef enum mi_dtype { MI_F32 = 0, MI_F64 = 1, MI_I32 = 2, MI_I64 = 3 } mi_dtype;
#define MI_DTYPE_COUNT 4

const char *mi_dtype_name(mi_dtype dt);
size_t mi_dtype_size(mi_dtype dt);
bool mi_dtype_is_float(mi_dtype dt);

/* ---------------------------------------------------------------- errors
 * Errors are values: a failing call returns NULL (or -1) and records a
 * message in a thread-local buffer. The first message of a chain is kept
 * until mi_error_clear(), so `mi_sum(mi_mul(a, NULL))` reports the first
 * failure, not a consequence of it. */
const char *mi_error(void);            /* "" when none */
bool mi_error_pending(void);
void mi_error_clear(void);
void mi_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Puts "<who>: " in front of the pending message unless it starts so. */
void mi_error_prefix(const char *who);
/* Writes "[4,3]" style text of a shape into buf (always terminated). */
const char *mi_shape_str(char *buf, size_t n, int rank, const int64_t *shape);

/* ---------------------------------------------------------------- scopes */
typedef struct mi_scope mi_scope;

mi_scope *mi_scope_new(const char *name);
void mi_scope_free(mi_scope *s);
/* Forgets every allocation but keeps the memory; after one reset a scope
 * whose use repeats asks the system for nothing new. */
void mi_scope_reset(mi_scope *s);
/* Makes s the scope where new tensors go until the matching leave. */
void mi_scope_enter(mi_scope *s);
void mi_scope_leave(void);
mi_scope *mi_scope_current(void);
void *mi_scope_alloc(mi_scope *s, size_t bytes); /* 64-byte aligned, NULL on failure */
/* Gives back a piece p of `bytes` that mi_scope_alloc(s, bytes) returned and
 * nothing reads any more; a later request of the same size reuses it. */
void mi_scope_release(mi_scope *s, void *p, size_t bytes);
/* Whether p points into memory that s holds from the system (what s hands
 * out, or handed out before its last reset). */
bool mi_scope_holds(const mi_scope *s, const void *p);
/* A scope whose memory is a part of `parent`'s: its header and its blocks
 * are allocations of the parent, so it lives until the parent is reset or
 * freed, and everything in it is freed with the parent (use it no longer
 * than that; mi_scope_free on it only forgets it). Several threads may each
 * fill a sub of one parent at once: from its first sub on, the parent takes
 * a lock on every allocation and release until its reset. */
mi_scope *mi_scope_sub(mi_scope *parent, const char *name);
typedef struct mi_scope_stats {
    size_t bytes_used;      /* since the last reset */
    size_t bytes_reserved;  /* held from the system */
    size_t system_allocs;   /* blocks ever taken from the system */
    size_t bytes_released;  /* given back by mi_scope_release since the last reset */
    size_t bytes_reused;    /* of which handed out again */
} mi_scope_stats;
mi_scope_stats mi_scope_stats_get(const mi_scope *s);
/* The bytes every scope of the process holds from the system now, and the
 * most they held at once since the last mi_scope_system_peak_reset (which
 * sets it to now): what a computation that makes scopes of its own holds. */
size_t mi_scope_system_bytes(void);
size_t mi_scope_system_peak(void);
void mi_scope_system_peak_reset(void);

/* ---------------------------------------------------------------- tensors */
struct mi_node;

typedef struct mi_tensor {
    mi_dtype dtype;
    int rank;
    int64_t shape[MI_MAX_RANK];
    int64_t numel;
    void *data;              /* contiguous, row-major */
    mi_scope *scope;
    /* autograd: set on leaves by the user, on results by the engine */
    bool requires_grad;
    struct mi_node *node;    /* the op that produced this tensor, or NULL */
    struct mi_tensor *grad;  /* accumulated by mi_backward on leaves */
    const char *name;        /* optional, for printing and graphs */
    /* storage: the tensor whose storage a view (mi_tensor_alias) reads, NULL
     * for a tensor that owns its storage */
    struct mi_tensor *base;
} mi_tensor;

/* The tensor that owns t's storage: t itself or the base of a view. */
static inline mi_tensor *mi_tensor_owner(mi_tensor *t) { return t->base ? t->base : t; }

/* MI_SHAPE(3, 4) expands to `2, (const int64_t[]){3, 4}`: a rank and a shape. */
#define MI_SHAPE(...)                                                   \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),          \
        (const int64_t[]) { __VA_ARGS__ }

mi_tensor *mi_tensor_new(mi_dtype dt, int rank, const int64_t *shape); /* uninitialised */
mi_tensor *mi_zeros(mi_dtype dt, int rank, const int64_t *shape);
mi_tensor *mi_ones(mi_dtype dt, int rank, const int64_t *shape);
mi_tensor *mi_full(mi_dtype dt, int rank, const int64_t *shape, double value);
mi_tensor *mi_scalar(mi_dtype dt, double value); /* rank 0 */
mi_tensor *mi_arange(mi_dtype dt, int64_t n);    /* 0, 1, …, n-1 */
/* Copies numel elements of `data` (of dtype dt) into a new tensor. */
mi_tensor *mi_from_buffer(mi_dtype dt, int rank, const int64_t *shape, const void *data);
mi_tensor *mi_zeros_like(const mi_tensor *t);
/* A new tensor header over base's storage at a byte offset (no copy). */
mi_tensor *mi_tensor_alias(const mi_tensor *base, int rank, const int64_t *shape,
                           size_t byte_offset);
/* A new tensor of dtype dt holding t's values (a copy even when dt matches). */
mi_tensor *mi_tensor_to(const mi_tensor *t, mi_dtype dt);
/* A copy with no autograd history. */
mi_tensor *mi_detach(const mi_tensor *t);
/* Copies src's values into dst (same numel; dtypes may differ). */
int mi_tensor_copy_into(mi_tensor *dst, const mi_tensor *src);
/* Element i (flat index) as a double, and the reverse. */
double mi_get(const mi_tensor *t, int64_t i);
void mi_set(mi_tensor *t, int64_t i, double v);
double mi_item(const mi_tensor *t); /* element 0 */
void mi_fill(mi_tensor *t, double v);

bool mi_same_shape(const mi_tensor *a, const mi_tensor *b);
/* NumPy broadcasting: writes the result shape; -1 with a message on failure. */
int mi_broadcast_shape(int ra, const int64_t *sa, int rb, const int64_t *sb, int *rout,
                       int64_t *sout);
int64_t mi_shape_numel(int rank, const int64_t *shape);
/* Row-major strides of a shape, in elements. */
void mi_strides(int rank, const int64_t *shape, int64_t *strides);

/* Prints dtype, shape and up to `max_values` leading values. */
void mi_print(FILE *f, const mi_tensor *t);

/* ---------------------------------------------------------------- RNG
 * xoshiro256** (Blackman & Vigna 2018) seeded through splitmix64: the same
 * seed gives the same bits on every platform. Uniform doubles take the top
 * 53 bits; normals use Box–Muller on two uniforms. */
typedef struct mi_rng {
    uint64_t s[4];
} mi_rng;

void mi_rng_seed(mi_rng *r, uint64_t seed);
uint64_t mi_rng_next(mi_rng *r);
double mi_rng_uniform(mi_rng *r);                  /* [0, 1) */
double mi_rng_normal(mi_rng *r);                   /* N(0, 1) */
uint64_t mi_rng_below(mi_rng *r, uint64_t n);      /* uniform in [0, n), unbiased */
mi_tensor *mi_randn(mi_rng *r, mi_dtype dt, int rank, const int64_t *shape, double mean,
                    double std);
mi_tensor *mi_rand(mi_rng *r, mi_dtype dt, int rank, const int64_t *shape, double lo,
                   double hi);

/* ---------------------------------------------------------------- files
 * Opens path read-only when it is a regular file: the descriptor, and its
 * size in *size; -1 with the reason in why ("not a regular file (a FIFO)",
 * or strerror's). A FIFO or device is refused at once instead of blocking
 * the reader. */
int mi_open_regular(const char *path, int64_t *size, char *why, size_t n);

/* Writes a file whole or not at all: the bytes go to "<path>.tmp.<pid>",
 * which is fsync'ed, renamed over path, and the directory fsync'ed, so a
 * crash leaves the old file or the new one, never a torn one (and a dead
 * writer's temporary file is known by its pid). The parts are written one
 * after the other. 0, or -1 with "cannot <create|write|fsync|close|rename>
 * '<file>': <reason>" in mi_error(). */
typedef struct mi_bytes {
    const void *data;
    size_t size;
} mi_bytes;
int mi_write_atomic_parts(const char *path, const mi_bytes *parts, int count);
int mi_write_atomic(const char *path, const void *data, size_t size);

/* ---------------------------------------------------------------- safetensors
 * https://huggingface.co/docs/safetensors format: an 8-byte little-endian
 * header length, a JSON header, then the raw little-endian data. */
typedef struct mi_named_tensor {
    const char *name;
    mi_tensor *tensor;
} mi_named_tensor;

typedef struct mi_metadata {
    int count;
    const char **keys;
    const char **values;
} mi_metadata;

typedef struct mi_safetensors {
    int count;
    mi_named_tensor *tensors; /* in file order */
    mi_metadata metadata;     /* the header's "__metadata__" string map */
} mi_safetensors;

/* Writes to `path` through a temporary file and a rename. 0 or -1. */
int mi_safetensors_save(const char *path, const mi_named_tensor *tensors, int count,
                        const mi_metadata *metadata);
/* Loads every tensor into the current scope; everything the result points to
 * lives in that scope. NULL with a message on any malformed input. */
mi_safetensors *mi_safetensors_load(const char *path);
/* The same from memory (used by the loader and by tests). */
mi_safetensors *mi_safetensors_parse(const void *bytes, size_t size);
mi_tensor *mi_safetensors_get(const mi_safetensors *st, const char *name);

/* CRC-32C (Castagnoli) of data[0..n), continuing from crc (0 to start):
 * mi_crc32c(0, "123456789", 9) == 0xE3069283. Saved safetensors files carry
 * one per tensor in __metadata__ as "crc32c.<name>" = 8 lowercase hex digits,
 * checked on load; the loader hides those keys from mi_safetensors.metadata. */
uint32_t mi_crc32c(uint32_t crc, const void *data, size_t n);
const char *mi_safetensors_meta(const mi_safetensors *st, const char *key);

#endif
