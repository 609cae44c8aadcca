/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Label selector parser and matcher (selector.h). Regexes go through PCRE2 with Prometheus'
 * semantics where the engines agree (anchored at both ends, '.' matches newline, UTF-8) and
 * the constructs RE2 lacks refused; every match runs under PCRE2's match, depth and heap
 * limits, and a selector carries a time budget for the query it serves.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "server/selector.h"

enum op { OP_EQ, OP_NE, OP_RE, OP_NRE };

struct matcher {
	char *name, *value;
	enum op op;
	pcre2_code *re;
};

struct selector {
	struct matcher m[SELECTOR_MAX_MATCHERS];
	size_t n;
	pcre2_match_context *mctx;	/* the limits, shared by the matchers */
	uint64_t deadline_ns;		/* CLOCK_MONOTONIC; 0: none */
	int failed;			/* 0, or the -errno that stopped matching (atomic) */
};

/*
 * Per match: PCRE2's count of backtracking steps (a nested repetition hits it within about a
 * millisecond), its recursion depth and its backtracking memory. Label values are short; a
 * pattern that needs more on one of them is refused rather than waited for.
 */
#define RE_MATCH_LIMIT	200000
#define RE_DEPTH_LIMIT	10000
#define RE_HEAP_LIMIT_KIB 1024

void selector_free(struct selector *sel)
{
	if (!sel)
		return;
	for (size_t i = 0; i < sel->n; i++) {
		free(sel->m[i].name);
		free(sel->m[i].value);
		pcre2_code_free(sel->m[i].re);
	}
	pcre2_match_context_free(sel->mctx);
	free(sel);
}

static void skip_ws(const char **p)
{
	while (isspace((unsigned char)**p))
		(*p)++;
}

/* Parses a double- or single-quoted string with \\ \" \' \n \t escapes. */
static char *parse_string(const char **p, char *err, size_t errlen)
{
	char q = **p, *out, *o;
	const char *s;

	if (q != '"' && q != '\'') {
		snprintf(err, errlen, "expected a quoted value at '%.20s'", *p);
		return NULL;
	}
	s = ++(*p);
	out = o = malloc(strlen(s) + 1);
	if (!out) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (; *s && *s != q; s++) {
		if (*s != '\\') {
			*o++ = *s;
			continue;
		}
		s++;
		switch (*s) {
		case '\\': case '"': case '\'':
			*o++ = *s;
			break;
		case 'n':
			*o++ = '\n';
			break;
		case 't':
			*o++ = '\t';
			break;
		default:
			/* Unknown escapes are kept for the regex (\. \d ...). */
			if (!*s)
				goto out_unterminated;
			*o++ = '\\';
			*o++ = *s;
		}
	}
	if (*s != q)
		goto out_unterminated;
	*o = 0;
	*p = s + 1;
	return out;
out_unterminated:
	free(out);
	snprintf(err, errlen, "unterminated string");
	return NULL;
}

#define RE_MAX_LEN 512

/*
 * What PCRE2 accepts but RE2 (Prometheus' engine) does not: back-references, lookaround,
 * atomic groups, recursion, conditionals, backtracking verbs, possessive quantifiers, \C.
 * Refused by text, outside character classes; a rare false alarm only refuses a pattern.
 */
static int check_regex(const char *re, char *err, size_t errlen)
{
	static const char *const bad[] = { "(?=", "(?!", "(?<=", "(?<!", "(?>", "(?R", "(?(",
					   "(?P=", "(?P>", "(?&", "(*", "(?|", "(?C" };
	bool in_class = false;

	if (strlen(re) > RE_MAX_LEN) {
		snprintf(err, errlen, "regex longer than %d bytes", RE_MAX_LEN);
		return -EINVAL;
	}
	for (const char *p = re; *p; p++) {
		if (*p == '\\' && p[1]) {
			if (!in_class && ((p[1] >= '1' && p[1] <= '9') || p[1] == 'g' || p[1] == 'k' ||
					  p[1] == 'C' || p[1] == 'K' || p[1] == 'G')) {
				snprintf(err, errlen, "'\\%c' (back-references and PCRE-only escapes) "
					 "are not supported in regexes", p[1]);
				return -EINVAL;
			}
			p++;
			continue;
		}
		if (in_class) {
			in_class = *p != ']';
			continue;
		}
		if (*p == '[') {
			in_class = true;
			if (p[1] == '^')
				p++;
			if (p[1] == ']')
				p++;
			continue;
		}
		if ((*p == '*' || *p == '+' || *p == '?' || *p == '}') && p[1] == '+') {
			snprintf(err, errlen, "possessive quantifiers are not supported in regexes");
			return -EINVAL;
		}
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			if (!strncmp(p, bad[i], strlen(bad[i]))) {
				snprintf(err, errlen, "'%s' (lookaround, atomic groups, recursion, "
					 "conditionals, verbs) is not supported in regexes", bad[i]);
				return -EINVAL;
			}
	}
	return 0;
}

