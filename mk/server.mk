# SPDX-License-Identifier: Apache-2.0
# server: test/bench tool (tests/tools/batchgen.c) and libFuzzer targets (tests/fuzz/*.c, built
# with clang -fsanitize=fuzzer,address by `make fuzz`, run by tests/integration/test_server_fuzz).
BATCHGEN := $(OUT)/tests/tools/batchgen
all: $(BATCHGEN)
$(BATCHGEN): $(call obj,tests/tools/batchgen.c) $(COMMON_LIB) $(PROTO_LIB)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(COMMON_LIB) $(PROTO_LIB) -lcurl $(COMMON_LDLIBS)

# libFuzzer targets: clang with -fsanitize=fuzzer,address,undefined over the sources they test.
FUZZ_CFLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -std=gnu11 \
	       -D_GNU_SOURCE -Isrc -I$(OUT) -I$(OUT)/proto
FUZZ_BINS   := $(OUT)/fuzz/fuzz_batch $(OUT)/fuzz/fuzz_selector $(OUT)/fuzz/fuzz_chunk
all: $(FUZZ_BINS)
$(OUT)/fuzz/fuzz_batch: tests/fuzz/fuzz_batch.c src/common/batch.c src/common/batch_decode.c \
			src/common/hmap.c src/common/util.c \
			src/common/log.c $(OUT)/proto/gpuscope/v1/batch.pb-c.c $(PROTO_H)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lprotobuf-c -lpthread -lm
$(OUT)/fuzz/fuzz_selector: tests/fuzz/fuzz_selector.c src/server/selector.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lpcre2-8
$(OUT)/fuzz/fuzz_chunk: tests/fuzz/fuzz_chunk.c src/server/store/sqlite/chunk.c \
			src/server/store/sqlite/ivchunk.c src/server/store/sqlite/blocks.c src/server/codec.c \
			src/common/hmap.c src/common/util.c src/common/log.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -o $@ $(filter %.c,$^) -lzstd -lz -lm
