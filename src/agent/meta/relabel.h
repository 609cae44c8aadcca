/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prometheus-style relabeling of a process's metadata labels (keep, drop, replace, labelmap,
 * labeldrop, labelkeep) and the parser of the --relabel-config file (docs/kubernetes.md).
 */
#ifndef GPUSCOPE_AGENT_RELABEL_H
#define GPUSCOPE_AGENT_RELABEL_H

#include <stdbool.h>
#include <stddef.h>

#define LSET_MAX 128	/* labels per process, meta labels included; more are counted and dropped */

/* A small label set with owned strings; names are unique. */
struct lset {
	struct {
		char *name, *value;
	} l[LSET_MAX];
	size_t n;
	size_t overflow;	/* set calls refused because the set was full */
};

void lset_init(struct lset *ls);
void lset_done(struct lset *ls);	/* frees the strings; the set is empty and reusable */
const char *lset_get(const struct lset *ls, const char *name);	/* NULL if absent */
/* Sets name=value (copies both); an empty value removes the label. 0, -ENOMEM or -ENOSPC. */
int lset_set(struct lset *ls, const char *name, const char *value);
void lset_del(struct lset *ls, const char *name);

struct relabel_rules;

/*
 * Parses a relabel config (the YAML subset described in docs/kubernetes.md). Returns the rules
 * (free with relabel__free()), or NULL with errno set and "line N: reason" written to err.
 * An empty text gives an empty rule list.
 */
struct relabel_rules *relabel__parse(const char *text, char *err, size_t errlen);
/* relabel__parse() on a file's contents; err also names the file. */
struct relabel_rules *relabel__load(const char *path, char *err, size_t errlen);
void relabel__free(struct relabel_rules *r);
size_t relabel__count(const struct relabel_rules *r);

/*
 * Applies the rules in order to ls. Returns 1 if the set is kept, 0 if a keep/drop rule
 * dropped it (ls is then left as it was at that rule), or -errno. Thread-safe (rules are
 * read-only once parsed).
 */
int relabel__apply(const struct relabel_rules *r, struct lset *ls);

#endif
