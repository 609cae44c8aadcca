/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's own CPU, by activity: each thread charges its CPU clock (CLOCK_THREAD_CPUTIME_ID)
 * to the activity it is in, exclusive of the activities nested inside it, so the activities add
 * up to the process's CPU; what no activity claims is `other`. Exported as
 * gpuscope_agent_cpu_seconds_total{activity}. Two clock reads per scope: cheap enough to stay
 * on when scopes wrap batches of work (a module's tick, a poll, a table build), never one event.
 */
#ifndef GPUSCOPE_AGENT_SELFPROF_H
#define GPUSCOPE_AGENT_SELFPROF_H

#include <stdint.h>
#include <stdio.h>

/* The activities other code names; run.c adds one per module (selfprof_activity()). */
enum self_act {
	SELF_MAIN_LOOP,		/* the main loop's own work: batch swaps, waits, what no module claims */
	SELF_MMAP_RECORDS,	/* the kernel's mmap/exec/fork records (symbolizer__poll) */
	SELF_SYMBOLIZE,		/* raw stacks symbolized (stack-cache misses) */
	SELF_PYTHON,		/* CPython frame reads and interpreter detection */
	SELF_UNWIND_TABLES,	/* .eh_frame tables built and loaded (the unwinder's builder) */
	SELF_UNWIND_MAPS,	/* processes' mappings read, their tables found (unwinder's worker) */
	SELF_ENCODE,		/* batches encoded (protobuf) */
	SELF_COMPRESS,		/* batches compressed */
	SELF_PUSH,		/* the push thread: HTTP, spool, retries */
	SELF_METRICS,		/* this /metrics exposition */
	SELF_NVML_POLLER,	/* the NVML thread's own loop (wake-ups, queueing) */
	SELF_NVML_SAMPLES,	/* NVML sources, enum nvml_source's order... */
	SELF_NVML_MEMORY,
	SELF_NVML_GPM,
	SELF_NVML_SLOW,
	SELF_NVML_PROCESS,
	SELF_NVML_FIELDS,	/* ...to here */
	SELF_FIXED_MAX,
};

#define SELF_ACT_MAX 48		/* fixed plus registered ones */

/*
 * Id of the activity called name, registered if new (bounded: SELF_MAIN_LOOP when full). For
 * start-up code (a mutex inside); name is copied.
 */
unsigned selfprof_activity(const char *name);

/*
 * Enters activity act on the calling thread: the CPU since the thread's last switch goes to the
 * activity it was in. Returns what selfprof_leave() needs to go back to it.
 */
unsigned selfprof_enter(unsigned act);

/* Leaves the activity entered last: its CPU is charged and the thread is in prev again. */
void selfprof_leave(unsigned prev);

/*
 * Sets the calling thread's base activity (a thread's main function, at its start); charges what
 * the thread used since its last switch to the activity it was in.
 */
void selfprof_thread(unsigned act);

/* Charges the calling thread's CPU up to now to its current activity (a loop's turn). */
void selfprof_flush(void);

/* CPU seconds charged to act so far (tests, benchmarks). */
double selfprof_seconds(unsigned act);

/*
 * gpuscope_agent_cpu_seconds_total{activity} (with `other`: the process's CPU no activity
 * claimed, from getrusage), and gpuscope_agent_selfprof_clock_reads_total (what the accounting
 * itself cost: one thread-clock read each).
 */
void selfprof__metrics(FILE *out);

#endif
