/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ELF reading for every feature through libelf (elf.h): GNU build-id, PT_LOAD segments (load
 * bias of PIE executables and shared libraries), function symbols from .symtab or .dynsym,
 * named symbols and uprobe offsets.
 */
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "agent/procs/elf.h"
#include "agent/procs/symtab.h"

#ifndef NT_GNU_BUILD_ID
#define NT_GNU_BUILD_ID 3
#endif

int elf_lib_init(void)
{
	return elf_version(EV_CURRENT) == EV_NONE ? -ENOTSUP : 0;
}

/* Looks for a GNU build-id note in d; true and fills hex if found. */
static bool find_build_id(Elf_Data *d, char *hex, size_t hexlen)
{
	static const char digits[] = "0123456789abcdef";
	size_t off = 0, name_off, desc_off;
	GElf_Nhdr nh;

	while (d && off < d->d_size &&
	       (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
		const unsigned char *desc = (const unsigned char *)d->d_buf + desc_off;

		if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 ||
		    memcmp((const char *)d->d_buf + name_off, "GNU", 4) || !nh.n_descsz ||
		    nh.n_descsz * 2 + 1 > hexlen)
			continue;
		for (size_t i = 0; i < nh.n_descsz; i++) {
			hex[2 * i] = digits[desc[i] >> 4];
			hex[2 * i + 1] = digits[desc[i] & 15];
		}
		hex[2 * nh.n_descsz] = 0;
		return true;
	}
	return false;
}

static int info_from_elf(Elf *elf, struct elf_info *ret)
{
	struct elf_seg *segs = NULL;
	int err = 0, nsegs = 0;
	bool have_id = false;
	Elf_Scn *scn = NULL;
	size_t nph = 0;
	GElf_Ehdr eh;

	memset(ret, 0, sizeof(*ret));
	if (elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) || elf_getphdrnum(elf, &nph))
		return -ENOEXEC;
	/* Section notes first (cheap to find), then PT_NOTE for files without section headers. */
	while (!have_id && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE)
			have_id = find_build_id(elf_getdata(scn, NULL), ret->build_id,
						sizeof(ret->build_id));
	}
	segs = calloc(nph ? nph : 1, sizeof(*segs));
	if (!segs)
		return -ENOMEM;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph))
			continue;
		if (ph.p_type == PT_LOAD) {
			segs[nsegs++] = (struct elf_seg){ .off = ph.p_offset, .vaddr = ph.p_vaddr,
							  .filesz = ph.p_filesz,
							  .align = ph.p_align ? ph.p_align : 1 };
		} else if (ph.p_type == PT_NOTE && !have_id) {
			Elf_Data *d = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz,
							   ELF_T_NHDR);

			have_id = find_build_id(d, ret->build_id, sizeof(ret->build_id));
		}
	}
	ret->segs = segs;
	ret->nsegs = nsegs;
	return err;
}

int elf_read_info(int fd, struct elf_info *ret)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	int err;

	memset(ret, 0, sizeof(*ret));
	if (!elf)
		return -ENOEXEC;
	err = info_from_elf(elf, ret);
	elf_end(elf);
	return err;
}

void elf_drop_file_pages(Elf *elf, const void *p, size_t len)
{
	size_t flen = 0;
	const char *raw = elf_rawfile(elf, &flen);
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t a, e;

	if (!raw || !p || page <= 0 || (const char *)p < raw || (const char *)p + len > raw + flen)
		return;
	a = (uintptr_t)p & ~((uintptr_t)page - 1);
	e = (uintptr_t)p + len;
	madvise((void *)a, e - a, MADV_DONTNEED);
}

/* Symbols between drops of the pages the parse touched (symbol table and names). */
#define DROP_EVERY 8192

/*
 * Adds the function symbols of one symbol table. Aliases at one address: FUNC over untyped,
 * global over weak over local, then fewer leading underscores (write over __libc_write).
 */
