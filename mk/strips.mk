# SPDX-License-Identifier: Apache-2.0
# strips (thread states, off-CPU, CUDA driver API probes): the stand-in libcuda.so.1 the CUDA
# probe tests load (tests/cuda/), built with frame pointers and symbols.
STRIPS_STANDIN := $(OUT)/tests/cuda/libcuda.so.1

all: $(STRIPS_STANDIN)

$(STRIPS_STANDIN): tests/cuda/libcuda_standin.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O1 -fno-omit-frame-pointer -fPIC -shared -Wall -Werror -Wl,-soname,libcuda.so.1 \
		-o $@ $<
