# SPDX-License-Identifier: Apache-2.0
# push: the agent's run mode and the gpuscope CLI (JSON answers parsed with jansson).
AGENT_LDLIBS += -ljansson
CLI_LDLIBS += -ljansson
# flamesvg.c embeds the flame graph script with .incbin: rebuild it when the script changes.
$(OUT)/obj/src/cli/flamesvg.o: src/cli/flamegraph.js
# bench/push: the push-path benchmark (not part of `all`; bench/push/run.sh builds it).
$(OUT)/bench/push_bench: $(call obj,bench/push/push_bench.c) $(ALL_LIBS)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)
# tests/tools/pushload: the real push code under continuous-tracing-sized batches
# (tests/integration/test_push_fit.py).
PUSHLOAD := $(OUT)/tests/tools/pushload
all: $(PUSHLOAD)
$(PUSHLOAD): $(call obj,tests/tools/pushload.c) $(AGENT_LIB) $(COMMON_LIB) $(PROTO_LIB)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(AGENT_LIB) $(COMMON_LIB) $(PROTO_LIB) $(LDLIBS)
