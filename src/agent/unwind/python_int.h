/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the CPython walker's user side (python.h) shared by its files only: the state
 * per process and per code object, used by detection (python_detect.c) and symbolization
 * (python.c).
 */
#ifndef GPUSCOPE_PYTHON_INT_H
#define GPUSCOPE_PYTHON_INT_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>
#include "agent/procs/procfs.h"
#include "agent/procs/elf.h"
#include "agent/procs/maps.h"
#include "agent/unwind/python.h"
#include "agent/unwind/python_abi.h"
#include "common/batch.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

#define MAX_CODES	(1u << 16)	/* cached code objects, all processes; cleared when full */
#define MAX_PIDS	GPUSCOPE_PY_MAX_PROCS
#define MAX_FILES	4096		/* binaries whose verdict (Python or not) is remembered */
#define LINETABLE_MAX	(64u << 10)
#define NAME_MAX_CHARS	512
#define RECHECK_NS	(2 * NSEC_PER_SEC)	/* a "not Python" verdict's age before a new look:
						 * libpython mapped late (loader, dlopen), an
						 * interpreter caught mid-start */

/* Where a code object keeps what symbolization needs, per version. */
struct code_layout {
	uint16_t filename, name, qualname;	/* qualname 0: none (3.10: co_name) */
	uint16_t linetable, firstlineno;
	uint16_t ascii_size, compact_size;	/* sizeof(PyASCIIObject), PyCompactUnicodeObject */
	bool location_table;			/* 3.11+ co_linetable format (locations.md) */
};

struct py_proc {
	pid_t pid;
	bool python;				/* false: looked at, not (walkable) Python */
	uint64_t checked_ns;			/* when; a "no" is looked at again later */
	uint64_t code_type;			/* &PyCode_Type in the process; 0 if unknown */
	uint64_t interp_lo, interp_hi;		/* the interpreter binary's mappings */
	bool stamped;				/* BPF stamps its code objects (python_abi.h) */
	struct code_layout cl;
};

struct py_code {
	const char *name, *file;		/* interned */
	uint32_t firstline;
	bool location_table;
	uint32_t nlt;
	uint8_t lt[];				/* co_linetable bytes */
};

struct python {
	pthread_mutex_t lock;			/* the unwinder's thread finds processes, the main
						 * loop symbolizes */
	int fd_procs, fd_threads, fd_stats, fd_names;
	struct u64map procs;			/* pid -> struct py_proc * */
	struct u64map files;			/* hash(dev, ino, mtime) -> 1 + verdict (1: Python) */
	struct u64map codes;			/* hash(pid, code) -> struct py_code * */
	struct py_code **code_list;
	size_t ncodes;
	struct strtab strs;
	uint64_t logged_versions[8];		/* unsupported versions already logged */
	struct python_stats st;
	const char *s_python;
};

/* python_detect.c */
int python_read_mem(pid_t pid, uint64_t addr, void *buf, size_t len);
int python_read_u64(pid_t pid, uint64_t addr, uint64_t *ret);
struct py_proc *python_proc_find(struct python *py, pid_t pid);
/* Drops every cached code object (cheap to read again). */
void python_codes_clear(struct python *py);

#endif /* GPUSCOPE_PYTHON_INT_H */
