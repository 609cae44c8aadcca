# SPDX-License-Identifier: Apache-2.0
# efficiency: the server's --export-queries file is YAML, read with libyaml.
SERVER_LDLIBS += -lyaml