static int add_symbols(Elf *elf, bool from_file, Elf_Scn *scn, const GElf_Shdr *sh,
		       const bool *exec_scn, size_t nscn, struct symt *t, size_t *ret_added)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	size_t n = sh->sh_entsize ? sh->sh_size / sh->sh_entsize : 0, added = 0;

	if (!d)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const char *name;
		GElf_Sym sym;
		int type, bind, prio, err;

		/*
		 * libtorch_cpu's symbols and names are ~100 MB of the file: read whole, they were
		 * the agent's peak RSS on the H200 (82.6 MB of its pages at once). Every DROP_EVERY
		 * symbols the pages read so far go (an image in memory is the caller's: kept).
		 */
		if (from_file && i && i % DROP_EVERY == 0) {
			elf_drop_file_pages(elf, d->d_buf, d->d_size);
			if (t->ext_map)
				madvise(t->ext_map, t->ext_map_len, MADV_DONTNEED);
		}
		if (!gelf_getsym(d, (int)i, &sym))
			break;
		type = GELF_ST_TYPE(sym.st_info);
		bind = GELF_ST_BIND(sym.st_info);
		if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= nscn || !sym.st_value)
			continue;
		if (type != STT_FUNC && type != STT_GNU_IFUNC &&
		    !(type == STT_NOTYPE && exec_scn[sym.st_shndx]))
			continue;
		/* from our own mapping of the names when there is one: one copy of the pages */
		name = t->ext && sym.st_name < t->ext_len ? t->ext + sym.st_name
							  : elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || !*name || *name == '$')
			continue;
		prio = (type != STT_NOTYPE) * 64 +
		       (bind == STB_GLOBAL ? 32 : bind == STB_WEAK ? 16 : 0);
		for (const char *p = name; *p == '_' && prio > 0 && p - name < 4; p++)
			prio--;
		err = t->ext ? symt_add_ext(t, sym.st_value, sym.st_size, sym.st_name, prio)
			     : symt_add(t, sym.st_value, sym.st_size, name, strlen(name), prio, 0);
		if (err)
			return err;
		added++;
	}
	*ret_added = added;
	return 0;
}

/*
 * PLT stubs have no symbols: without one of their own, their addresses would take the name of
 * whatever precedes them (_init). Each PLT section becomes one "[plt]" symbol.
 */
static int add_plt(Elf *elf, struct symt *ret)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	GElf_Shdr sh;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return 0;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *name;
		int err;

		if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_EXECINSTR) || !sh.sh_size)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!name || (strcmp(name, ".plt") && strcmp(name, ".plt.sec") &&
			      strcmp(name, ".plt.got")))
			continue;
		err = symt_add(ret, sh.sh_addr, sh.sh_size, "[plt]", 5, -1, 0);
		if (err)
			return err;
	}
	return 0;
}

static void unmap_strtab(struct symt *t)
{
	if (t->ext_map)
		munmap(t->ext_map, t->ext_map_len);
	t->ext = NULL;
	t->ext_len = 0;
	t->ext_map = NULL;
	t->ext_map_len = 0;
}

/*
 * Maps section strndx of the file open as fd (a symbol table's names) into t->ext, so names are
 * referenced rather than copied. Nothing when fd < 0 (an image in memory) or it cannot be.
 */
static void map_strtab(Elf *elf, int fd, size_t strndx, struct symt *t)
{
	Elf_Scn *scn = elf_getscn(elf, strndx);
	long page = sysconf(_SC_PAGESIZE);
	GElf_Shdr sh;
	uint64_t off;
	void *m;

	unmap_strtab(t);
	if (fd < 0 || !scn || !gelf_getshdr(scn, &sh) || sh.sh_type != SHT_STRTAB || !sh.sh_size ||
	    sh.sh_size >= SYMT_EXT || page <= 0)
		return;
	off = sh.sh_offset & ~((uint64_t)page - 1);
	m = mmap(NULL, sh.sh_size + (sh.sh_offset - off), PROT_READ, MAP_PRIVATE, fd, (off_t)off);
	if (m == MAP_FAILED)
		return;
	t->ext_map = m;
	t->ext_map_len = sh.sh_size + (sh.sh_offset - off);
	t->ext = (const char *)m + (sh.sh_offset - off);
	t->ext_len = sh.sh_size;
	if (t->ext[t->ext_len - 1]) {	/* not NUL-terminated: copy names instead */
		unmap_strtab(t);
		return;
	}
	madvise(m, t->ext_map_len, MADV_RANDOM);	/* lookups touch a page each, no readahead */
}