static int parse_matcher(struct matcher *m, const char **p, char *err, size_t errlen)
{
	const char *s = *p;
	int rc;

	if (!isalpha((unsigned char)*s) && *s != '_') {
		snprintf(err, errlen, "expected a label name at '%.20s'", s);
		return -EINVAL;
	}
	while (isalnum((unsigned char)*s) || *s == '_')
		s++;
	m->name = strndup(*p, (size_t)(s - *p));
	if (!m->name)
		return -ENOMEM;
	skip_ws(&s);
	if (!strncmp(s, "=~", 2)) {
		m->op = OP_RE;
		s += 2;
	} else if (!strncmp(s, "!~", 2)) {
		m->op = OP_NRE;
		s += 2;
	} else if (!strncmp(s, "!=", 2)) {
		m->op = OP_NE;
		s += 2;
	} else if (*s == '=') {
		m->op = OP_EQ;
		s++;
	} else {
		snprintf(err, errlen, "expected =, !=, =~ or !~ after '%s'", m->name);
		return -EINVAL;
	}
	skip_ws(&s);
	m->value = parse_string(&s, err, errlen);
	if (!m->value)
		return -EINVAL;
	if (m->op == OP_RE || m->op == OP_NRE) {
		PCRE2_SIZE off;
		uint32_t brefs = 0;

		if (check_regex(m->value, err, errlen))
			return -EINVAL;
		/* Prometheus: "^(?s:RE)$", Go's RE2 on UTF-8 (invalid bytes match nothing
		 * special, as Go's U+FFFD would not match either). */
		m->re = pcre2_compile((PCRE2_SPTR)m->value, PCRE2_ZERO_TERMINATED,
				      PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_DOTALL |
					      PCRE2_DOLLAR_ENDONLY | PCRE2_UTF |
					      PCRE2_MATCH_INVALID_UTF | PCRE2_NEVER_BACKSLASH_C,
				      &rc, &off, NULL);
		if (!m->re) {
			char msg[128];

			pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof(msg));
			snprintf(err, errlen, "bad regex '%s' for '%s': %s at offset %zu", m->value,
				 m->name, msg, (size_t)off);
			return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL;
		}
		pcre2_pattern_info(m->re, PCRE2_INFO_BACKREFMAX, &brefs);
		if (brefs) {
			snprintf(err, errlen, "back-references are not supported in regexes");
			return -EINVAL;
		}
	}
	*p = s;
	return 0;
}

/* An empty selector with its match limits; NULL on ENOMEM. */
static struct selector *selector_new(void)
{
	struct selector *sel = calloc(1, sizeof(*sel));

	if (sel)
		sel->mctx = pcre2_match_context_create(NULL);
	if (!sel || !sel->mctx) {
		free(sel);
		return NULL;
	}
	pcre2_set_match_limit(sel->mctx, RE_MATCH_LIMIT);
	pcre2_set_depth_limit(sel->mctx, RE_DEPTH_LIMIT);
	pcre2_set_heap_limit(sel->mctx, RE_HEAP_LIMIT_KIB);
	return sel;
}

struct selector *selector_restrict(const struct selector *sel, const char *const *names,
				   size_t nnames)
{
	struct selector *r = selector_new();

	if (!r) {
		errno = ENOMEM;
		return NULL;
	}
	r->deadline_ns = sel ? sel->deadline_ns : 0;
	for (size_t i = 0; sel && i < sel->n; i++) {
		const struct matcher *m = &sel->m[i];
		struct matcher *c = &r->m[r->n];
		bool keep = false;

		for (size_t k = 0; k < nnames && !keep; k++)
			keep = !strcmp(m->name, names[k]);
		if (!keep)
			continue;
		c->op = m->op;
		c->name = strdup(m->name);
		c->value = strdup(m->value);
		c->re = m->re ? pcre2_code_copy(m->re) : NULL;
		r->n++;
		if (!c->name || !c->value || (m->re && !c->re)) {
			selector_free(r);
			errno = ENOMEM;
			return NULL;
		}
	}
	return r;
}

