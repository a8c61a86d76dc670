/* Data-parallel training across processes (ranks): the one interface
 * miras-train uses, with two implementations, dist_mpi.c (MPI, when the
 * build found it and the program was started by mpirun) and dist_single.c
 * (one process: every call is a no-op or the identity).
 *
 * Determinism: every sum over ranks is taken in rank order 0, 1, …, N−1,
 * starting from zero, on every rank:
 *
 *   g = ((0 + g_0) + g_1) + … + g_{N−1}
 *
 * which is the order in which --accum N adds its micro-batches' gradients
 * into .grad on one process (mi_backward: grad += g_a). So N ranks with
 * --accum 1 give bit for bit the update of one rank with --accum N, and two
 * N-rank runs are bit-identical. The gradient sum is a reduce-scatter (an
 * all-to-all of 1/N-th chunks, each rank summing its chunk in rank order)
 * and an all-gather: each rank sends and receives 2(N−1)/N of the bytes, as
 * a ring all-reduce does, in buckets of DIST_BUCKET_BYTES (--bucket-kb),
 * bucket k+1's all-to-all under way while bucket k is summed.
 *
 * Failure: every collective waits at most `timeout` seconds for the others,
 * then fails with a message; a failure or an exit on one rank aborts the job
 * (MPI_Abort), and a rank stopped by the launcher says so on stderr, naming
 * the last checkpoint. */
#ifndef MIRAS_TOOLS_DIST_H
#define MIRAS_TOOLS_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "miras.h"

/* The gradient bucket: a few MB per collective call. */
#define DIST_BUCKET_BYTES (4 << 20)
/* How long a collective waits for the other ranks by default (seconds). */
#define DIST_TIMEOUT_DEFAULT 120.0

typedef struct dist {
    int rank, size;         /* this process's rank, the number of ranks */
    bool active;            /* started by an MPI launcher (size may be 1) */
    double timeout;         /* seconds a collective waits for the others */
    int64_t bucket_bytes;   /* gradient bytes per bucket (0 before dist_init: the default) */
    double comm_seconds;    /* time spent summing gradients, in total */
} dist;

/* Whether this build can run over MPI. */
bool dist_available(void);
/* Joins the job when the process was started by an MPI launcher (mpirun,
 * srun); otherwise a job of one. 0, or -1 with a message. */
int dist_init(dist *d, int *argc, char ***argv, char *msg, size_t n);
/* Each parameter's .grad ← the sum over ranks of their .grad, in rank
 * order (f32 only; a NULL .grad is skipped, on every rank alike). 0, or -1
 * with a message. */
int dist_sum_grads(dist *d, mi_tensor *const *params, int n_params, char *msg, size_t n);
/* v[i] ← Σ_r v_r[i] in rank order, for k doubles. 0, or -1 with a message. */
int dist_sum_doubles(dist *d, double *v, int k, char *msg, size_t n);
/* Compares a value every rank computed (a checksum): 0 when all equal
 * rank 0's, else -1 with a message naming a rank that differs. */
int dist_check_same(dist *d, uint64_t value, const char *what, char *msg, size_t n);
/* Records the last checkpoint on disk (written by this rank, or resumed
 * from), for the message of a rank stopped by the launcher. */
void dist_note_checkpoint(const char *path, int64_t step);
/* Records the checkpoint rank 0 is writing at `step`: the message names it
 * only after the next collective, which rank 0 joins once its save returned;
 * until then it names the one before, which is what a crash of rank 0
 * mid-save leaves on disk. */
void dist_note_checkpoint_pending(const char *path, int64_t step);
/* Leaves the job normally (every rank, at the end). */
void dist_finish(dist *d);

#endif