static int symbols_from_elf(Elf *elf, int fd, struct symt *ret, bool *ret_from_symtab)
{
	Elf_Scn *scn = NULL, *symtab = NULL, *dynsym = NULL;
	GElf_Shdr sh_symtab, sh_dynsym, sh;
	size_t nscn = 0, added = 0;
	bool *exec_scn = NULL;
	int err = 0;

	memset(ret, 0, sizeof(*ret));
	if (elf_kind(elf) != ELF_K_ELF || elf_getshdrnum(elf, &nscn))
		return -ENOEXEC;
	exec_scn = calloc(nscn ? nscn : 1, sizeof(*exec_scn));
	if (!exec_scn)
		return -ENOMEM;
	while ((scn = elf_nextscn(elf, scn))) {
		size_t idx = elf_ndxscn(scn);

		if (!gelf_getshdr(scn, &sh))
			continue;
		if (idx < nscn)
			exec_scn[idx] = sh.sh_flags & SHF_EXECINSTR;
		if (sh.sh_type == SHT_SYMTAB && !symtab) {
			symtab = scn;
			sh_symtab = sh;
		} else if (sh.sh_type == SHT_DYNSYM && !dynsym) {
			dynsym = scn;
			sh_dynsym = sh;
		}
	}
	if (symtab) {
		map_strtab(elf, fd, sh_symtab.sh_link, ret);
		err = add_symbols(elf, fd >= 0, symtab, &sh_symtab, exec_scn, nscn, ret, &added);
		if (err)
			goto out_free;
	}
	*ret_from_symtab = added > 0;
	if (!added && dynsym) {
		map_strtab(elf, fd, sh_dynsym.sh_link, ret);
		err = add_symbols(elf, fd >= 0, dynsym, &sh_dynsym, exec_scn, nscn, ret, &added);
		if (err)
			goto out_free;
	}
	if (!added)
		unmap_strtab(ret);
	if (!added) {
		err = -ENODATA;
		goto out_free;
	}
	err = add_plt(elf, ret);
	if (err)
		goto out_free;
	/* Zero-size symbols (assembly) reach to the next one, but not further than 64 KiB. */
	err = symt_finish(ret, 64 << 10);
	/* The parse touched every name; from now on a lookup touches a page each. Dropping the
	 * pages (clean, re-read from the page cache when needed) keeps them out of the agent's
	 * resident memory: libtorch_cpu's names held ~20 MB there. */
	if (!err && ret->ext_map)
		madvise(ret->ext_map, ret->ext_map_len, MADV_DONTNEED);
out_free:
	if (err)
		symt_done(ret);
	free(exec_scn);
	return err;
}

int elf_read_symbols(int fd, struct symt *ret, bool *ret_from_symtab)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	int err;

	memset(ret, 0, sizeof(*ret));
	*ret_from_symtab = false;
	if (!elf)
		return -ENOEXEC;
	err = symbols_from_elf(elf, fd, ret, ret_from_symtab);
	elf_end(elf);
	return err;
}

int elf_read_mem(void *buf, size_t len, struct elf_info *ret_info, struct symt *ret_syms)
{
	Elf *elf = elf_memory(buf, len);
	bool from_symtab;
	int err;

	memset(ret_info, 0, sizeof(*ret_info));
	if (ret_syms)
		memset(ret_syms, 0, sizeof(*ret_syms));
	if (!elf)
		return -ENOEXEC;
	err = info_from_elf(elf, ret_info);
	if (!err && ret_syms) {
		err = symbols_from_elf(elf, -1, ret_syms, &from_symtab);
		if (err) {
			free(ret_info->segs);
			ret_info->segs = NULL;
		}
	}
	elf_end(elf);
	return err;
}

