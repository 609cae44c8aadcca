/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the label selector parser (selector_parse) on arbitrary strings; whatever
 * parses is matched against a few label sets. Built by mk/server.mk, run by
 * tests/integration/test_server_fuzz.sh.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "server/selector.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const a[] = { "comm", "python3", "node", "n1", "pid", "42" };
	static const char *const b[] = { "gpu", "0" };
	struct selector *sel;
	char err[256], *s;

	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	sel = selector_parse(s, err, sizeof(err));
	if (sel) {
		selector_match(sel, a, 3);
		selector_match(sel, b, 1);
		selector_match(sel, NULL, 0);
	}
	selector_free(sel);
	free(s);
	return 0;
}
