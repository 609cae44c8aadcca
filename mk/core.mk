# SPDX-License-Identifier: Apache-2.0
# Rules for the CPU-profiler test workloads: burn links a leaf function from a shared library.
$(OUT)/tests/progs/libburnlib.so: tests/progs/lib/burnlib.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O1 -fno-omit-frame-pointer -fPIC -shared -o $@ $<
$(OUT)/tests/progs/burn: $(OUT)/tests/progs/libburnlib.so
PROG_LDLIBS_burn := -L$(OUT)/tests/progs -lburnlib -Wl,-rpath,'$$ORIGIN'
