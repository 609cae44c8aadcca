/* SPDX-License-Identifier: Apache-2.0 */
/* The symbolizer's kernel frames: /proc/kallsyms's text symbols by module, and the kernel's
 * build-id. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/sym/symbolize.h"
#include "agent/sym/sym_state.h"
#include "agent/procs/elf.h"
#include "agent/procs/symtab.h"
#include "common/log.h"
#include "common/util.h"

#define KSYM_MAX_SIZE (256u << 10)	/* longest kernel function assumed (kallsyms has no sizes) */
#define KERNEL_REREAD_NS (60 * NSEC_PER_SEC)	/* a kallsyms read costs ~120 ms of CPU */

/* The running kernel's build-id from /sys/kernel/notes (raw ELF notes); "" if none. */
static const char *kernel_build_id(struct symbolizer *s)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char buf[4096];
	char hex[2 * 64 + 1] = "";
	size_t off = 0, n;
	FILE *f = fopen("/sys/kernel/notes", "re");

	if (!f)
		return s->s_empty;
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	while (off + 12 <= n) {
		uint32_t namesz, descsz, type;
		size_t name_off = off + 12, desc_off;

		memcpy(&namesz, buf + off, 4);
		memcpy(&descsz, buf + off + 4, 4);
		memcpy(&type, buf + off + 8, 4);
		desc_off = name_off + ((namesz + 3) & ~3u);
		if (desc_off + descsz > n)
			break;
		if (type == 3 && namesz == 4 && !memcmp(buf + name_off, "GNU", 4) && descsz <= 64) {
			for (uint32_t i = 0; i < descsz; i++) {
				hex[2 * i] = digits[buf[desc_off + i] >> 4];
				hex[2 * i + 1] = digits[buf[desc_off + i] & 15];
			}
			hex[2 * descsz] = 0;
			break;
		}
		off = desc_off + ((descsz + 3) & ~3u);
	}
	return sym_intern(s, hex) ?: s->s_empty;
}

static int kmod_index(struct symbolizer *s, struct kmodule **mods, size_t *n, size_t *cap,
		      const char *name)
{
	const char *iname = sym_intern(s, name);

	if (!iname)
		return -ENOMEM;
	for (size_t i = *n; i > 0; i--)	/* symbols of one module are contiguous: likely the last */
		if ((*mods)[i - 1].name == iname)
			return (int)i - 1;
	if (array_reserve(mods, cap, *n + 1, sizeof(**mods), 16))
		return -ENOMEM;
	(*mods)[*n] = (struct kmodule){ .name = iname, .start = UINT64_MAX, .limit = 0 };
	return (int)(*n)++;
}

/* Reads /proc/kallsyms (text symbols only). 0, -EPERM (addresses hidden), -errno. */
static int kallsyms_read(struct symbolizer *s)
{
	struct kmodule *mods = NULL;
	size_t nmods = 0, modcap = 0, cap = 0;
	struct symt t = { 0 };
	char *line = NULL;
	bool any_addr = false;
	int err = 0, core;
	FILE *f;

	s->k_read_ns = mono_ns();
	f = fopen("/proc/kallsyms", "re");
	if (!f)
		return -errno;
	core = kmod_index(s, &mods, &nmods, &modcap, "[kernel.kallsyms]");
	if (core < 0) {
		err = core;
		goto out_free;
	}
	while (getline(&line, &cap, f) > 0) {
		char *p, *name, *mod;
		uint64_t addr = strtoull(line, &p, 16);
		char type;
		int mi = core;

		if (*p != ' ' || !p[1] || p[2] != ' ')
			continue;
		type = (char)tolower((unsigned char)p[1]);
		if (type != 't' && type != 'w')
			continue;
		name = p + 3;
		name[strcspn(name, "\t\n")] = 0;
		mod = name + strlen(name) + 1;
		if (addr)
			any_addr = true;
		if (*mod == '[') {
			mod[strcspn(mod, "]\n") + 1] = 0;
			mi = kmod_index(s, &mods, &nmods, &modcap, mod);
			if (mi < 0) {
				err = mi;
				goto out_free;
			}
		}
		if (addr < mods[mi].start)
			mods[mi].start = addr;
		if (addr + 1 > mods[mi].limit)
			mods[mi].limit = addr + 1;
		err = symt_add(&t, addr, 0, name, strlen(name), 0, (uint32_t)mi + 1);
		if (err)
			goto out_free;
	}
	if (!any_addr) {
		err = -EPERM;
		goto out_free;
	}
	/* No sizes in kallsyms: each symbol reaches to the next (bpf_check() alone is 12 KiB:
	 * a 4 KiB cap left the tails of large functions unknown), at most KSYM_MAX_SIZE. */
	err = symt_finish(&t, KSYM_MAX_SIZE);
	if (err)
		goto out_free;
	for (size_t i = 0; i < nmods; i++)
		mods[i].limit += 4095;
	symt_done(&s->ksyms);
	u64map_done(&s->knames);
	memset(&s->knames, 0, sizeof(s->knames));
	free(s->kmods);
	s->ksyms = t;
	s->kmods = mods;
	s->nkmods = nmods;
	t = (struct symt){ 0 };
	mods = NULL;
out_free:
	symt_done(&t);
	free(mods);
	free(line);
	fclose(f);
	return err;
}

int symbolizer__kernel(struct symbolizer *s, uint64_t addr, struct sym_frame *ret)
{
	long i;

	if (!s || !ret)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	ret->kernel = true;
	ret->module = s->s_kernel;
	ret->file_offset = addr;
	if (!s->k_build_id)
		s->k_build_id = kernel_build_id(s);
	ret->build_id = s->k_build_id;
	if (!s->k_read) {
		int err = kallsyms_read(s);

		s->k_read = true;
		if (err)
			log_warn("symbolizer: reading /proc/kallsyms: %s; kernel frames stay "
				 "unresolved", strerror(-err));
	}
	i = symt_find(&s->ksyms, addr);
	if (i < 0 && mono_ns() - s->k_read_ns >= KERNEL_REREAD_NS && !kallsyms_read(s))
		i = symt_find(&s->ksyms, addr);	/* new modules or BPF programs */
	if (i < 0) {
		s->st.unknown++;
		if (s->k_unknown_logged < 8) {	/* what the kernel's unknown frames are */
			s->k_unknown_logged++;
			log_info("symbolizer: kernel address 0x%" PRIx64 " is in no text symbol of "
				 "/proc/kallsyms (%zu symbols, first 0x%" PRIx64 "); shown as "
				 "[unknown] [kernel.kallsyms] (first 8 logged)", addr,
				 s->ksyms.n, s->ksyms.n ? s->ksyms.e[0].addr : 0);
		}
		return -ENOENT;
	}
	{
		const struct kmodule *km = &s->kmods[s->ksyms.aux[i] - 1];

		ret->module = km->name;
		ret->map_start = km->start;
		ret->map_limit = km->limit;
		if (km->name != s->s_kernel)
			ret->build_id = s->s_empty;
	}
	ret->function = sym_display_name(s, &s->knames, &s->ksyms, i);
	if (!ret->function) {
		s->st.unknown++;
		return -ENOENT;
	}
	ret->sym_offset = addr - s->ksyms.e[i].addr;
	s->st.resolved++;
	return 0;
}
