# SPDX-License-Identifier: Apache-2.0
# NVML replay library (tests/nvml-replay/): a libnvidia-ml.so.1 with NVML's ABI that plays back
# traces recorded by `gpuscope-agent nvml-record`; the "old" one lacks newer entry points.
NVML_REPLAY     := $(OUT)/tests/nvml/libnvidia-ml.so.1
NVML_REPLAY_OLD := $(OUT)/tests/nvml/old/libnvidia-ml.so.1
NVML_REPLAY_SRC := $(wildcard tests/nvml-replay/*.c)
NVML_REPLAY_DEP := $(NVML_REPLAY_SRC) tests/nvml-replay/replay_int.h src/agent/gpu/nvml_api.h

all: $(NVML_REPLAY) $(NVML_REPLAY_OLD)

$(NVML_REPLAY): $(NVML_REPLAY_DEP)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -fPIC -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
		-o $@ $(NVML_REPLAY_SRC) -lz -lpthread

$(NVML_REPLAY_OLD): $(NVML_REPLAY_DEP)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -DREPLAY_OLD_DRIVER -fPIC -shared -fvisibility=hidden \
		-Wl,-soname,libnvidia-ml.so.1 -o $@ $(NVML_REPLAY_SRC) -lz -lpthread

# The unit test dlopen()s the replay library.
$(OUT)/tests/unit/test_nvml: | $(NVML_REPLAY) $(NVML_REPLAY_OLD)
