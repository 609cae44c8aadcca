# SPDX-License-Identifier: Apache-2.0
# One Makefile for everything. Output goes to .output/. Components add rules in mk/*.mk;
# sources are discovered by directory, so adding a file needs no Makefile edit:
#   src/common/*.c            -> .output/libgpuscope_common.a (linked into every binary)
# Each binary links only the libraries it uses (*_LDLIBS below; mk/*.mk add theirs): the server
# needs neither libbpf nor clang, bpftool or the build host's BTF.
#   proto/**/*.proto          -> .output/proto/*.pb-c.[ch] -> .output/libgpuscope_proto.a
#   src/agent/*/X.bpf.c       -> .output/bpf/X.bpf.o -> .output/X.skel.h (beside its loader X.c)
#   src/agent/**/*.c          -> .output/libgpuscope_agent.a (main.c excluded) + gpuscope-agent
#   src/server/**/*.c         -> .output/libgpuscope_server.a (main.c excluded) + gpuscope-server
#   src/cli/**/*.c            -> gpuscope
#   tests/unit/test_*.c       -> .output/tests/unit/test_* (linked with every library above)
#   tests/progs/*.c           -> .output/tests/progs/* (workloads the tests run; -fno-omit-frame-pointer)

OUT      := .output
CC       ?= gcc
CLANG    ?= clang
BPFTOOL  ?= $(shell command -v bpftool 2>/dev/null || echo /usr/sbin/bpftool)
PROTOC_C ?= protoc-c
ARCH     := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')
Q        := $(if $(V),,@)
# PROGRESS=1 (make run sets it): one line per build step, for a first build that takes minutes.
progress  = $(if $(PROGRESS),$(if $(V),,@printf '  %-5s %s\n' '$(1)' '$(2)'))

CFLAGS   ?= -g -O2
CFLAGS   += -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
	    -fno-omit-frame-pointer -D_GNU_SOURCE -Isrc -I$(OUT) -I$(OUT)/proto
ifneq ($(SANITIZE),)
CFLAGS   += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SANITIZE)
endif
COMMON_LDLIBS := -lprotobuf-c -lzstd -lz -lpthread -lm
AGENT_LDLIBS  := -lbpf -ldw -lelf -lcurl -lmicrohttpd -ldl -lstdc++
SERVER_LDLIBS := -lsqlite3 -lpcre2-8 -lmicrohttpd -lcurl
CLI_LDLIBS    := -lbpf -lcurl -ldl
# Tests and tools that link several parts take the union (recursive: mk/*.mk add to the parts).
LDLIBS    = $(AGENT_LDLIBS) $(SERVER_LDLIBS) $(CLI_LDLIBS) $(COMMON_LDLIBS)

.DELETE_ON_ERROR:
.SECONDARY:
.PHONY: all bins test run clean deps bench stock-check

# all: everything `make test` needs (tests, fuzzers, stand-ins, bench tools); bins: only what
# `make run` runs (agent, server with its UI, CLI, the CUPTI library where CUDA is installed).
all: bins
bins:

deps:
	$(Q)scripts/install-deps

