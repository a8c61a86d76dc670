/* dist.h over MPI: a job of N ranks started by mpirun (or another MPI
 * launcher); a process started without one is a job of one and never calls
 * MPI. Every collective is non-blocking, waited on with a deadline, so a
 * rank whose peer died without the launcher noticing fails with a message
 * instead of hanging. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "dist.h"

static bool joined, finished;          /* MPI_Init done; MPI_Finalize done */
/* A bucket in flight: its floats, padded to N equal chunks, sent and received. */
typedef struct bucket {
    float *send, *recv;
    int64_t c;             /* floats in it */
    MPI_Request req;       /* its all-to-all */
} bucket;
static bucket slot[2];     /* two: bucket k+1 travels while bucket k is summed */
static int64_t bucket_floats; /* floats in a bucket */
/* What a rank stopped by the launcher says: two buffers, the signal handler
 * reads the one `shown` names, so it never sees a message half rewritten. */
static char stop_msg[2][4608];
static size_t stop_len[2];
static volatile sig_atomic_t shown = -1;
/* The checkpoint rank 0 is writing (step -1: none), named once it is written. */
static char pending_path[4608];
static int64_t pending_step = -1;

bool dist_available(void) { return true; }

/* The launcher's environment: Open MPI's mpirun, PMI (MPICH, srun), PMIx. */
static bool launched_by_mpi(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i])) return true;
    return false;
}

/* SIGTERM from the launcher (another rank failed or died): say so, once. */
static void on_term(int sig)
{
    (void)sig;
    int k = shown;
    if (k >= 0 && stop_len[k] && write(STDERR_FILENO, stop_msg[k], stop_len[k]) < 0) _exit(1);
    _exit(1);
}

/* An exit before dist_finish (die(), a failed check): take the job down. */
static void on_exit_abort(void)
{
    if (joined && !finished) {
        finished = true;
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

void dist_note_checkpoint(const char *path, int64_t step)
{
    const char *why = "stopped by the MPI launcher (a rank failed or died: see its or mpirun's "
                      "message)";
    int k = shown == 0 ? 1 : 0, len;
    char *m = stop_msg[k];
    size_t size = sizeof stop_msg[k];
    if (path)
        len = snprintf(m, size, "%s: %s. The last checkpoint is %s (step %lld)\n", tool_name, why,
                       path, (long long)step);
    else
        len = snprintf(m, size, "%s: %s; no checkpoint was saved yet\n", tool_name, why);
    stop_len[k] = len < 0 ? 0 : (size_t)len < size ? (size_t)len : size - 1;
    shown = k;
    pending_step = -1;
}

void dist_note_checkpoint_pending(const char *path, int64_t step)
{
    snprintf(pending_path, sizeof pending_path, "%s", path);
    pending_step = step;
}

/* A collective completed: rank 0 took part after it returned from writing
 * the pending checkpoint, which is therefore on disk. */
static void pending_written(void)
{
    if (pending_step >= 0) dist_note_checkpoint(pending_path, pending_step);
}

static const char *mpi_text(int code)
{
    static char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", code);
    return s;
}

int dist_init(dist *d, int *argc, char ***argv, char *msg, size_t n)
{
    double timeout = d->timeout > 0 ? d->timeout : DIST_TIMEOUT_DEFAULT;
    int64_t bucket_bytes = d->bucket_bytes > 0 ? d->bucket_bytes : DIST_BUCKET_BYTES;
    *d = (dist){.rank = 0, .size = 1, .timeout = timeout, .bucket_bytes = bucket_bytes};
    if (!launched_by_mpi()) return 0;
    int rc = MPI_Init(argc, argv);
    if (rc != MPI_SUCCESS) {
        snprintf(msg, n, "MPI_Init failed: %s", mpi_text(rc));
        return -1;
    }
    joined = true;
    atexit(on_exit_abort);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->size);
    d->active = true;
    dist_note_checkpoint(NULL, 0);
    struct sigaction sa = {.sa_handler = on_term};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    bucket_floats = bucket_bytes / (int64_t)sizeof(float);
    size_t padded = sizeof(float) * (size_t)((bucket_floats + d->size - 1) / d->size * d->size);
    for (int k = 0; k < 2; k++) {
        slot[k].send = malloc(padded), slot[k].recv = malloc(padded);
        if (!slot[k].send || !slot[k].recv) {
            snprintf(msg, n, "out of memory for the gradient buckets (4 × %lld bytes)",
                     (long long)padded);
            return -1;
        }
    }
    return 0;
}

/* Waits for a request, yielding the core (ranks may share cores), at most
 * d->timeout seconds. */
static int wait_for(const dist *d, MPI_Request *req, const char *what, char *msg, size_t n)
{
    double t0 = now_seconds();
    for (long spin = 0;; spin++) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            snprintf(msg, n, "%s failed: %s", what, mpi_text(rc));
            return -1;
        }
        if (done) {
            pending_written();
            return 0;
        }
        if (spin < 64) continue;
        struct timespec ts = {0, spin < 4096 ? 1000 : 100000};
        nanosleep(&ts, NULL);
        if (now_seconds() - t0 > d->timeout) {
            snprintf(msg, n, "no answer from the other ranks for %g s (%s): a rank died or "
                     "hangs; stopping (--comm-timeout sets the wait)", d->timeout, what);
            return -1;
        }
    }
}

