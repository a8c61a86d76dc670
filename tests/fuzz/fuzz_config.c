/* libFuzzer target: the KEY=VALUE configuration parsers. Each input line is
 * an assignment given to the language model's config (mi_lm_config_set)
 * and to a MIRAS block's (mi_miras_config_set); then both are checked. A
 * model config that passes its check must survive the round trip through
 * checkpoint metadata. Every refusal says why. */
#include <stdint.h>
#include <string.h>

#include "miras.h"

static void must_say_why(int rc)
{
    if (rc != 0 && (!mi_error_pending() || !mi_error()[0])) __builtin_trap();
    mi_error_clear();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static mi_scope *scope;
    if (!scope && !(scope = mi_scope_new("fuzz"))) return 0;
    mi_scope_enter(scope);
    mi_lm_config lc = mi_lm_config_default();
    mi_miras_config mc = mi_miras_config_default();
    char line[512];
    for (size_t at = 0, lines = 0; at < size && lines < 64; lines++) {
        size_t n = 0;
        while (at < size && data[at] != '\n' && n < sizeof line - 1) line[n++] = (char)data[at++];
        line[n] = '\0';
        while (at < size && data[at] != '\n') at++; /* the rest of an overlong line */
        at++;
        must_say_why(mi_lm_config_set(&lc, line));
        must_say_why(mi_miras_config_set(&mc, line));
    }
    int rc = mi_lm_config_check(&lc);
    must_say_why(rc);
    if (rc == 0) {
        mi_metadata meta;
        mi_lm_config back = mi_lm_config_default();
        if (mi_lm_config_to_metadata(&lc, &meta) != 0 || mi_lm_config_from_metadata(&back, &meta) != 0)
            __builtin_trap(); /* a checked config is one a checkpoint can hold */
    }
    mi_miras m;
    must_say_why(mi_miras_init(&m, &mc));
    mi_scope_leave();
    mi_scope_reset(scope);
    return 0;
}