# ---- sources ----------------------------------------------------------------------------------
rwildcard = $(foreach d,$(wildcard $(1:=/*)),$(call rwildcard,$d,$2) $(filter $(subst *,%,$2),$d))

COMMON_SRCS := $(wildcard src/common/*.c)
PROTO_SRCS  := $(call rwildcard,proto,*.proto)
PROTO_C     := $(patsubst proto/%.proto,$(OUT)/proto/%.pb-c.c,$(PROTO_SRCS))
PROTO_H     := $(PROTO_C:.c=.h)
BPF_SRCS    := $(call rwildcard,src/agent,*.bpf.c)
BPF_STEMS   := $(basename $(basename $(notdir $(BPF_SRCS))))
BPF_OBJS    := $(patsubst %,$(OUT)/bpf/%.bpf.o,$(BPF_STEMS))
SKELS       := $(patsubst %,$(OUT)/%.skel.h,$(BPF_STEMS))
AGENT_SRCS  := $(filter-out src/agent/main.c %.bpf.c,$(call rwildcard,src/agent,*.c))
SERVER_SRCS := $(filter-out src/server/main.c,$(call rwildcard,src/server,*.c))
CLI_SRCS    := $(call rwildcard,src/cli,*.c)
UNIT_SRCS   := $(wildcard tests/unit/test_*.c)
PROG_SRCS   := $(wildcard tests/progs/*.c)

obj = $(patsubst %.c,$(OUT)/obj/%.o,$(1))

COMMON_LIB := $(OUT)/libgpuscope_common.a
PROTO_LIB  := $(OUT)/libgpuscope_proto.a
AGENT_LIB  := $(OUT)/libgpuscope_agent.a
SERVER_LIB := $(OUT)/libgpuscope_server.a
ALL_LIBS   := $(AGENT_LIB) $(SERVER_LIB) $(COMMON_LIB) $(PROTO_LIB)

AGENT_BIN  := $(OUT)/gpuscope-agent
SERVER_BIN := $(OUT)/gpuscope-server
CLI_BIN    := $(OUT)/gpuscope
UNIT_BINS  := $(patsubst tests/unit/%.c,$(OUT)/tests/unit/%,$(UNIT_SRCS))
PROG_BINS  := $(patsubst tests/progs/%.c,$(OUT)/tests/progs/%,$(PROG_SRCS))

bins: $(AGENT_BIN) $(if $(wildcard src/server/main.c),$(SERVER_BIN)) $(if $(CLI_SRCS),$(CLI_BIN))
all: $(UNIT_BINS) $(PROG_BINS)

# ---- generated: vmlinux.h, skeletons, protobuf ------------------------------------------------
VMLINUX := $(OUT)/vmlinux/vmlinux.h
$(VMLINUX):
	$(Q)mkdir -p $(dir $@)
	$(Q)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@

# Each BPF program sits in its feature folder (src/agent/sched/sched.bpf.c); vpath finds it by stem.
vpath %.bpf.c $(sort $(dir $(BPF_SRCS)))
$(BPF_OBJS): $(OUT)/bpf/%.bpf.o: %.bpf.c $(VMLINUX)
	$(call progress,BPF,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CLANG) -g -O2 -mcpu=v3 -Wall -Werror -target bpf -D__TARGET_ARCH_$(ARCH) -I$(dir $(VMLINUX)) -Isrc \
		-MMD -MP -MF $(@:.o=.d) -c $< -o $@
	$(Q)llvm-strip -g $@

$(SKELS): $(OUT)/%.skel.h: $(OUT)/bpf/%.bpf.o
	$(call progress,GEN,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

$(OUT)/proto/%.pb-c.c $(OUT)/proto/%.pb-c.h: proto/%.proto
	$(call progress,PROTO,$<)
	$(Q)mkdir -p $(OUT)/proto
	$(Q)$(PROTOC_C) -Iproto --c_out=$(OUT)/proto $<

# ---- objects ----------------------------------------------------------------------------------
# Generated headers are order-only: they exist before the first compile, and the compiler's
# dependency files (-MMD) say afterwards which object really includes which. Only the agent's
# objects wait for the BPF skeletons.
$(OUT)/obj/src/agent/%.o: src/agent/%.c | $(SKELS) $(PROTO_H)
	$(call progress,CC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(OUT)/obj/%.o: %.c | $(PROTO_H)
	$(call progress,CC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(OUT)/obj/.output/proto/%.o: $(OUT)/proto/%.c
	$(call progress,CC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out -Wextra,$(CFLAGS)) -c $< -o $@

$(OUT):
	$(Q)mkdir -p $@

$(COMMON_LIB): $(call obj,$(COMMON_SRCS))
	$(call progress,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
$(PROTO_LIB): $(patsubst $(OUT)/%.c,$(OUT)/obj/.output/%.o,$(PROTO_C))
	$(call progress,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
$(AGENT_LIB): $(call obj,$(AGENT_SRCS))
	$(call progress,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^
$(SERVER_LIB): $(call obj,$(SERVER_SRCS))
	$(call progress,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(AGENT_BIN): $(call obj,src/agent/main.c) $(AGENT_LIB) $(COMMON_LIB) $(PROTO_LIB)
	$(call progress,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LDLIBS) $(COMMON_LDLIBS)
$(SERVER_BIN): $(call obj,src/server/main.c) $(SERVER_LIB) $(COMMON_LIB) $(PROTO_LIB)
	$(call progress,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(SERVER_LDLIBS) $(COMMON_LDLIBS)
$(CLI_BIN): $(call obj,$(CLI_SRCS)) $(COMMON_LIB) $(PROTO_LIB)
	$(call progress,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(CLI_LDLIBS) $(COMMON_LDLIBS)

$(OUT)/tests/unit/%: $(call obj,tests/unit/%.c) $(ALL_LIBS)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(LDLIBS)

# Test workloads: frame pointers, symbols kept, PIE.
$(OUT)/tests/progs/%: tests/progs/%.c
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) -g -O1 -fno-omit-frame-pointer -fno-inline -fPIE -pie -pthread -o $@ $< $(PROG_LDLIBS_$*)

-include $(shell find $(OUT)/obj $(OUT)/bpf -name '*.d' 2>/dev/null)
include $(sort $(wildcard mk/*.mk))

# ---- entry points -----------------------------------------------------------------------------
test: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)tests/run

# Only what running needs: the run packages (scripts/deps/*-test.txt are for `make test`) and
# the binaries it runs (bins, not the tests); the build says what it is doing, since the first
# one takes a minute or more.
run:
	$(Q)scripts/install-deps run
	$(Q)echo "make run: building gpuscope into $(abspath $(OUT))/ (first time: a minute or two)"
	$(Q)$(MAKE) --no-print-directory bins PROGRESS=1 $(if $(findstring -j,$(MAKEFLAGS)),,-j$(shell nproc))
	$(Q)scripts/run

# `make run` on a stock Debian 12 made fresh by debootstrap (10-30 minutes, Debian's mirror):
# run it after changing scripts/deps/ or mk/ and commit tests/stock/results.txt
# (tests/integration/test_stock_record fails until the recorded pass matches them).
stock-check:
	$(Q)nice tests/stock/debootstrap_run.sh

clean:
	rm -rf $(OUT)
