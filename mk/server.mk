# SPDX-License-Identifier: Apache-2.0
# server: test/bench tool (tests/tools/batchgen.c) and libFuzzer targets (tests/fuzz/*.c, built
# with clang -fsanitize=fuzzer,address by `make fuzz`, run by tests/integration/test_server_fuzz).
BATCHGEN := $(OUT)/tests/tools/batchgen
all: $(BATCHGEN)
$(BATCHGEN): $(call obj,tests/tools/batchgen.c) $(COMMON_LIB) $(PROTO_LIB)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(COMMON_LIB) $(PROTO_LIB) $(LDLIBS)