/* Walks the gradients as one stream of floats: copies the next up to `cap`
 * floats from (*i, *off) into buf (to_grads false) or back (true). */
static int64_t stream(mi_tensor *const *p, int np, int *i, int64_t *off, float *buf, int64_t cap,
                      bool to_grads)
{
    int64_t got = 0;
    while (*i < np && got < cap) {
        mi_tensor *g = p[*i]->grad;
        if (!g || *off == g->numel) {
            ++*i, *off = 0;
            continue;
        }
        int64_t k = g->numel - *off < cap - got ? g->numel - *off : cap - got;
        float *gd = (float *)g->data + *off;
        if (to_grads) memcpy(gd, buf + got, sizeof(float) * (size_t)k);
        else memcpy(buf + got, gd, sizeof(float) * (size_t)k);
        got += k, *off += k;
    }
    return got;
}

static int64_t chunk_of(const dist *d, int64_t c) { return (c + d->size - 1) / d->size; }

/* Starts a bucket's reduce-scatter: an all-to-all of its N chunks (rank r
 * receives chunk r of every rank). */
static int bucket_start(const dist *d, bucket *b, char *msg, size_t n)
{
    int64_t chunk = chunk_of(d, b->c);
    memset(b->send + b->c, 0, sizeof(float) * (size_t)(chunk * d->size - b->c));
    int rc = MPI_Ialltoall(b->send, (int)chunk, MPI_FLOAT, b->recv, (int)chunk, MPI_FLOAT,
                           MPI_COMM_WORLD, &b->req);
    if (rc != MPI_SUCCESS) snprintf(msg, n, "MPI_Ialltoall failed: %s", mpi_text(rc));
    return rc == MPI_SUCCESS ? 0 : -1;
}

/* Ends it: this rank sums its chunk over the ranks in rank order, then an
 * all-gather of the summed chunks leaves the whole sum in b->send. */
static int bucket_finish(const dist *d, bucket *b, char *msg, size_t n)
{
    if (wait_for(d, &b->req, "the gradients' reduce-scatter", msg, n) != 0) return -1;
    int64_t chunk = chunk_of(d, b->c);
    /* g = ((0 + g_0) + g_1) + … + g_{N−1}, elementwise */
    float *sum = b->send + (int64_t)d->rank * chunk;
    memset(sum, 0, sizeof(float) * (size_t)chunk);
    for (int r = 0; r < d->size; r++) {
        const float *x = b->recv + (int64_t)r * chunk;
        for (int64_t k = 0; k < chunk; k++) sum[k] += x[k];
    }
    MPI_Request req;
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->send, (int)chunk, MPI_FLOAT,
                            MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS) {
        snprintf(msg, n, "MPI_Iallgather failed: %s", mpi_text(rc));
        return -1;
    }
    return wait_for(d, &req, "the gradients' all-gather", msg, n);
}

