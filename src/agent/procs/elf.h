/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's one ELF reader, on libelf (elf.c): build-ids, PT_LOAD segments, function symbols
 * into a symbol table (symtab.h), named symbols, uprobe offsets, for every feature that reads a
 * process's binaries (the symbolizer, the unwinder, the CPython detector, the CUDA probes,
 * CUPTI's USDT probes). .eh_frame tables are built from these files by unwind/table.c.
 */
#ifndef GPUSCOPE_AGENT_PROCS_ELF_H
#define GPUSCOPE_AGENT_PROCS_ELF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct symt;	/* symtab.h */

/* A PT_LOAD segment: maps file [off, off+filesz) to [vaddr, ...). */
struct elf_seg {
	uint64_t off, vaddr, filesz, align;
};

struct elf_info {
	char build_id[2 * 64 + 1];	/* lowercase hex, "" if none */
	struct elf_seg *segs;		/* malloc'ed; the caller frees */
	int nsegs;
};

/* One-time libelf setup. 0 or -ENOTSUP. */
int elf_lib_init(void);
/* Reads the GNU build-id and PT_LOAD segments of an open ELF file. 0, -ENOEXEC, -ENOMEM. */
int elf_read_info(int fd, struct elf_info *ret);
/*
 * Reads function symbols: .symtab if it has any, else .dynsym (*ret_from_symtab says which).
 * Finishes *ret. 0, -ENOEXEC (not ELF), -ENODATA (no symbols), -ENOMEM.
 */
int elf_read_symbols(int fd, struct symt *ret, bool *ret_from_symtab);

/*
 * Drops the resident pages of [p, p + len) if they lie in libelf's read-only mapping of the
 * file (clean: read again from the page cache when touched); never memory libelf copied. Only
 * for an Elf begun on a file descriptor (ELF_C_READ_MMAP): an elf_memory() image is the
 * caller's memory, and its pages would be lost.
 */
struct Elf;
void elf_drop_file_pages(struct Elf *elf, const void *p, size_t len);
/* Both of the above from an ELF image in memory (the vDSO); ret_syms may be NULL (info only).
 * 0 or -errno as above. */
int elf_read_mem(void *buf, size_t len, struct elf_info *ret_info, struct symt *ret_syms);
/*
 * Looks up named symbols of any type (data too: _PyRuntime) in .symtab, then .dynsym, of an
 * open ELF file. ret_addr[i] and ret_size[i] are the i-th name's value and size, 0 if absent.
 * Number of names found, or -ENOEXEC.
 */
int elf_find_symbols(int fd, const char *const *names, size_t n, uint64_t *ret_addr,
		     uint64_t *ret_size);
/*
 * The one global function symbol of an open ELF file whose name starts with prefix and has no
 * '.' after it (no .cold or .constprop part), into ret_name (len bytes), and the file offset of
 * its address (where a uprobe goes): .symtab's if it has any, else .dynsym's. 0; -ENOENT: none
 * (or in no PT_LOAD segment); -EEXIST: several at different addresses (overloads);
 * -ENAMETOOLONG; -ENOEXEC: not ELF.
 */
int elf_find_function_prefix(int fd, const char *prefix, char *ret_name, size_t len,
			     uint64_t *ret_off);
/*
 * File offsets (where a uprobe goes) of the named functions, from the .dynsym of an open ELF
 * file: ret_off[i] for names[i], 0 when absent (or in no PT_LOAD segment). Number of names
 * found; -ENOENT when none is; -ENOTSUP (no libelf), -EINVAL (not ELF).
 */
int elf_dynsym_offsets(int fd, const char *const *names, size_t n, uint64_t *ret_off);
/* ELF virtual address of a file offset through the PT_LOAD segments; false if none holds it. */
bool elf_off_to_vaddr(const struct elf_seg *segs, int nsegs, uint64_t off, uint64_t *ret);

#endif
