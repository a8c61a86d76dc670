/* What the driver programs share, all of it about command lines: option
 * parsing with the project's exit codes (2: usage error, 1: runtime failure,
 * each with a one-line message), a progress bar, the run directory (lock,
 * stale temporary files), the training log (CSV) and its plot (SVG, drawn
 * here, no dependency). Training itself — run settings, tasks, evaluation,
 * checkpoints, generation — is the library's (miras.h, train/train.h). */
#ifndef MIRAS_TOOLS_COMMON_H
#define MIRAS_TOOLS_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "extend.h"

/* The program's name for messages ("miras-train"); set it first in main. */
extern const char *tool_name;
/* Sets tool_name and loads the plugins MIRAS_PLUGINS names (mi_plugin_load_env):
 * one that does not load is "<tool>: <message>", exit 1. First thing in main. */
void tool_start(const char *name);

/* "<tool>: <message> (see <tool> --help)", exit 2. */
_Noreturn void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "<tool>: <message>", exit 1. */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "<tool>: warning: <message>" on stderr, after what stdout holds; goes on. */
void warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A growing string (a CSV, an SVG, a command line); on running out of
 * memory it stops growing and sets oom. */
typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf;

void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s with XML's five special characters escaped. */
void sb_xml(strbuf *b, const char *s);

/* True when argv[*i] is `name`; its value, if `value` is non-NULL, is the
 * next argument (missing: a usage error), and *i moves past it. */
bool opt_is(int argc, char **argv, int *i, const char *name, const char **value);
/* Whether option `name` appears among the arguments. */
bool opt_given(int argc, char **argv, const char *name);
/* A number given to option `opt`, within [lo, hi], or a usage error. */
int64_t parse_int(const char *opt, const char *text, int64_t lo, int64_t hi);
double parse_real(const char *opt, const char *text, double lo, double hi);

/* ---------------------------------------------------------------- progress
 * On a terminal, one line redrawn in place:
 *   step 120/1000 [####------]  loss 2.3140  norm 0.8123  12345 tok/s  ETA 1m23s
 * Otherwise progress_show prints nothing and the caller prints plain lines. */
typedef struct progress {
    bool tty;
    int64_t first, total;  /* steps: the first of this run, the last */
    double t0;             /* seconds at the first step */
    bool shown;            /* a bar is on the screen */
} progress;

double now_seconds(void);
void progress_start(progress *p, int64_t first, int64_t total);
/* Tokens per second and the ETA since progress_start. */
double progress_rate(const progress *p, int64_t step, int64_t tokens_per_step);
void progress_eta(const progress *p, int64_t step, char *buf, size_t n);
/* The step's loss and gradient norm (NaN: not shown). */
void progress_show(progress *p, int64_t step, double loss, double norm, int64_t tokens_per_step);
/* Clears the bar so a plain line can be printed (no-op off a terminal). */
void progress_clear(progress *p);

/* ---------------------------------------------------------------- files */
/* mkdir -p, then checks the directory is writable; -1 with a message. */
int make_dir(const char *path, char *msg, size_t n);
/* Locks dir for this process's life: flock on "<dir>/.lock", not waiting,
 * with the pid written in it. The descriptor (kept open: closing it or
 * exiting lets go), or -1 with a message naming the holder's pid. */
int dir_lock(const char *dir, char *msg, size_t n);
/* Removes "<name>.tmp.<pid>" files in dir whose writer is no longer alive
 * (a save killed between write and rename); run it holding dir_lock. The
 * number removed, or -1 with a message. */
int remove_stale_temps(const char *dir, char *msg, size_t n);
/* fopen(path, "r") for a regular file only (mi_open_regular): a FIFO would
 * block the reader. NULL with the reason in why. */
FILE *fopen_regular(const char *path, char *why, size_t n);
/* Writes the bytes whole or not at all (the library's mi_write_atomic:
 * "<path>.tmp.<pid>", fsync, rename, fsync of the directory); -1 with a
 * message. */
int write_atomic(const char *path, const char *bytes, size_t size, char *msg, size_t n);

/* ---------------------------------------------------------------- the training log
 * One row per logged step; NaN where a value was not measured at that step
 * (validation runs every --eval-every steps only). */
typedef struct log_row {
    int64_t step;         /* steps done */
    double lr;            /* the learning rate of the last step */
    double train_loss;    /* mean over the steps since the previous row */
    double grad_norm;     /* mean global gradient norm before clipping, likewise */
    double val_loss, val_acc;
} log_row;

typedef struct train_log {
    int n, cap;
    log_row *rows;
    bool has_acc;         /* recall tasks: an accuracy column and panel */
} train_log;

void log_add(train_log *l, log_row r);
void log_free(train_log *l);
/* The CSV text ("step,lr,train_loss,grad_norm,val_loss,val_acc"), %.9g
 * numbers, empty fields for NaN; malloc'd, *size set. */
char *log_csv(const train_log *l, size_t *size);
/* Reads the rows of a CSV written by log_csv with step <= max_step, by the
 * header's column names: step and train_loss must be there; a column it
 * lacks (grad_norm in logs older than it) reads as NaN, one it does not know
 * is skipped. No file: no rows. -1 with a message on a malformed file. */
int log_read(train_log *l, const char *path, int64_t max_step, char *msg, size_t n);
/* An SVG document: train and validation loss against the step, below it the
 * gradient norm, and the validation accuracy when has_acc; malloc'd, *size
 * set. */
char *log_svg(const train_log *l, const char *title, size_t *size);

/* The names --model and --set take (presets, memories, biases, retention
 * gates, algorithms), wrapped at 80 columns, for a tool's --help. */
void list_component_names(FILE *f);

#endif