/*
 * Calls fn for each defined symbol with a value of .symtab (pass 0), then .dynsym (pass 1), until
 * fn returns true (stop) or both are done; fn may end a pass early by setting *next_pass. The
 * file pages the walk touched are dropped as it goes (a big library's names are tens of MB).
 */
typedef bool (*sym_fn)(void *ctx, int pass, const char *name, const GElf_Sym *sym,
		       bool *next_pass);

/* The file pages of a symbol table (d) and of its names (strsh, in the file raw) dropped. */
static void drop_symbol_pages(Elf *elf, const Elf_Data *d, const char *raw, size_t flen,
			      const GElf_Shdr *strsh)
{
	elf_drop_file_pages(elf, d->d_buf, d->d_size);
	if (raw && strsh->sh_offset + strsh->sh_size <= flen)
		elf_drop_file_pages(elf, raw + strsh->sh_offset, strsh->sh_size);
}

static void each_symbol(Elf *elf, sym_fn fn, void *ctx)
{
	size_t flen = 0;
	const char *raw = elf_rawfile(elf, &flen);
	Elf_Scn *scn = NULL;
	bool stop = false;

	for (int pass = 0; pass < 2 && !stop; pass++) {	/* .symtab, then .dynsym */
		bool next = false;

		while (!stop && !next && (scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh, strsh;
			Elf_Data *d;
			size_t cnt;

			if (!gelf_getshdr(scn, &sh) ||
			    sh.sh_type != (pass ? SHT_DYNSYM : SHT_SYMTAB) || !sh.sh_entsize ||
			    !(d = elf_getdata(scn, NULL)))
				continue;
			if (!gelf_getshdr(elf_getscn(elf, sh.sh_link), &strsh))
				memset(&strsh, 0, sizeof(strsh));
			cnt = sh.sh_size / sh.sh_entsize;
			for (size_t i = 0; i < cnt && !stop && !next; i++) {
				const char *name;
				GElf_Sym sym;

				if (i && i % DROP_EVERY == 0)
					drop_symbol_pages(elf, d, raw, flen, &strsh);
				if (!gelf_getsym(d, (int)i, &sym))
					break;
				if (sym.st_shndx == SHN_UNDEF || !sym.st_value)
					continue;
				name = elf_strptr(elf, sh.sh_link, sym.st_name);
				if (name && *name)
					stop = fn(ctx, pass, name, &sym, &next);
			}
			drop_symbol_pages(elf, d, raw, flen, &strsh);
		}
		scn = NULL;
	}
}

static Elf *elf_open_mmap(int fd)
{
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);

	if (elf && elf_kind(elf) != ELF_K_ELF) {
		elf_end(elf);
		elf = NULL;
	}
	return elf;
}

struct find_names {
	const char *const *names;
	size_t n, found;
	uint64_t *addr, *size;
};

static bool find_name(void *ctx, int pass, const char *name, const GElf_Sym *sym, bool *next)
{
	struct find_names *f = ctx;

	for (size_t k = 0; k < f->n; k++) {
		if (f->addr[k] || strcmp(name, f->names[k]))
			continue;
		f->addr[k] = sym->st_value;
		f->size[k] = sym->st_size;
		f->found++;
	}
	return f->found == f->n;
}

int elf_find_symbols(int fd, const char *const *names, size_t n, uint64_t *ret_addr,
		     uint64_t *ret_size)
{
	struct find_names f = { names, n, 0, ret_addr, ret_size };
	Elf *elf = elf_open_mmap(fd);

	memset(ret_addr, 0, n * sizeof(*ret_addr));
	memset(ret_size, 0, n * sizeof(*ret_size));
	if (!elf)
		return -ENOEXEC;
	each_symbol(elf, find_name, &f);
	elf_end(elf);
	return (int)f.found;
}

