# SPDX-License-Identifier: Apache-2.0
# libgpuscope_cupti.so (the CUDA injection library) and the CUPTI test workloads.
# The library links libcupti from the CUDA toolkit with RUNPATH $ORIGIN:$(CUDA_HOME)/lib64;
# where libcupti lives elsewhere (pip's nvidia-cuda-cupti) LD_LIBRARY_PATH finds it.
CUDA_HOME   ?= /usr/local/cuda
CUPTI_LIB   := $(OUT)/libgpuscope_cupti.so
CUPTI_FAKE  := $(OUT)/tests/cupti/libgpuscope_cupti_fake.so
CUPTI_CFLAGS := -std=gnu11 -g -O2 -Wall -Wextra -Werror -Wno-unused-parameter -fPIC \
	-fvisibility=hidden -D_GNU_SOURCE -Isrc -fno-omit-frame-pointer

ifneq ($(wildcard $(CUDA_HOME)/include/cupti.h),)
bins: $(CUPTI_LIB)
endif
all: $(CUPTI_FAKE) $(OUT)/tests/cupti/cupti_replay

$(CUPTI_LIB): src/cupti/inject.c src/cupti/handover.c src/cupti/interpose.c src/cupti/thread.c src/cupti/interpose.h src/cupti/probes.h src/cupti/exports.map src/common/abi_cupti.h mk/cupti.mk
	$(call progress,CC,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -I$(CUDA_HOME)/include -shared -o $@ $(filter %.c,$^) \
		-Wl,--version-script=src/cupti/exports.map -Wl,-z,defs \
		-L$(CUDA_HOME)/lib64 -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(CUDA_HOME)/lib64 \
		-lcupti -lpthread

# The stand-in that fires the library's probes without a GPU (tests/cupti/).
$(CUPTI_FAKE): tests/cupti/fake_lib.c src/cupti/probes.h src/common/abi_cupti.h mk/cupti.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -shared -o $@ $<

$(OUT)/tests/cupti/cupti_replay: tests/cupti/cupti_replay.c $(CUPTI_FAKE)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O1 -fno-omit-frame-pointer -fno-inline -fPIE -pie -D_GNU_SOURCE -Isrc \
		-o $@ $< -L$(OUT)/tests/cupti -lgpuscope_cupti_fake -Wl,-rpath,'$$ORIGIN' -pthread

# <bpf/usdt.bpf.h> includes <linux/errno.h>, whose <asm/errno.h> lives in the multiarch dir.
$(OUT)/bpf/cupti.bpf.o: CLANG += -I/usr/include/$(shell $(CC) -dumpmachine)

# The cupti module alone, statically linked, for the GPU machine (tests/device/cupti_device.sh).
CUPTI_DUMP := $(OUT)/tests/cupti/cupti_dump
all: $(CUPTI_DUMP)
$(CUPTI_DUMP): $(call obj,tests/cupti/cupti_dump.c) $(ALL_LIBS)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -static -o $@ $< $(ALL_LIBS) -lbpf -ldw -lelf -lz -lzstd -llzma -lbz2 -lprotobuf-c -lstdc++ \
		-lpthread -lm

$(OUT)/tests/cupti/cupti_launch_bench: tests/cupti/cupti_launch_bench.c $(CUPTI_FAKE)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O2 -fno-omit-frame-pointer -D_GNU_SOURCE -Isrc -o $@ $< \
		-L$(OUT)/tests/cupti -lgpuscope_cupti_fake -Wl,-rpath,'$$ORIGIN'
all: $(OUT)/tests/cupti/cupti_launch_bench

# The libcupti.so.13 stand-in and the application that runs the real library over it
# (tests/unit/test_cupti_window.c): trace windows through the real control path, no GPU.
FAKE_CUPTI_DIR := $(OUT)/tests/cupti/fakecupti
ifneq ($(wildcard $(CUDA_HOME)/include/cupti.h),)
all: $(FAKE_CUPTI_DIR)/libcupti.so.13 $(OUT)/tests/cupti/cupti_window
endif
$(FAKE_CUPTI_DIR)/libcupti.so.13: tests/cupti/fake_cupti.c tests/cupti/fake_cupti.h mk/cupti.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -I$(CUDA_HOME)/include -shared -Wl,-soname,libcupti.so.13 \
		-o $@ $< -lpthread

$(OUT)/tests/cupti/cupti_window: tests/cupti/cupti_window.c $(FAKE_CUPTI_DIR)/libcupti.so.13
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O1 -fno-omit-frame-pointer -fno-inline -D_GNU_SOURCE -Isrc -o $@ $< \
		$(FAKE_CUPTI_DIR)/libcupti.so.13 -Wl,-rpath,'$$ORIGIN/fakecupti' -ldl

# The libtorch_cpu.so stand-in: autograd's Engine::execute and device thread, for backward
# stacks (tests/integration/test_kernel_python_stacks.py).
FAKE_TORCH := $(OUT)/tests/cupti/faketorch/libtorch_cpu.so
all: $(FAKE_TORCH)
$(FAKE_TORCH): tests/cupti/fake_torch.c mk/cupti.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -shared -o $@ $< -ldl -lpthread

# A user's own CUPTI client over the stand-in, calling CUPTI through its PLT (bound at load, its
# GOT read-only: full RELRO, as wheels are often linked) and through dlsym (lazy binding)
# (tests/unit/test_cupti_handover.c: our windows hand CUPTI over to it).
ifneq ($(wildcard $(CUDA_HOME)/include/cupti.h),)
all: $(FAKE_CUPTI_DIR)/libuserprof_plt.so $(FAKE_CUPTI_DIR)/libuserprof_dlsym.so
all: $(FAKE_CUPTI_DIR)/libscopedep.so
endif
$(FAKE_CUPTI_DIR)/libuserprof_plt.so: tests/cupti/user_prof.c tests/cupti/user_prof.h $(FAKE_CUPTI_DIR)/libcupti.so.13
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -I$(CUDA_HOME)/include -shared -o $@ $< \
		$(FAKE_CUPTI_DIR)/libcupti.so.13 -Wl,-rpath,'$$ORIGIN' -Wl,-z,relro,-z,now
$(FAKE_CUPTI_DIR)/libuserprof_dlsym.so: tests/cupti/user_prof.c tests/cupti/user_prof.h $(FAKE_CUPTI_DIR)/libscopedep.so
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -I$(CUDA_HOME)/include -DUSE_DLSYM -shared -o $@ $< \
		-Wl,--no-as-needed $(FAKE_CUPTI_DIR)/libscopedep.so -Wl,--as-needed -Wl,-rpath,'$$ORIGIN' -ldl
$(FAKE_CUPTI_DIR)/libscopedep.so: tests/cupti/scope_dep.c mk/cupti.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CUPTI_CFLAGS) -shared -Wl,-soname,libscopedep.so -o $@ $<

# The GOT interposition against a dynamic loader at work (tests/integration/test_cupti_dlopen_race.sh):
# a library whose relocation pauses with its dlsym slot bound (tests/cupti/race_lib.c) and the
# program that opens and closes it beside the real library's control thread.
ifneq ($(wildcard $(CUDA_HOME)/include/cupti.h),)
all: $(FAKE_CUPTI_DIR)/librace.so $(OUT)/tests/cupti/dlopen_race
endif
$(FAKE_CUPTI_DIR)/librace.so: tests/cupti/race_lib.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -O1 -fPIC -shared -o $@ $< -ldl -Wl,-z,relro,-z,now
$(OUT)/tests/cupti/dlopen_race: tests/cupti/dlopen_race.c $(FAKE_CUPTI_DIR)/libcupti.so.13
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O1 -D_GNU_SOURCE -o $@ $< \
		$(FAKE_CUPTI_DIR)/libcupti.so.13 -Wl,-rpath,'$$ORIGIN/fakecupti' -ldl
