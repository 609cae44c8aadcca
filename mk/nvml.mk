# SPDX-License-Identifier: Apache-2.0
# NVML replay library (tests/nvml-replay/): a libnvidia-ml.so.1 with NVML's ABI that plays back
# traces recorded by `gpuscope-agent nvml-record`; the "old" one lacks newer entry points.
NVML_REPLAY     := $(OUT)/tests/nvml/libnvidia-ml.so.1
NVML_REPLAY_OLD := $(OUT)/tests/nvml/old/libnvidia-ml.so.1

all: $(NVML_REPLAY) $(NVML_REPLAY_OLD)

$(NVML_REPLAY): tests/nvml-replay/replay.c src/agent/gpu/nvml_api.h
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -fPIC -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
		-o $@ $< -lz -lpthread

$(NVML_REPLAY_OLD): tests/nvml-replay/replay.c src/agent/gpu/nvml_api.h
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -DREPLAY_OLD_DRIVER -fPIC -shared -fvisibility=hidden \
		-Wl,-soname,libnvidia-ml.so.1 -o $@ $< -lz -lpthread

# The unit test dlopen()s the replay library.
$(OUT)/tests/unit/test_nvml: | $(NVML_REPLAY) $(NVML_REPLAY_OLD)
