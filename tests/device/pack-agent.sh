#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packs the built binaries for the GPU machine: DEST/{bin,lib}/ with every shared library they
# need that is not glibc's, and DEST/libgpuscope_cupti.so (the GPU machine's image lacks libbpf, libmicrohttpd, ...).
# Run after `make`: tests/device/pack-agent.sh [DEST] (default .dev/agent, relative to the
# repository root); copy DEST to the GPU machine and, there,
#   export LD_LIBRARY_PATH=$PWD/.dev/agent/lib PATH=$PWD/.dev/agent/bin:$PATH
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-.dev/agent}
rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib"
for b in .output/gpuscope-agent .output/gpuscope-server .output/gpuscope; do
	if [ -x "$b" ]; then cp "$b" "$dest/bin/"; fi
done
# the CUPTI library the GPU machine's processes load (CUDA_INJECTION64_PATH=$dest/libgpuscope_cupti.so)
if [ -f .output/libgpuscope_cupti.so ]; then cp .output/libgpuscope_cupti.so "$dest/"; fi
for b in "$dest"/bin/*; do
	ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r l; do
	cp -L "$l" "$dest/lib/"
done
du -sh "$dest"
