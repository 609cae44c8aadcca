# SPDX-License-Identifier: Apache-2.0
# Symbolizer test fixtures (tests/unit/test_symbolize.c) and benchmark driver: a PIE with a
# shared library and a C++ file, and the same binary stripped to .dynsym only.
SYMFIX_SRC := tests/fixtures/symbolize
SYMFIX_OUT := $(OUT)/tests/fixtures/symbolize
SYMFIX_CFLAGS := -g -O1 -fno-omit-frame-pointer -fno-inline -Wl,--build-id=sha1
SYMFIX_BINS := $(SYMFIX_OUT)/libsymfix.so $(SYMFIX_OUT)/libsymfix_late.so $(SYMFIX_OUT)/symfix_pie \
	       $(SYMFIX_OUT)/symfix_stripped $(SYMFIX_OUT)/symfix_static $(SYMFIX_OUT)/symfix_nodebug \
	       $(SYMFIX_OUT)/symfix_nopie

all: $(SYMFIX_BINS) $(OUT)/bench/symbolize/symbench

$(SYMFIX_OUT)/libsymfix.so: $(SYMFIX_SRC)/lib.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(SYMFIX_CFLAGS) -fPIC -shared -o $@ $<

$(SYMFIX_OUT)/libsymfix_late.so: $(SYMFIX_SRC)/late.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(SYMFIX_CFLAGS) -fPIC -shared -o $@ $<

# Self-contained (static-pie) for the container test: it runs chrooted in a new pid namespace.
$(SYMFIX_OUT)/symfix_static: $(SYMFIX_SRC)/prog.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(SYMFIX_CFLAGS) -DSYMFIX_STATIC -fPIE -static-pie -o $@ $<

$(SYMFIX_OUT)/cxx.o: $(SYMFIX_SRC)/cxx.cc
	$(Q)mkdir -p $(dir $@)
	$(Q)g++ -g -O1 -fno-inline -fPIE -c -o $@ $<

$(SYMFIX_OUT)/symfix_pie: $(SYMFIX_SRC)/prog.c $(SYMFIX_OUT)/cxx.o $(SYMFIX_OUT)/libsymfix.so
	$(Q)$(CC) $(SYMFIX_CFLAGS) -fPIE -pie -o $@ $< $(SYMFIX_OUT)/cxx.o \
		-L$(SYMFIX_OUT) -lsymfix -Wl,-rpath,'$$ORIGIN' -lstdc++ -ldl

# Position-dependent (ET_EXEC at 0x400000), segments aligned to 64 KiB: no load bias.
$(SYMFIX_OUT)/symfix_nopie: $(SYMFIX_SRC)/prog.c $(SYMFIX_SRC)/cxx.cc $(SYMFIX_OUT)/libsymfix.so
	$(Q)g++ -g -O1 -fno-inline -fno-pie -c -o $(SYMFIX_OUT)/cxx_nopie.o $(SYMFIX_SRC)/cxx.cc
	$(Q)$(CC) $(SYMFIX_CFLAGS) -fno-pie -no-pie -Wl,-z,max-page-size=0x10000 -o $@ $< \
		$(SYMFIX_OUT)/cxx_nopie.o -L$(SYMFIX_OUT) -lsymfix -Wl,-rpath,'$$ORIGIN' -lstdc++ -ldl

# Only .dynsym survives: -rdynamic exports the global functions, strip drops .symtab.
$(SYMFIX_OUT)/symfix_stripped: $(SYMFIX_SRC)/prog.c $(SYMFIX_OUT)/cxx.o $(SYMFIX_OUT)/libsymfix.so
	$(Q)$(CC) $(SYMFIX_CFLAGS) -fPIE -pie -rdynamic -o $@ $< $(SYMFIX_OUT)/cxx.o \
		-L$(SYMFIX_OUT) -lsymfix -Wl,-rpath,'$$ORIGIN' -lstdc++ -ldl
	$(Q)strip --strip-all $@

# symfix_pie stripped of .symtab, and its symbols in a separate debug file found by build-id
# (debug/.build-id/xx/yyyy.debug), the way Debian's -dbgsym packages install them.
$(SYMFIX_OUT)/symfix_nodebug: $(SYMFIX_OUT)/symfix_pie
	$(Q)strip --strip-all -o $@ $<
	$(Q)rm -rf $(SYMFIX_OUT)/debug && \
		d=$(SYMFIX_OUT)/debug/.build-id/$$(readelf -n $< | sed -n 's|.*Build ID: \(..\)\(.*\)|\1/\2|p') && \
		mkdir -p $$(dirname $$d) && objcopy --only-keep-debug $< $$d.debug

$(OUT)/bench/symbolize/symbench: bench/symbolize/symbench.c $(ALL_LIBS)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)

$(OUT)/tests/unit/test_symbolize: $(SYMFIX_BINS)
$(SYMFIX_BINS) $(SYMFIX_OUT)/cxx.o: mk/symbolizer.mk
