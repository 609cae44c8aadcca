# SPDX-License-Identifier: Apache-2.0
# Kubernetes metadata (src/agent/meta/meta.c): JSON from the API server through jansson.
AGENT_LDLIBS += -ljansson
