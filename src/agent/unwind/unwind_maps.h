/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Layouts of the unwinder's BPF maps, shared by unwind.bpf.h (the walker every stack-taking
 * program includes) and unwind.c (which creates the maps once and fills them). Includes only
 * the ABI registry: the includer supplies __u32/__u64.
 *
 * unwind_procs:  tgid -> struct unwind_proc, the process's executable mappings sorted by start.
 * unwind_tables: table id -> inner array of __u64 (one binary's unwind table):
 *   [0] npages | nrows << 32    [1] base (ELF vaddr of row address 0, page aligned)
 *   [2 + p], p = 0..npages: index of the row in effect at base + p * 4096
 *   [3 + npages + i]: row i, sorted by address (UNWIND_ROW_* below)
 * unwind_want:   tgid -> mm (task->mm at the request; 0 from user space: "read it now"):
 *   processes whose mappings the walker needs (new process, exec, an address in no known
 *   mapping). User space drains it.
 */
#ifndef GPUSCOPE_UNWIND_MAPS_H
#define GPUSCOPE_UNWIND_MAPS_H

#include "common/abi.h"	/* enum unwind_stat */

#define UNWIND_MAX_MAPS		512	/* executable mappings per process */
#define UNWIND_MAX_PROCS	4096
#define UNWIND_MAX_TABLES	4096
#define UNWIND_PAGE_SHIFT	12
#define UNWIND_HDR_WORDS	2
#define UNWIND_SLOTS		4	/* scratch stacks per CPU: nesting (uprobe preempted, NMI) */
/* value of unwind_scratch: __u32 depth, _pad; __u64 frames[UNWIND_SLOTS][1 + max_stack] */
#define UNWIND_SCRATCH_BYTES(max_stack)	(8 + UNWIND_SLOTS * (1 + (max_stack)) * 8)
#define UNWIND_MAX_STACKS	16384	/* unwind_stacks entries; user space clears it near full */

/*
 * unwind_stacks: id -> one stack kept by unwind_stackid(): words[0] = hash & ~0xff | count,
 * then count frame words (frames.h). 1 KiB, allocated per entry.
 */
struct unwind_stack {
	__u64 words[128];
};

/* A mapping: vaddr in its binary = pc - bias. */
struct unwind_mapping {
	__u64 start, end, bias;
	__u32 table;		/* id in unwind_tables when flags has UNWIND_MAP_TABLE */
	__u32 flags;
};

#define UNWIND_MAP_PAD		0x7fffffffffffffffULL	/* start and end of unused slots */

#define UNWIND_MAP_TABLE	1	/* unwind with the table */
#define UNWIND_MAP_FP		2	/* no table (JIT, no CFI, over budget, not built yet): rbp chain */

struct unwind_proc {
	__u64 mm;		/* task->mm the entry was built for: another one means exec;
				 * 0: registered by pid, the first walk fills it in */
	__u32 n, _pad;
	struct unwind_mapping m[UNWIND_MAX_MAPS];
};

/* A row: bits 0-31 address - base, 32-39 kind, 40-47 where rbp was saved (CFA + 8 * s8; 0: not
 * saved), 48-63 CFA offset in bytes. The row holds until the next row's address. */
enum unwind_row_kind {
	UNWIND_ROW_NONE = 0,	/* no CFI for this address: frame-pointer step */
	UNWIND_ROW_RSP = 1,	/* CFA = rsp + off */
	UNWIND_ROW_RBP = 2,	/* CFA = rbp + off */
	UNWIND_ROW_PLT = 3,	/* PLT stub: CFA = rsp + 8, + 8 more once the stub has pushed */
	UNWIND_ROW_FP = 4,	/* a CFA expression we do not evaluate (stack realignment): rbp chain */
	UNWIND_ROW_END = 5,	/* return address undefined: the outermost frame */
	UNWIND_ROW_SIGNAL = 6,	/* signal trampoline: registers from the rt_sigframe at rsp */
};

#define UNWIND_ROW(addr, kind, rbp8, cfa_off)                                                    \
	((__u64)(__u32)(addr) | (__u64)(__u8)(kind) << 32 | (__u64)(__u8)(rbp8) << 40 |          \
	 (__u64)(__u16)(cfa_off) << 48)
#define UNWIND_ROW_ADDR(r)	((__u32)(r))
#define UNWIND_ROW_KIND(r)	((__u8)((r) >> 32))
#define UNWIND_ROW_RBP8(r)	((signed char)((r) >> 40))
#define UNWIND_ROW_CFA(r)	((__u16)((r) >> 48))

/* Per-CPU counters in unwind_stats: enum unwind_stat, in the counter registry (common/abi.h). */

#endif
