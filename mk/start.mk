# SPDX-License-Identifier: Apache-2.0
# The agent's start (bench/start): the verifier's statistics for each of its BPF programs.
all: $(OUT)/bench/start/verifier_stats
$(OUT)/bench/start/verifier_stats: bench/start/verifier_stats.c $(SKELS)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< -lbpf -lelf -lz