struct selector *selector_parse(const char *s, char *err, size_t errlen)
{
	struct selector *sel;
	bool braces;
	int rc = 0;

	if (strlen(s) > SELECTOR_MAX_LEN) {
		snprintf(err, errlen, "selector longer than %d bytes", SELECTOR_MAX_LEN);
		errno = EINVAL;
		return NULL;
	}
	sel = selector_new();
	if (!sel) {
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	skip_ws(&s);
	braces = *s == '{';
	if (braces)
		s++;
	for (;;) {
		skip_ws(&s);
		if (!*s || *s == '}')
			break;
		if (sel->n == SELECTOR_MAX_MATCHERS) {
			snprintf(err, errlen, "more than %d matchers", SELECTOR_MAX_MATCHERS);
			rc = -EINVAL;
			goto out_free;
		}
		rc = parse_matcher(&sel->m[sel->n], &s, err, errlen);
		sel->n++;
		if (rc)
			goto out_free;
		skip_ws(&s);
		if (*s == ',') {
			s++;
			continue;
		}
		if (*s && *s != '}') {
			snprintf(err, errlen, "expected ',' or '}' at '%.20s'", s);
			rc = -EINVAL;
			goto out_free;
		}
	}
	if (braces != (*s == '}')) {
		snprintf(err, errlen, braces ? "missing '}'" : "unexpected '}'");
		rc = -EINVAL;
		goto out_free;
	}
	if (*s == '}')
		s++;
	skip_ws(&s);
	if (*s) {
		snprintf(err, errlen, "trailing characters at '%.20s'", s);
		rc = -EINVAL;
		goto out_free;
	}
	return sel;
out_free:
	selector_free(sel);
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	errno = -rc;
	return NULL;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void selector_set_deadline(struct selector *sel, uint64_t deadline_ns)
{
	if (sel)
		sel->deadline_ns = deadline_ns;
}

void selector_reset(struct selector *sel)
{
	if (!sel)
		return;
	sel->deadline_ns = 0;
	__atomic_store_n(&sel->failed, 0, __ATOMIC_RELAXED);
}

int selector_failed(const struct selector *sel)
{
	return sel ? __atomic_load_n(&sel->failed, __ATOMIC_RELAXED) : 0;
}

/* 1 match, 0 no match, -errno when the limits stopped it. */
static int re_match(const struct selector *sel, const pcre2_code *re, const char *v)
{
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	int rc;

	if (!md)
		return -ENOMEM;
	rc = pcre2_match(re, (PCRE2_SPTR)v, PCRE2_ZERO_TERMINATED, 0, 0, md, sel->mctx);
	pcre2_match_data_free(md);
	if (rc >= 0)
		return 1;
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	return rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -E2BIG;
}

bool selector_match(const struct selector *sel, const char *const *pairs, size_t npairs)
{
	struct selector *w = (struct selector *)sel;	/* only `failed` changes */

	if (!sel)
		return true;
	if (__atomic_load_n(&sel->failed, __ATOMIC_RELAXED))
		return false;
	for (size_t i = 0; i < sel->n; i++) {
		const struct matcher *m = &sel->m[i];
		const char *v = "";
		int ok;

		for (size_t k = 0; k < npairs; k++) {
			if (!strcmp(pairs[2 * k], m->name)) {
				v = pairs[2 * k + 1];
				break;
			}
		}
		switch (m->op) {
		case OP_EQ:
			ok = !strcmp(v, m->value);
			break;
		case OP_NE:
			ok = strcmp(v, m->value) != 0;
			break;
		default:
			if (sel->deadline_ns && now_ns() > sel->deadline_ns) {
				__atomic_store_n(&w->failed, -ETIMEDOUT, __ATOMIC_RELAXED);
				return false;
			}
			ok = re_match(sel, m->re, v);
			if (ok < 0) {
				__atomic_store_n(&w->failed, ok, __ATOMIC_RELAXED);
				return false;
			}
			if (m->op == OP_NRE)
				ok = !ok;
			break;
		}
		if (!ok)
			return false;
	}
	return true;
}
