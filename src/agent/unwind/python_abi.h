/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What user space (python_detect.c) tells the BPF CPython walker (python.bpf.h) about one Python
 * process: where _PyRuntime and the eval loop are, and the offsets of the few fields the walk
 * reads in that version. Includes only the ABI registry: the includer supplies __u8.. __u64.
 */
#ifndef GPUSCOPE_UNWIND_PYTHON_ABI_H
#define GPUSCOPE_UNWIND_PYTHON_ABI_H

#include "common/abi.h"	/* enum gpuscope_py_stat */

#define GPUSCOPE_PY_MAX_PROCS	4096	/* Python processes followed at once */
#define GPUSCOPE_PY_MAX_THREADS	16384	/* cached tid -> PyThreadState (LRU) */
#define GPUSCOPE_PY_NO_OFFSET	0xffff
#define GPUSCOPE_PY_MAX_NAMES	16384	/* code objects named in BPF (LRU, all processes) */

/* How frames chain into C activations of the eval loop. */
enum gpuscope_py_layout {
	GPUSCOPE_PY_LAYOUT_310 = 1,	/* PyFrameObject chain: one frame per eval activation */
	GPUSCOPE_PY_LAYOUT_311,		/* _PyInterpreterFrame; an activation ends at is_entry */
	GPUSCOPE_PY_LAYOUT_312,		/* _PyInterpreterFrame; an activation ends at a frame whose
					 * owner >= 3 (FRAME_OWNED_BY_CSTACK in 3.12/3.13,
					 * FRAME_OWNED_BY_INTERPRETER in 3.14) */
};

/*
 * The instruction word that follows GPUSCOPE_FRAME_PY(code): its low 32 bits are the byte
 * offset of the frame's current (3.13+) or last executed (3.10-3.12) instruction from the
 * start of the code object's bytecode (2 * f_lasti in 3.10, instr_ptr/prev_instr -
 * co_code_adaptive after; 0 before the first instruction); its high 32 bits are the code
 * object's stamp (gpuscope_py_stamp()), which tells a code object from a later one that the
 * allocator put at the same address.
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
	__u16 co_firstlineno;	/* int co_firstlineno */
	__u16 co_filename;	/* co_filename; co_name follows it, then co_qualname (3.11+) or
				 * co_linetable (3.10): three pointers read at once */
	__u16 str_ascii;	/* sizeof(PyASCIIObject): where an ASCII str's characters start */
	__u16 str_compact;	/* sizeof(PyCompactUnicodeObject): where other compact strs' do */
	__u8 co_name_word;	/* which of those three pointers names the code: 2 (co_qualname,
				 * 3.11+) or 1 (co_name, 3.10) */
	__u8 _pad2[7];
};
_Static_assert(sizeof(struct gpuscope_py_proc) == 80, "python ABI change");

/*
 * The stamp of a code object: a mix of what never changes while it lives (co_firstlineno and
 * the file, name and qualified-name objects it points to). Same function in BPF and user
 * space. A new code object at a freed one's address has another stamp unless all four match.
 */
static inline __u32 gpuscope_py_stamp(__u32 firstlineno, __u64 w0, __u64 w1, __u64 w2)
{
	__u64 h = ((__u64)firstlineno + 1) * 0x9e3779b97f4a7c15ULL;

	h = (h ^ w0) * 0xff51afd7ed558ccdULL;
	h = (h ^ (h >> 31) ^ w1) * 0xc4ceb9fe1a85ec53ULL;
	h = (h ^ (h >> 29) ^ w2) * 0x9e3779b97f4a7c15ULL;
	return (__u32)(h >> 32);
}

/*
 * Names of code objects, copied by BPF when a frame of a code object not in map py_names is
 * walked: the code object is alive then (the frame runs it), while user space may read the
 * process only after the object is gone (module bodies during imports, lambdas, exec'd code).
 * Keyed by (tgid, code address, stamp). Raw characters of the str objects (1, 2 or 4 bytes
 * each per the state word): the first ones of the name, the last ones of the file name.
 */
#define GPUSCOPE_PY_NAME_BYTES	128
#define GPUSCOPE_PY_FILE_BYTES	192
struct gpuscope_py_code_key {
	__u32 tgid;
	__u32 stamp;
	__u64 code;
};

struct gpuscope_py_name {
	__u64 name_len, file_len;	/* in characters */
	__u32 name_state, file_state;	/* the str objects' state words (kind, compact, ascii) */
	__u32 firstlineno;
	__u16 name_bytes, file_bytes;	/* bytes copied into name[] and file[] */
	__u8 name[GPUSCOPE_PY_NAME_BYTES];
	__u8 file[GPUSCOPE_PY_FILE_BYTES];
};

/* Per-CPU counters of the Python walk (map py_stats): enum gpuscope_py_stat, in the counter
 * registry (common/abi.h). */

#endif
