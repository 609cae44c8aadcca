/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What user space (python.c) tells the BPF CPython walker (python.bpf.h) about one Python
 * process: where _PyRuntime and the eval loop are, and the offsets of the few fields the walk
 * reads in that version. Includes nothing: the includer supplies __u8.. __u64.
 */
#ifndef GPUSCOPE_UNWIND_PYTHON_ABI_H
#define GPUSCOPE_UNWIND_PYTHON_ABI_H

#define GPUSCOPE_PY_MAX_PROCS	4096	/* Python processes followed at once */
#define GPUSCOPE_PY_MAX_THREADS	16384	/* cached tid -> PyThreadState (LRU) */
#define GPUSCOPE_PY_NO_OFFSET	0xffff

/* How frames chain into C activations of the eval loop. */
enum gpuscope_py_layout {
	GPUSCOPE_PY_LAYOUT_310 = 1,	/* PyFrameObject chain: one frame per eval activation */
	GPUSCOPE_PY_LAYOUT_311,		/* _PyInterpreterFrame; an activation ends at is_entry */
	GPUSCOPE_PY_LAYOUT_312,		/* _PyInterpreterFrame; an activation ends at a frame whose
					 * owner >= 3 (FRAME_OWNED_BY_CSTACK in 3.12/3.13,
					 * FRAME_OWNED_BY_INTERPRETER in 3.14) */
};

/*
 * The instruction word that follows GPUSCOPE_FRAME_PY(code) is the byte offset of the frame's
 * current (3.13+) or last executed (3.10-3.12) instruction from the start of the code
 * object's bytecode: 2 * f_lasti in 3.10, instr_ptr/prev_instr - co_code_adaptive after.
 * A frame before its first instruction gives 0.
 */
struct gpuscope_py_proc {
	__u64 runtime;		/* address of _PyRuntime in the process */
	__u64 eval_start, eval_end;	/* [start, end) of _PyEval_EvalFrameDefault */
	__u32 version;		/* PY_VERSION_HEX, e.g. 0x030b02f0 */
	__u8 layout;		/* enum gpuscope_py_layout */
	__u8 tid_is_fsbase;	/* 3.10: thread_id (pthread_self()) is compared with the fs base */
	__u8 code_tag_mask;	/* low bits of the frame's code word to clear (3.14 _PyStackRef) */
	__u8 _pad;
	__u32 rt_interp_head;	/* _PyRuntime.interpreters.head */
	__u32 is_next;		/* PyInterpreterState.next */
	__u32 is_threads_head;	/* PyInterpreterState.tstate_head (3.10) / threads.head */
	__u16 ts_next;		/* PyThreadState.next */
	__u16 ts_thread_id;	/* .native_thread_id (3.11+) or .thread_id (3.10) */
	__u16 ts_frame;		/* .frame (3.10), .cframe (3.11, 3.12), .current_frame (3.13+) */
	__u16 cf_current;	/* _PyCFrame.current_frame; GPUSCOPE_PY_NO_OFFSET: ts_frame is it */
	__u16 fr_previous;	/* f_back / previous */
	__u16 fr_code;		/* f_code / f_executable */
	__u16 fr_instr;		/* f_lasti (int) / prev_instr / instr_ptr */
	__u16 fr_owner;		/* owner (3.12+); GPUSCOPE_PY_NO_OFFSET before */
	__u16 fr_is_entry;	/* is_entry (3.11); GPUSCOPE_PY_NO_OFFSET otherwise */
	__u16 co_code;		/* bytecode start in a code object (co_code_adaptive), 3.11+ */
};
_Static_assert(sizeof(struct gpuscope_py_proc) == 64, "python ABI change");

/* Per-CPU counters of the Python walk (map py_stats), summed over CPUs by python.c. */
enum gpuscope_py_stat {
	GPUSCOPE_PY_STAT_WALKS = 0,	/* stacks of a Python process that reached the eval loop */
	GPUSCOPE_PY_STAT_FRAMES,	/* Python frames written */
	GPUSCOPE_PY_STAT_NO_THREAD,	/* thread without a PyThreadState (a pure native thread) */
	GPUSCOPE_PY_STAT_THREAD_SCANS,	/* walks of the interpreter's thread list (cache misses) */
	GPUSCOPE_PY_STAT_SCAN_LIMIT,	/* thread list longer than the walk's bound */
	GPUSCOPE_PY_STAT_READ_FAILED,	/* a frame could not be read: one PY_UNKNOWN, walk ends */
	GPUSCOPE_PY_STAT_TRUNCATED,	/* no room left for the Python frames of the stack */
	GPUSCOPE_PY_STAT_UNREACHED,	/* native walk ended above the eval loop: the remaining
					 * Python frames follow a [truncated] word */
	GPUSCOPE_PY_STAT_EVAL_EMPTY,	/* an eval-loop activation with no Python frame left */
	GPUSCOPE_PY_STAT_MAX = 16,
};

#endif
