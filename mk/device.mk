# SPDX-License-Identifier: Apache-2.0
# Standalone measurement programs for the GPU machine (tests/device/), built here against the
# CUDA toolkit where it is installed and carried there (that machine has no compiler guarantee).
CUDA_HOME ?= /usr/local/cuda
PM_SAMPLING := $(OUT)/tests/device/pm_sampling
# cupti_profiler_host.h includes C++'s <string> (and uses nothing of it): a C build finds an empty
# one here first.
PM_SAMPLING_SHIM := $(OUT)/tests/device/cshim
ifneq ($(wildcard $(CUDA_HOME)/include/cupti_pmsampling.h),)
all: $(PM_SAMPLING)
endif
PM_SAMPLING_SRCS := $(sort $(wildcard tests/device/pm_sampling*.c))
$(PM_SAMPLING): $(PM_SAMPLING_SRCS) tests/device/pm_sampling.h mk/device.mk
	$(Q)mkdir -p $(dir $@) $(PM_SAMPLING_SHIM)
	$(Q): > $(PM_SAMPLING_SHIM)/string
	$(Q)$(CC) -std=gnu11 -g -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I$(PM_SAMPLING_SHIM) \
		-I$(CUDA_HOME)/include -o $@ $(PM_SAMPLING_SRCS) -ldl -lpthread -lm

# The stand-in libcuda.so.1 and libcupti.so.13 its dry run in make test loads (no GPU here).
PM_STANDIN := $(OUT)/tests/device/standin
ifneq ($(wildcard $(CUDA_HOME)/include/cupti_pmsampling.h),)
all: $(PM_STANDIN)/libcuda.so.1 $(PM_STANDIN)/libcupti.so.13
endif
$(PM_STANDIN)/libcuda.so.1: tests/device/pm_standin_cuda.c mk/device.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -std=gnu11 -g -O1 -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -shared \
		-fvisibility=hidden -I$(CUDA_HOME)/include -Wl,-soname,libcuda.so.1 -o $@ $<
$(PM_STANDIN)/libcupti.so.13: tests/device/pm_standin_cupti.c $(PM_SAMPLING) mk/device.mk
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -std=gnu11 -g -O1 -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -shared \
		-fvisibility=hidden -I$(PM_SAMPLING_SHIM) -I$(CUDA_HOME)/include \
		-Wl,-soname,libcupti.so.13 -o $@ $< -ldl -lpthread
