/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Label selectors, Prometheus style: {pod="x",comm=~"py.*",gpu!="1",ns!~"kube-.*"}. Regexes
 * follow Prometheus (RE2 syntax, anchored at both ends, '.' matches newline) on PCRE2, with what
 * RE2 lacks refused; an absent label has the value "". Matching is bounded: each regex match
 * has step, depth and memory limits, and a selector may carry a deadline for its query.
 */
#ifndef GPUSCOPE_SELECTOR_H
#define GPUSCOPE_SELECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SELECTOR_MAX_MATCHERS	32
#define SELECTOR_MAX_LEN	4096

struct selector;

/*
 * Parses s ("" or "{}" select everything; the braces are optional). Returns the selector (free
 * with selector_free()) or NULL with errno EINVAL / ENOMEM and a reason in err.
 */
struct selector *selector_parse(const char *s, char *err, size_t errlen);
void selector_free(struct selector *sel);
/*
 * A new selector with only sel's matchers on these label names (sel NULL: matches all), e.g.
 * the node-level part of a process selector, for records that carry node labels only (a
 * GPU's busy/observed intervals). NULL with errno on ENOMEM. Free with selector_free().
 */
struct selector *selector_restrict(const struct selector *sel, const char *const *names,
				   size_t nnames);

/*
 * Whether the label set (name/value strings, alternating; npairs names) matches. NULL sel
 * matches everything. Thread-safe. Once a regex hits its limits or the deadline passes, it
 * answers false from then on and selector_failed() says why: the caller must not present such
 * a result as complete.
 */
bool selector_match(const struct selector *sel, const char *const *pairs, size_t npairs);

/* A CLOCK_MONOTONIC time (ns) after which regex matching stops; 0: none. Before matching. */
void selector_set_deadline(struct selector *sel, uint64_t deadline_ns);

/* Forgets a failure (selector_failed() 0 again) and the deadline, for a selector used by one
 * query after another (the exporter's, evaluated each scrape). Not while another thread
 * matches with it. */
void selector_reset(struct selector *sel);

/* 0, or why matching stopped: -E2BIG (a regex hit its step, depth or memory limit on some
 * value), -ETIMEDOUT (the deadline), -ENOMEM. */
int selector_failed(const struct selector *sel);

#endif
