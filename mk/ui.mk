# SPDX-License-Identifier: Apache-2.0
# Web UI: ui/src is bundled by esbuild (pinned in ui/package-lock.json, installed by `npm ci`
# when ui/node_modules is missing or older than the lockfile), then ui/build.mjs writes the
# files, gzip'd, as C arrays into .output/ui_assets.c, which is added to the server library.
# The e2e fixture loader (tests/tools/ui_fixture.c) is built here as well.

UI_NPM_STAMP := ui/node_modules/.package-lock.json
UI_SRCS      := $(call rwildcard,ui/src,*) ui/build.mjs
UI_ASSETS_C  := $(OUT)/ui_assets.c
UI_ASSETS_O  := $(OUT)/obj/ui/ui_assets.o

$(UI_NPM_STAMP): ui/package-lock.json ui/package.json
	$(Q)command -v npm >/dev/null || { echo "ui: npm not found: scripts/install-deps run installs it (Debian: the npm package)" >&2; exit 1; }
	$(call progress,NPM,ui/node_modules (npm ci))
	$(Q)cd ui && npm ci --no-audit --no-fund --prefer-offline --loglevel=error
	$(Q)touch $@

$(UI_ASSETS_C): $(UI_SRCS) $(UI_NPM_STAMP)
	$(Q)mkdir -p $(dir $@)
	$(call progress,UI,$@)
	$(Q)node ui/build.mjs --outdir $(OUT)/ui --c $@

$(UI_ASSETS_O): $(UI_ASSETS_C) src/server/ui_assets.h
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# The archive's recipe is `ar rcs $@ $^`: an extra prerequisite goes into it.
$(SERVER_LIB): $(UI_ASSETS_O)

# e2e fixture loader: builds batches with src/common/batch.h and POSTs them to a server.
UI_FIXTURE := $(OUT)/tests/tools/ui_fixture
ifneq ($(wildcard src/common/batch.c),)
all: $(UI_FIXTURE)
endif
$(UI_FIXTURE): $(call obj,tests/tools/ui_fixture.c) $(COMMON_LIB) $(PROTO_LIB)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(COMMON_LIB) $(PROTO_LIB) -lcurl $(COMMON_LDLIBS)

.PHONY: ui
ui: $(UI_ASSETS_C)
