/* Backend choice and the one parallel runtime (OpenMP). Read from the
 * environment once, on first use: MIRAS_BACKEND and MIRAS_THREADS. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "op.h"

static const char *const names[MI_BACKEND_COUNT] = {"ref", "blas", "dnnl", "own"};
static unsigned allowed = MI_BACKEND_ALL;
static int threads;
static _Thread_local mi_backend last;

static void set_threads_now(int n);

const char *mi_backend_name(mi_backend b)
{
    return (unsigned)b < MI_BACKEND_COUNT ? names[b] : "?";
}

/* "ref", "blas,own", "all": a mask, or 0 when a word is unknown. */
static unsigned parse_backends(const char *text)
{
    unsigned mask = 1u << MI_BACKEND_REF;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *w = strtok_r(buf, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
        if (strcasecmp(w, "all") == 0) {
            mask = MI_BACKEND_ALL;
            continue;
        }
        int b = 0;
        while (b < MI_BACKEND_COUNT && strcasecmp(w, names[b]) != 0) b++;
        if (b == MI_BACKEND_COUNT) return 0;
        mask |= 1u << b;
    }
    return mask;
}

static void init_from_env(void)
{
    static bool done;
    if (done) return;
    done = true;
    const char *b = getenv("MIRAS_BACKEND");
    if (b && *b) {
        unsigned m = parse_backends(b);
        if (m) allowed = m;
        else
            fprintf(stderr, "miras: ignoring MIRAS_BACKEND='%s' (use ref, blas, dnnl, own, all "
                            "or a comma list)\n", b);
    }
    const char *t = getenv("MIRAS_THREADS");
    int n = t && *t ? atoi(t) : 0;
    if (t && *t && n <= 0)
        fprintf(stderr, "miras: ignoring MIRAS_THREADS='%s' (a positive integer)\n", t);
    set_threads_now(n > 0 ? n : 0);
}

void mi_backends_allow(unsigned mask)
{
    init_from_env();
    allowed = (mask & MI_BACKEND_ALL) | (1u << MI_BACKEND_REF);
}

unsigned mi_backends_allowed(void)
{
    init_from_env();
    return allowed;
}

void mi_set_threads(int n)
{
    init_from_env(); /* first, so the environment never overrides this call */
    set_threads_now(n);
}

static void set_threads_now(int n)
{
#ifdef _OPENMP
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
#else
    n = 1;
#endif
    threads = n;
}

int mi_threads(void)
{
    init_from_env();
    return threads;
}

/* The fork/join the thresholds were measured at (own_kernels.h: OWN_PAR_MIN). */
#define SPIN_REGION_US 1.1

double mi_parallel_cost(double *region_us)
{
    static _Atomic int measured_for; /* the thread count measured, 0: none */
    static _Atomic double factor = 1, last_us;
#ifdef _OPENMP
    int nt = mi_threads();
    if (nt > 1 && !omp_in_parallel() && measured_for != nt) {
        struct timespec a, b;
        for (int i = 0; i < 4; i++) { /* the threads made and warm */
#pragma omp parallel num_threads(nt)
            __asm__ volatile("" ::: "memory");
        }
        enum { REGIONS = 32 };
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (int i = 0; i < REGIONS; i++) {
#pragma omp parallel num_threads(nt)
            __asm__ volatile("" ::: "memory");
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        double us = ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3) /
                    REGIONS;
        last_us = us;
        factor = us > SPIN_REGION_US ? (us < 1000 * SPIN_REGION_US ? us / SPIN_REGION_US : 1000)
                                     : 1;
        measured_for = nt;
    }
    if (region_us) *region_us = last_us;
    return nt > 1 ? factor : 1;
#else
    if (region_us) *region_us = 0;
    return 1;
#endif
}

mi_backend mi_backend_last(void) { return last; }

bool mi_backend_same_bits_across_threads(mi_backend b) { return b != MI_BACKEND_DNNL; }

static const mi_backend preference[] = {MI_BACKEND_OWN, MI_BACKEND_DNNL, MI_BACKEND_BLAS,
                                        MI_BACKEND_REF};

mi_kernel_fn mi_kernel_choose(const mi_op *op, mi_tensor *const *in, int n, const mi_attrs *a,
                              const mi_tensor *out)
{
    init_from_env();
    int dt = out->dtype;
    unsigned available = 0;
    for (int b = 0; b < MI_BACKEND_COUNT; b++)
        if (op->kernel[b][dt] && (allowed >> b & 1u)) available |= 1u << b;
    mi_backend pick = MI_BACKEND_REF;
    if (op->select && available) {
        pick = op->select(in, n, a, out, available);
        if (!(available >> pick & 1u)) pick = MI_BACKEND_REF;
    } else {
        for (size_t i = 0; i < sizeof preference / sizeof *preference; i++)
            if (available >> preference[i] & 1u) {
                pick = preference[i];
                break;
            }
    }
    last = pick;
    return op->kernel[pick][dt];
}
