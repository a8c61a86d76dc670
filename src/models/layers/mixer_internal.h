/* Internal, not installed: the mixer kinds' create functions, one per row
 * of mixer.c's table (mi_mixer_kind_at, lm.h). A program makes a mixer by
 * its spec with mi_mixer_create; these are the table's entries (samba.c
 * also calls the MIRAS one for its first sub-layer). They keep their mi_
 * names, so the shared library still exports them. */
#ifndef MIRAS_MODELS_MIXER_INTERNAL_H
#define MIRAS_MODELS_MIXER_INTERNAL_H

#include "models/models.h"

int mi_mixer_create_miras(mi_mixer *out, const char *spec, const char *arg,
                          const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope);
int mi_mixer_create_attention(mi_mixer *out, const char *spec, const char *arg,
                              const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng,
                              mi_scope *scope);
int mi_mixer_create_swa(mi_mixer *out, const char *spec, const char *arg,
                        const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope);
/* Nested Learning's HOPE (hope.h), overrides are mi_hope_config_set keys. */
int mi_mixer_create_hope(mi_mixer *out, const char *spec, const char *arg,
                         const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope);
/* Its CMS is the block's feed-forward (cms_place=ffn with a CMS, the default). */
int mi_mixer_hope_own_ffn(const char *arg, const mi_mixer_options *opt);
/* The kinds' check_arg: swa's window "W", samba's "<preset>[:W]". */
int mi_mixer_swa_arg(const char *arg);
int mi_mixer_samba_arg(const char *arg);
int mi_mixer_create_samba(mi_mixer *out, const char *spec, const char *arg,
                          const mi_mixer_options *opt, mi_dtype dt, mi_rng *rng, mi_scope *scope);

#endif
