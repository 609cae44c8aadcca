# SPDX-License-Identifier: Apache-2.0
# Unwinder fixtures: a workload and its shared library built WITHOUT frame pointers (the
# integration test's 50/30/20 shares, the table builder's readelf comparison).
UWFIX_SRC := tests/fixtures/unwind
UWFIX_OUT := $(OUT)/tests/fixtures/unwind
UWFIX_CFLAGS := -g -O2 -fomit-frame-pointer -Wl,--build-id=sha1
UWFIX_BINS := $(UWFIX_OUT)/libnofp.so $(UWFIX_OUT)/libnofp_late.so $(UWFIX_OUT)/nofp_burn

all: $(UWFIX_BINS)

$(UWFIX_OUT)/libnofp.so: $(UWFIX_SRC)/nofp_lib.c mk/unwind.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(UWFIX_CFLAGS) -fPIC -shared -o $@ $<

$(UWFIX_OUT)/libnofp_late.so: $(UWFIX_SRC)/nofp_lib.c mk/unwind.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(UWFIX_CFLAGS) -DLATE -fPIC -shared -o $@ $<

$(UWFIX_OUT)/nofp_burn: $(UWFIX_SRC)/nofp_burn.c $(UWFIX_OUT)/libnofp.so mk/unwind.mk
	$(Q)$(CC) $(UWFIX_CFLAGS) -fPIE -pie -o $@ $< -L$(UWFIX_OUT) -lnofp -Wl,-rpath,'$$ORIGIN' -ldl

$(OUT)/tests/unit/test_unwind_table $(OUT)/tests/unit/test_unwind_cache: $(UWFIX_BINS)

# Benchmark driver: table build time, rows and bytes per binary (bench/unwind/README.md).
all: $(OUT)/bench/unwind/tablebench
$(OUT)/bench/unwind/tablebench: bench/unwind/tablebench.c $(ALL_LIBS)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)
