/* SPDX-License-Identifier: Apache-2.0 */
/* On-demand captures delivered through the server (capture_poll.c). */
#ifndef GPUSCOPE_CUPTI_CAPTURE_POLL_H
#define GPUSCOPE_CUPTI_CAPTURE_POLL_H

#include <stdbool.h>

struct agent;

/* Starts the thread that polls a->server (the push's link) for this node's captures (none
 * without a server). 0 or -errno. Main-loop thread. */
int capture_poll__start(struct agent *a);
/*
 * Opens the windows of new requests and marks finished ones for their answer. Returns true when
 * a capture window ended (its records should be pushed now). Main loop, after the modules' tick.
 */
bool capture_poll__tick(void);
/* Stops and joins the thread (answers not yet posted are dropped). */
void capture_poll__stop(void);

#endif
