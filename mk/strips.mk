# SPDX-License-Identifier: Apache-2.0
# strips (thread states, off-CPU, CUDA driver API probes): the stand-in libcuda.so.1 the CUDA
# probe tests load (tests/cuda/), built with frame pointers and symbols.
STRIPS_STANDIN := $(OUT)/tests/cuda/libcuda.so.1

all: $(STRIPS_STANDIN)

$(STRIPS_STANDIN): tests/cuda/libcuda_standin.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O1 -fno-omit-frame-pointer -fPIC -shared -Wall -Werror -Wl,-soname,libcuda.so.1 \
		-o $@ $<

# strips-dump: the thread-state and CUDA modules without a server, records as JSON lines
# (tests/device/strips_torch.sh, bench/sched-overhead).
STRIPS_DUMP := $(OUT)/strips-dump
all: $(STRIPS_DUMP)
$(STRIPS_DUMP): $(call obj,tests/device/strips_dump.c) $(ALL_LIBS)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(AGENT_LIB) $(COMMON_LIB) $(PROTO_LIB) $(AGENT_LDLIBS) \
		$(COMMON_LDLIBS)
