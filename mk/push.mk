# SPDX-License-Identifier: Apache-2.0
# push: the agent's run mode and the gpuscope CLI (JSON answers parsed with jansson).
LDLIBS += -ljansson
# flamesvg.c embeds the flame graph script with .incbin: rebuild it when the script changes.
$(OUT)/obj/src/cli/flamesvg.o: src/cli/flamegraph.js