struct find_prefix {
	const char *prefix;
	size_t plen;
	char *name;
	size_t len;
	uint64_t addr;
	int pass, err;
};

static bool find_prefix(void *ctx, int pass, const char *name, const GElf_Sym *sym, bool *next)
{
	struct find_prefix *f = ctx;

	if (f->addr && pass != f->pass) {	/* found in .symtab: .dynsym has nothing new */
		*next = true;
		return true;
	}
	if (GELF_ST_TYPE(sym->st_info) != STT_FUNC || GELF_ST_BIND(sym->st_info) == STB_LOCAL ||
	    strncmp(name, f->prefix, f->plen) || strchr(name + f->plen, '.'))
		return false;
	if (f->addr && f->addr != sym->st_value) {
		f->err = -EEXIST;
		return true;
	}
	if (strlen(name) >= f->len) {
		f->err = -ENAMETOOLONG;
		return true;
	}
	strcpy(f->name, name);
	f->addr = sym->st_value;
	f->pass = pass;
	return false;
}

int elf_find_function_prefix(int fd, const char *prefix, char *ret_name, size_t len,
			     uint64_t *ret_off)
{
	struct find_prefix f = { .prefix = prefix, .plen = strlen(prefix), .name = ret_name,
				 .len = len };
	Elf *elf = elf_open_mmap(fd);
	size_t nph = 0;
	int err = -ENOENT;

	if (!elf)
		return -ENOEXEC;
	each_symbol(elf, find_prefix, &f);
	if (f.err || !f.addr) {
		elf_end(elf);
		return f.err ? f.err : -ENOENT;
	}
	/* the file offset of its address: what a uprobe is attached at */
	if (elf_getphdrnum(elf, &nph))
		nph = 0;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD ||
		    f.addr < ph.p_vaddr || f.addr >= ph.p_vaddr + ph.p_filesz)
			continue;
		*ret_off = f.addr - ph.p_vaddr + ph.p_offset;
		err = 0;
		break;
	}
	elf_end(elf);
	return err;
}

/*
 * Resolved once per file: libbpf would parse the (large) ELF again for every probe. The
 * first-byte test keeps the name comparisons cheap on a driver's thousands of symbols.
 */
int elf_dynsym_offsets(int fd, const char *const *names, size_t n, uint64_t *ret_off)
{
	Elf *elf;
	Elf_Scn *scn = NULL;
	GElf_Phdr ph[32];
	size_t nph = 0, nh;
	int found = 0;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOTSUP;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return -EINVAL;
	if (elf_getphdrnum(elf, &nh))
		goto out;
	for (size_t i = 0; i < nh && nph < sizeof(ph) / sizeof(ph[0]); i++)
		if (gelf_getphdr(elf, (int)i, &ph[nph]) && ph[nph].p_type == PT_LOAD)
			nph++;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(data, (int)i, &sym) ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
			    !sym.st_value)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name)
				continue;
			for (size_t k = 0; k < n; k++) {
				if (name[0] != names[k][0] || strcmp(name, names[k]))
					continue;
				for (size_t j = 0; j < nph; j++) {
					const GElf_Phdr *h = &ph[j];

					uint64_t v = sym.st_value;

					if (v >= h->p_vaddr && v < h->p_vaddr + h->p_filesz)
						ret_off[k] = v - h->p_vaddr + h->p_offset;
				}
				found++;
			}
		}
	}
out:
	elf_end(elf);
	return found ? found : -ENOENT;
}

bool elf_off_to_vaddr(const struct elf_seg *segs, int nsegs, uint64_t off, uint64_t *ret)
{
	/* Exact first; then with the page slack below p_offset that a mapping's pgoff can have. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < nsegs; i++) {
			uint64_t start = pass ? segs[i].off & ~4095ULL : segs[i].off;

			if (off >= start && off < segs[i].off + segs[i].filesz) {
				*ret = off - segs[i].off + segs[i].vaddr;
				return true;
			}
		}
	}
	return false;
}
