/* SPDX-License-Identifier: Apache-2.0 */
/* Label selector parser and matcher (selector.h); regexes through POSIX regcomp(). */
#include <ctype.h>
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "server/selector.h"

enum op { OP_EQ, OP_NE, OP_RE, OP_NRE };

struct matcher {
	char *name, *value;
	enum op op;
	regex_t re;
	bool has_re;
};

struct selector {
	struct matcher m[SELECTOR_MAX_MATCHERS];
	size_t n;
};

void selector_free(struct selector *sel)
{
	if (!sel)
		return;
	for (size_t i = 0; i < sel->n; i++) {
		free(sel->m[i].name);
		free(sel->m[i].value);
		if (sel->m[i].has_re)
			regfree(&sel->m[i].re);
	}
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

/*
 * glibc's regcomp() is exponential on stacked quantifiers ("a******") and regexec() on
 * back-references: refuse both, and bound the size, so a selector cannot stall the server.
 */
#define RE_MAX_LEN		512
#define RE_MAX_QUANTIFIERS	32

static int check_regex(const char *re, char *err, size_t errlen)
{
	int nq = 0;
	bool prev_q = false;

	if (strlen(re) > RE_MAX_LEN) {
		snprintf(err, errlen, "regex longer than %d bytes", RE_MAX_LEN);
		return -EINVAL;
	}
	for (const char *p = re; *p; p++) {
		bool q = *p == '*' || *p == '+' || *p == '?' || *p == '{';

		if (*p == '\\' && p[1]) {
			if (p[1] >= '1' && p[1] <= '9') {
				snprintf(err, errlen, "back-references are not supported in regexes");
				return -EINVAL;
			}
			p++;
			prev_q = false;
			continue;
		}
		if (q && prev_q) {
			snprintf(err, errlen, "stacked quantifiers in regex '%.40s'", re);
			return -EINVAL;
		}
		if (q && ++nq > RE_MAX_QUANTIFIERS) {
			snprintf(err, errlen, "more than %d quantifiers in a regex", RE_MAX_QUANTIFIERS);
			return -EINVAL;
		}
		if (*p == '{') {
			while (p[1] && p[1] != '}')
				p++;
			if (p[1])
				p++;
		}
		prev_q = q;
	}
	return 0;
}

static int parse_matcher(struct matcher *m, const char **p, char *err, size_t errlen)
{
	const char *s = *p;
	char *re;
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
		if (check_regex(m->value, err, errlen))
			return -EINVAL;
		re = malloc(strlen(m->value) + 5);
		if (!re)
			return -ENOMEM;
		sprintf(re, "^(%s)$", m->value);
		rc = regcomp(&m->re, re, REG_EXTENDED | REG_NOSUB);
		free(re);
		if (rc) {
			char msg[128];

			regerror(rc, &m->re, msg, sizeof(msg));
			snprintf(err, errlen, "bad regex '%s' for '%s': %s", m->value, m->name, msg);
			return -EINVAL;
		}
		m->has_re = true;
	}
	*p = s;
	return 0;
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
	sel = calloc(1, sizeof(*sel));
	if (!sel) {
		snprintf(err, errlen, "out of memory");
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

bool selector_match(const struct selector *sel, const char *const *pairs, size_t npairs)
{
	if (!sel)
		return true;
	for (size_t i = 0; i < sel->n; i++) {
		const struct matcher *m = &sel->m[i];
		const char *v = "";
		bool ok;

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
			ok = strcmp(v, m->value);
			break;
		case OP_RE:
			ok = !regexec(&m->re, v, 0, NULL, 0);
			break;
		default:
			ok = regexec(&m->re, v, 0, NULL, 0);
			break;
		}
		if (!ok)
			return false;
	}
	return true;
}
