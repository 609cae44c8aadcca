/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPython support, user side: finds the interpreter of a process (python3.X executable or
 * libpython3.X.so, static or dynamic; 3.10 to 3.14), tells the BPF walker (python.bpf.h)
 * where _PyRuntime and the eval loop are and which offsets to read, and symbolizes the frames
 * it emits (code object -> qualified name, file, line) from process memory or, for objects
 * gone by then, from the names BPF copied while they ran; cached per (pid, code object,
 * stamp). Main-loop thread only.
 */
#ifndef GPUSCOPE_UNWIND_PYTHON_H
#define GPUSCOPE_UNWIND_PYTHON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct bpf_object;
struct location;
struct python;

/*
 * Creates the BPF maps the Python walk shares across every BPF object that includes
 * python.bpf.h. NULL with errno set (EPERM: no BPF). Free with python__free().
 */
struct python *python__new(void);
void python__free(struct python *py);

/*
 * Points obj's py_procs, py_threads and py_stats maps at py's (call between open and load).
 * Maps obj does not have are skipped. 0 or -errno.
 */
int python__share_maps(struct python *py, struct bpf_object *obj);

/*
 * Looks at a process once (cheap afterwards): if it runs a supported CPython, fills the BPF
 * map so its stacks get Python frames. Returns 1 (Python, walked), 0 (not Python, or an
 * unsupported version: logged once per version, counted), or -errno (-ESRCH: gone).
 */
int python__pid_seen(struct python *py, pid_t pid);

/* Exit or exec: forget the process, its BPF entry and its cached code objects. */
void python__pid_gone(struct python *py, pid_t pid);

/*
 * The location of a Python frame word pair (GPUSCOPE_FRAME_PY(code), word) of process pid
 * (word: instruction offset | stamp << 32, python_abi.h): function = qualified name, file,
 * line, module "[python]". Read from the process while the code object with that stamp is
 * there, else from the names BPF copied while it ran (line 0: unknown). 0, or -ENOENT when
 * neither has it (*ret then says "[python]", counted). Strings live as long as py.
 */
int python__frame(struct python *py, pid_t pid, uint64_t code, uint64_t word,
		  struct location *ret);

/* The stamp of the code object at code in pid as it is now (tests). 0 or -errno. */
int python__code_stamp(struct python *py, pid_t pid, uint64_t code, uint32_t *ret);

/*
 * The line of the instruction at byte offset off of a code object whose co_linetable is lt
 * (n bytes) and co_firstlineno firstline: the 3.10 format (PEP 626) or, location_table, the
 * 3.11+ one (Objects/locations.md). 0 when the table gives no line.
 */
uint32_t python__line(const uint8_t *lt, size_t n, uint32_t firstline, bool location_table,
		      uint64_t off);

/*
 * Whether addr, a native frame of process pid that did not resolve to a function, lies in
 * the interpreter binary (python3.X or libpython3.X) of a Python process: its static
 * functions, which a stripped build does not name. The stack cache leaves such frames out:
 * they are the interpreter's plumbing between the Python frames spliced in around them (a
 * stack reads <module>;main;stage;deflate, as the Python code calls zlib), and they would
 * otherwise put an [unknown] frame into every stack of the process. Counted
 * (gpuscope_agent_python_internal_frames_elided_total). Named interpreter functions stay.
 */
bool python__internal(struct python *py, pid_t pid, uint64_t addr);

/* The location of a GPUSCOPE_FRAME_PY_UNKNOWN word ("[python]"). */
void python__unknown_frame(struct python *py, struct location *ret);

struct python_stats {
	uint64_t procs;			/* Python processes followed now */
	uint64_t unsupported;		/* processes with a CPython this agent cannot walk */
	uint64_t code_reads, code_failed, code_cache_hits;
	uint64_t code_bpf_names;	/* named from py_names: the object was gone */
	uint64_t code_replaced;		/* another object at the address (stamp differs) */
	uint64_t elided;		/* interpreter frames left out (python__internal()) */
	uint64_t bpf[16];		/* enum gpuscope_py_stat, summed over CPUs */
};
void python__stats(const struct python *py, struct python_stats *ret);

/* Appends gpuscope_agent_python_* Prometheus lines (walk counters, symbolization, procs). */
void python__metrics(const struct python *py, FILE *out);

/*
 * The symbolizer's entry point for Python frames (the contract with the native unwinder):
 * python__frame() on the instance registered by python__set_default(), or -ENOENT.
 */
int pysym__frame(pid_t pid, uint64_t code_addr, uint64_t offset, struct location *ret);
void python__set_default(struct python *py);

#endif