/* The buckets are pipelined: bucket k+1's all-to-all is under way while
 * bucket k is summed and gathered (every rank starts them in one order). */
int dist_sum_grads(dist *d, mi_tensor *const *params, int n_params, char *msg, size_t n)
{
    if (d->size == 1) return 0;
    for (int i = 0; i < n_params; i++)
        if (params[i]->grad && params[i]->grad->dtype != MI_F32) {
            snprintf(msg, n, "summing gradients over ranks: only f32 is supported");
            return -1;
        }
    double t0 = now_seconds();
    int i = 0, back_i = 0;
    int64_t off = 0, back_off = 0;
    slot[0].c = stream(params, n_params, &i, &off, slot[0].send, bucket_floats, false);
    if (slot[0].c && bucket_start(d, &slot[0], msg, n) != 0) return -1;
    for (int k = 0; slot[k % 2].c; k++) {
        bucket *cur = &slot[k % 2], *next = &slot[(k + 1) % 2];
        next->c = stream(params, n_params, &i, &off, next->send, bucket_floats, false);
        if (next->c && bucket_start(d, next, msg, n) != 0) return -1;
        if (bucket_finish(d, cur, msg, n) != 0) return -1;
        stream(params, n_params, &back_i, &back_off, cur->send, cur->c, true);
    }
    d->comm_seconds += now_seconds() - t0;
    return 0;
}

int dist_sum_doubles(dist *d, double *v, int k, char *msg, size_t n)
{
    if (d->size == 1) return 0;
    double *all = malloc(sizeof(double) * (size_t)k * (size_t)d->size);
    if (!all) {
        snprintf(msg, n, "out of memory");
        return -1;
    }
    MPI_Request req;
    int rc = MPI_Iallgather(v, k, MPI_DOUBLE, all, k, MPI_DOUBLE, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS || wait_for(d, &req, "summing the losses", msg, n) != 0) {
        if (rc != MPI_SUCCESS) snprintf(msg, n, "MPI_Iallgather failed: %s", mpi_text(rc));
        free(all);
        return -1;
    }
    for (int j = 0; j < k; j++) {
        double s = 0;
        for (int r = 0; r < d->size; r++) s += all[(size_t)r * (size_t)k + (size_t)j];
        v[j] = s;
    }
    free(all);
    return 0;
}

int dist_check_same(dist *d, uint64_t value, const char *what, char *msg, size_t n)
{
    if (d->size == 1) return 0;
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)d->size);
    if (!all) {
        snprintf(msg, n, "out of memory");
        return -1;
    }
    MPI_Request req;
    int rc = MPI_Iallgather(&value, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS || wait_for(d, &req, what, msg, n) != 0) {
        if (rc != MPI_SUCCESS) snprintf(msg, n, "MPI_Iallgather failed: %s", mpi_text(rc));
        free(all);
        return -1;
    }
    int bad = -1;
    for (int r = 1; r < d->size && bad < 0; r++)
        if (all[r] != all[0]) bad = r;
    if (bad >= 0)
        snprintf(msg, n, "the ranks disagree on %s: rank 0 %016llx, rank %d %016llx; stopping",
                 what, (unsigned long long)all[0], bad, (unsigned long long)all[bad]);
    free(all);
    return bad >= 0 ? -1 : 0;
}

void dist_finish(dist *d)
{
    for (int k = 0; k < 2; k++) {
        free(slot[k].send), free(slot[k].recv);
        slot[k].send = slot[k].recv = NULL;
    }
    if (joined && !finished) {
        finished = true;
        MPI_Finalize();
    }
    d->active = false;
}
