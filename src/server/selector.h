/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Label selectors, Prometheus style: {pod="x",comm=~"py.*",gpu!="1",ns!~"kube-.*"}. Regexes are
 * POSIX extended and must match the whole value; an absent label has the value "".
 */
#ifndef GPUSCOPE_SELECTOR_H
#define GPUSCOPE_SELECTOR_H

#include <stdbool.h>
#include <stddef.h>

#define SELECTOR_MAX_MATCHERS	32
#define SELECTOR_MAX_LEN	4096

struct selector;

/*
 * Parses s ("" or "{}" select everything; the braces are optional). Returns the selector (free
 * with selector_free()) or NULL with errno EINVAL / ENOMEM and a reason in err.
 */
struct selector *selector_parse(const char *s, char *err, size_t errlen);
void selector_free(struct selector *sel);

/* Whether the label set (name/value strings, alternating; npairs names) matches. NULL sel
 * matches everything. Thread-safe. */
bool selector_match(const struct selector *sel, const char *const *pairs, size_t npairs);

#endif
