/* dist.h without MPI (a build that did not find it): a job of one process,
 * where a sum over ranks is the value itself. */
#include <stdio.h>
#include <stdlib.h>

#include "dist.h"

bool dist_available(void) { return false; }

int dist_init(dist *d, int *argc, char ***argv, char *msg, size_t n)
{
    (void)argc, (void)argv;
    double timeout = d->timeout > 0 ? d->timeout : DIST_TIMEOUT_DEFAULT;
    *d = (dist){.rank = 0, .size = 1, .timeout = timeout, .bucket_bytes = d->bucket_bytes};
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = getenv("PMI_SIZE");
    if (size && atoi(size) > 1) { /* N copies would each train the whole run */
        snprintf(msg, n, "started by an MPI launcher on %s ranks, but this build has no MPI: "
                 "install libopenmpi-dev and reconfigure (meson -Dmpi=enabled)", size);
        return -1;
    }
    return 0;
}

int dist_sum_grads(dist *d, mi_tensor *const *params, int n_params, char *msg, size_t n)
{
    (void)d, (void)params, (void)n_params, (void)msg, (void)n;
    return 0;
}

int dist_sum_doubles(dist *d, double *v, int k, char *msg, size_t n)
{
    (void)d, (void)v, (void)k, (void)msg, (void)n;
    return 0;
}

int dist_check_same(dist *d, uint64_t value, const char *what, char *msg, size_t n)
{
    (void)d, (void)value, (void)what, (void)msg, (void)n;
    return 0;
}

void dist_note_checkpoint(const char *path, int64_t step) { (void)path, (void)step; }
void dist_note_checkpoint_pending(const char *path, int64_t step) { (void)path, (void)step; }

void dist_finish(dist *d) { d->active = false; }
