/* SPDX-License-Identifier: Apache-2.0 */
/* A user's own CUPTI client (tests/cupti/user_prof.c), loaded by cupti_window with dlopen. */
#ifndef GPUSCOPE_USER_PROF_H
#define GPUSCOPE_USER_PROF_H

#include <stdint.h>

/* Subscribes, registers buffers, enables kernel activity and the launch callback: 0 or the
 * first failing CUptiResult (-1: a CUPTI function could not be resolved). */
int user_prof_start(void);
/* Disables, flushes, unsubscribes (and finalizes if asked): 0 or the first failing result. */
int user_prof_stop(int finalize);
void user_prof_counts(uint64_t *ret_records, uint64_t *ret_callbacks);
/* Did a kernel record with this correlation id come to the client? */
int user_prof_has(uint32_t cid);
void *user_prof_subscribe_addr(void);
/* CUPTI's device buffer pool limit as the client found it at its start. */
size_t user_prof_pool(void);
/* dlsym build: RTLD_DEFAULT (1) and RTLD_NEXT (2) found its dependency's symbol, and it (4). */
int user_prof_scope(void);

#endif
