/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Relabel rules with the Prometheus semantics (regexes fully anchored, $1 references in the
 * replacement, keep/drop/replace/labelmap/labeldrop/labelkeep/lowercase/uppercase) over POSIX
 * extended regular expressions, and the parser of the small YAML subset the config file uses.
 */
#include <ctype.h>
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "agent/meta/relabel.h"
#include "common/util.h"

#define MAX_RULES	 256
#define MAX_SOURCES	 16
#define MAX_GROUPS	 32
#define MAX_CONFIG_BYTES (1 << 20)
#define MAX_VALUE	 4096	/* a joined source value or an expansion, bytes */

enum action {
	ACT_REPLACE,
	ACT_KEEP,
	ACT_DROP,
	ACT_LABELMAP,
	ACT_LABELDROP,
	ACT_LABELKEEP,
	ACT_LOWERCASE,
	ACT_UPPERCASE,
};

static const char *const action_names[] = {
	[ACT_REPLACE] = "replace",     [ACT_KEEP] = "keep",	      [ACT_DROP] = "drop",
	[ACT_LABELMAP] = "labelmap",   [ACT_LABELDROP] = "labeldrop", [ACT_LABELKEEP] = "labelkeep",
	[ACT_LOWERCASE] = "lowercase", [ACT_UPPERCASE] = "uppercase",
};

struct rule {
	enum action action;
	char *sources[MAX_SOURCES];
	size_t nsources;
	char *separator;	/* default ";" */
	char *regex_src;	/* default "(.*)" */
	regex_t re;		/* "^(" regex_src ")$": group N of the user is group N+1 here */
	bool re_ok;
	char *target;
	char *replacement;	/* default "$1" */
	int line;		/* where the rule starts, for messages */
	bool seen[6];		/* keys given, to refuse duplicates */
};

struct relabel_rules {
	struct rule r[MAX_RULES];
	size_t n;
};

/* ---- label sets ------------------------------------------------------------------------------ */

void lset_init(struct lset *ls)
{
	ls->n = 0;
	ls->overflow = 0;
}

void lset_done(struct lset *ls)
{
	for (size_t i = 0; i < ls->n; i++) {
		free(ls->l[i].name);
		free(ls->l[i].value);
	}
	ls->n = 0;
}

static ssize_t lset_find(const struct lset *ls, const char *name)
{
	for (size_t i = 0; i < ls->n; i++)
		if (!strcmp(ls->l[i].name, name))
			return (ssize_t)i;
	return -1;
}

const char *lset_get(const struct lset *ls, const char *name)
{
	ssize_t i = lset_find(ls, name);

	return i < 0 ? NULL : ls->l[i].value;
}

void lset_del(struct lset *ls, const char *name)
{
	ssize_t i = lset_find(ls, name);

	if (i < 0)
		return;
	free(ls->l[i].name);
	free(ls->l[i].value);
	memmove(&ls->l[i], &ls->l[i + 1], (ls->n - (size_t)i - 1) * sizeof(ls->l[0]));
	ls->n--;
}

int lset_set(struct lset *ls, const char *name, const char *value)
{
	ssize_t i;
	char *v;

	if (!value || !*value) {
		lset_del(ls, name);
		return 0;
	}
	v = strdup(value);
	if (!v)
		return -ENOMEM;
	i = lset_find(ls, name);
	if (i >= 0) {
		free(ls->l[i].value);
		ls->l[i].value = v;
		return 0;
	}
	if (ls->n >= LSET_MAX) {
		ls->overflow++;
		free(v);
		return -ENOSPC;
	}
	ls->l[ls->n].name = strdup(name);
	if (!ls->l[ls->n].name) {
		free(v);
		return -ENOMEM;
	}
	ls->l[ls->n++].value = v;
	return 0;
}

/* ---- parsing ----------------------------------------------------------------------------------- */

enum key { K_SOURCES, K_SEPARATOR, K_REGEX, K_TARGET, K_REPLACEMENT, K_ACTION };
static const char *const key_names[] = { "source_labels", "separator", "regex",
					 "target_label", "replacement", "action" };

struct parser {
	int line;
	char *err;
	size_t errlen;
};

static int fail(struct parser *p, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct parser *p, int line, const char *fmt, ...)
{
	va_list ap;
	int off = snprintf(p->err, p->errlen, "line %d: ", line);

	if (off < 0 || (size_t)off >= p->errlen)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(p->err + off, p->errlen - (size_t)off, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static bool valid_label_name(const char *s)
{
	if (!*s || !(isalpha((unsigned char)*s) || *s == '_'))
		return false;
	for (s++; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_'))
			return false;
	return true;
}

/*
 * Parses one YAML scalar starting at s (plain, 'single' or "double" quoted), stops at the end
 * of the scalar; *ret_end points after it (and after trailing blanks). In a flow list (in_list),
 * plain scalars also end at ',' and ']'. Returns a malloc'ed string or NULL (errno EINVAL/ENOMEM,
 * reason in *why).
 */
static char *parse_scalar(const char *s, bool in_list, const char **ret_end, const char **why)
{
	size_t cap = strlen(s) + 1, n = 0;
	char *out = malloc(cap);

	if (!out) {
		*why = "out of memory";
		errno = ENOMEM;
		return NULL;
	}
	if (*s == '"') {
		for (s++; *s && *s != '"'; s++) {
			char c = *s;

			if (c == '\\') {
				s++;
				switch (*s) {
				case 'n': c = '\n'; break;
				case 't': c = '\t'; break;
				case '\\': c = '\\'; break;
				case '"': c = '"'; break;
				case '/': c = '/'; break;
				default:
					*why = "unknown escape in double-quoted string (write \\\\ for a backslash)";
					goto out_inval;
				}
			}
			out[n++] = c;
		}
		if (*s != '"') {
			*why = "unterminated double-quoted string";
			goto out_inval;
		}
		s++;
	} else if (*s == '\'') {
		for (s++; *s; s++) {
			if (*s == '\'') {
				if (s[1] != '\'')
					break;
				s++;
			}
			out[n++] = *s;
		}
		if (*s != '\'') {
			*why = "unterminated single-quoted string";
			goto out_inval;
		}
		s++;
	} else {
		const char *start = s, *end;

		while (*s && !(in_list && (*s == ',' || *s == ']')) &&
		       !(*s == '#' && s > start && isspace((unsigned char)s[-1])))
			s++;
		end = s;
		while (end > start && isspace((unsigned char)end[-1]))
			end--;
		memcpy(out, start, (size_t)(end - start));
		n = (size_t)(end - start);
	}
	out[n] = 0;
	while (isspace((unsigned char)*s))
		s++;
	*ret_end = s;
	return out;
out_inval:
	free(out);
	errno = EINVAL;
	return NULL;
}

/* The rest of a line after a value: blank or a comment. */
static bool line_rest_ok(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return !*s || *s == '#';
}

static int set_key(struct parser *p, struct rule *r, const char *key, const char *val)
{
	const char *why = NULL, *end;
	size_t k;
	char *s;

	for (k = 0; k < ARRAY_SIZE(key_names); k++)
		if (!strcmp(key, key_names[k]))
			break;
	if (k == ARRAY_SIZE(key_names))
		return fail(p, p->line, "unknown key '%s' (want source_labels, separator, regex, "
					"target_label, replacement or action)", key);
	if (r->seen[k])
		return fail(p, p->line, "duplicate key '%s'", key);
	r->seen[k] = true;

	if (k == K_SOURCES) {
		if (*val != '[')
			return fail(p, p->line, "source_labels: write a flow list, e.g. [namespace, pod]");
		val++;
		while (isspace((unsigned char)*val))
			val++;
		while (*val != ']') {
			if (!*val)
				return fail(p, p->line, "source_labels: missing ']'");
			s = parse_scalar(val, true, &end, &why);
			if (!s)
				return fail(p, p->line, "source_labels: %s", why);
			if (r->nsources >= MAX_SOURCES) {
				free(s);
				return fail(p, p->line, "source_labels: more than %d labels", MAX_SOURCES);
			}
			r->sources[r->nsources++] = s;
			if (!valid_label_name(s))
				return fail(p, p->line, "source_labels: '%s' is not a label name", s);
			val = end;
			if (*val == ',') {
				val++;
				while (isspace((unsigned char)*val))
					val++;
			} else if (!*val) {
				return fail(p, p->line, "source_labels: missing ']'");
			} else if (*val != ']') {
				return fail(p, p->line, "source_labels: expected ',' or ']'");
			}
		}
		if (!line_rest_ok(val + 1))
			return fail(p, p->line, "unexpected text after ']'");
		return 0;
	}
	s = parse_scalar(val, false, &end, &why);
	if (!s)
		return errno == ENOMEM ? -ENOMEM : fail(p, p->line, "%s: %s", key, why);
	if (!line_rest_ok(end)) {
		free(s);
		return fail(p, p->line, "%s: unexpected text after the value", key);
	}
	switch (k) {
	case K_SEPARATOR: r->separator = s; break;
	case K_REGEX: r->regex_src = s; break;
	case K_TARGET: r->target = s; break;
	case K_REPLACEMENT: r->replacement = s; break;
	case K_ACTION: {
		size_t a;

		for (a = 0; a < ARRAY_SIZE(action_names); a++)
			if (!strcmp(s, action_names[a]))
				break;
		if (a == ARRAY_SIZE(action_names)) {
			int err = fail(p, p->line, "unknown action '%s' (want replace, keep, drop, "
						   "labelmap, labeldrop, labelkeep, lowercase or uppercase)", s);
			free(s);
			return err;
		}
		r->action = (enum action)a;
		free(s);
		break;
	}
	}
	return 0;
}

/* Fills defaults, compiles the regex and checks the combination of keys. */
static int finish_rule(struct parser *p, struct rule *r)
{
	char buf[256], *anchored;
	size_t len;
	int rc;

	if (!r->separator)
		r->separator = strdup(";");
	if (!r->regex_src)
		r->regex_src = strdup("(.*)");
	if (!r->replacement)
		r->replacement = strdup("$1");
	if (!r->separator || !r->regex_src || !r->replacement)
		return -ENOMEM;
	len = strlen(r->regex_src) + 5;
	anchored = malloc(len);
	if (!anchored)
		return -ENOMEM;
	snprintf(anchored, len, "^(%s)$", r->regex_src);
	rc = regcomp(&r->re, anchored, REG_EXTENDED);
	free(anchored);
	if (rc) {
		regerror(rc, &r->re, buf, sizeof(buf));
		return fail(p, r->line, "regex '%s': %s", r->regex_src, buf);
	}
	r->re_ok = true;
	if (r->re.re_nsub + 1 > MAX_GROUPS)
		return fail(p, r->line, "regex '%s': more than %d groups", r->regex_src,
			    MAX_GROUPS - 2);

	switch (r->action) {
	case ACT_REPLACE:
	case ACT_LOWERCASE:
	case ACT_UPPERCASE:
		if (!r->target)
			return fail(p, r->line, "action %s needs target_label",
				    action_names[r->action]);
		if (!strchr(r->target, '$') && !valid_label_name(r->target))
			return fail(p, r->line, "target_label '%s' is not a label name", r->target);
		if (r->action != ACT_REPLACE && strchr(r->target, '$'))
			return fail(p, r->line, "action %s: target_label takes no $ references",
				    action_names[r->action]);
		break;
	case ACT_KEEP:
	case ACT_DROP:
		if (!r->nsources)
			return fail(p, r->line, "action %s needs source_labels",
				    action_names[r->action]);
		break;
	case ACT_LABELMAP:
	case ACT_LABELDROP:
	case ACT_LABELKEEP:
		if (r->nsources || r->target)
			return fail(p, r->line, "action %s takes only regex%s",
				    action_names[r->action],
				    r->action == ACT_LABELMAP ? " and replacement" : "");
		break;
	}
	return 0;
}

static void rule_done(struct rule *r)
{
	for (size_t i = 0; i < r->nsources; i++)
		free(r->sources[i]);
	free(r->separator);
	free(r->regex_src);
	free(r->target);
	free(r->replacement);
	if (r->re_ok)
		regfree(&r->re);
}

void relabel__free(struct relabel_rules *rr)
{
	if (!rr)
		return;
	for (size_t i = 0; i < rr->n; i++)
		rule_done(&rr->r[i]);
	free(rr);
}

size_t relabel__count(const struct relabel_rules *rr)
{
	return rr ? rr->n : 0;
}

struct relabel_rules *relabel__parse(const char *text, char *err, size_t errlen)
{
	struct parser p = { .line = 0, .err = err, .errlen = errlen };
	struct relabel_rules *rr = calloc(1, sizeof(*rr));
	struct rule *cur = NULL;
	int dash_indent = -1, rc = 0;
	const char *s = text;
	char line[MAX_VALUE];

	if (err && errlen)
		err[0] = 0;
	if (!rr) {
		snprintf(err, errlen, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	while (*s) {
		const char *nl = strchr(s, '\n'), *c, *colon;
		size_t len = nl ? (size_t)(nl - s) : strlen(s);
		int indent = 0;
		char key[64];

		p.line++;
		if (len >= sizeof(line)) {
			rc = fail(&p, p.line, "line longer than %zu bytes", sizeof(line) - 1);
			goto out_err;
		}
		memcpy(line, s, len);
		line[len] = 0;
		s = nl ? nl + 1 : s + len;
		if (len && line[len - 1] == '\r')
			line[--len] = 0;
		if (strchr(line, '\t')) {
			rc = fail(&p, p.line, "tab character (indent with spaces)");
			goto out_err;
		}
		for (c = line; *c == ' '; c++)
			indent++;
		if (!*c || *c == '#')
			continue;
		if (!cur && indent == 0 && !strncmp(c, "relabel_configs:", 16) &&
		    line_rest_ok(c + 16))
			continue;
		if (c[0] == '-' && (c[1] == ' ' || !c[1])) {
			if (dash_indent >= 0 && indent != dash_indent) {
				rc = fail(&p, p.line, "a rule's '-' must be indented like the first rule's");
				goto out_err;
			}
			dash_indent = indent;
			if (cur) {
				rc = finish_rule(&p, cur);
				if (rc)
					goto out_err;
			}
			if (rr->n >= MAX_RULES) {
				rc = fail(&p, p.line, "more than %d rules", MAX_RULES);
				goto out_err;
			}
			cur = &rr->r[rr->n++];
			cur->line = p.line;
			cur->action = ACT_REPLACE;
			indent += 2;
			for (c++; *c == ' '; c++)
				;
			if (!*c || *c == '#')
				continue;
		} else if (!cur) {
			rc = fail(&p, p.line, "expected a rule starting with '- '");
			goto out_err;
		} else if (indent <= dash_indent) {
			rc = fail(&p, p.line, "key outside a rule (indent it under the rule's '-')");
			goto out_err;
		}
		colon = strchr(c, ':');
		if (!colon || (colon[1] && colon[1] != ' ') || (size_t)(colon - c) >= sizeof(key)) {
			rc = fail(&p, p.line, "expected 'key: value'");
			goto out_err;
		}
		memcpy(key, c, (size_t)(colon - c));
		key[colon - c] = 0;
		for (c = colon + 1; *c == ' '; c++)
			;
		rc = set_key(&p, cur, key, c);
		if (rc)
			goto out_err;
	}
	if (cur) {
		rc = finish_rule(&p, cur);
		if (rc)
			goto out_err;
	}
	return rr;
out_err:
	if (rc == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	relabel__free(rr);
	errno = -rc;
	return NULL;
}

struct relabel_rules *relabel__load(const char *path, char *err, size_t errlen)
{
	struct relabel_rules *rr = NULL;
	char *text = NULL, sub[512];
	FILE *f = fopen(path, "re");
	size_t n;
	int saved;

	if (!f) {
		saved = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(saved));
		errno = saved;
		return NULL;
	}
	text = malloc(MAX_CONFIG_BYTES + 1);
	if (!text) {
		saved = ENOMEM;
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	n = fread(text, 1, MAX_CONFIG_BYTES + 1, f);
	if (ferror(f) || n > MAX_CONFIG_BYTES) {
		saved = ferror(f) ? EIO : EFBIG;
		snprintf(err, errlen, "%s: %s", path,
			 saved == EFBIG ? "larger than 1 MiB" : "read error");
		goto out;
	}
	text[n] = 0;
	if (strlen(text) != n) {
		saved = EINVAL;
		snprintf(err, errlen, "%s: contains a NUL byte", path);
		goto out;
	}
	rr = relabel__parse(text, sub, sizeof(sub));
	saved = errno;
	if (!rr)
		snprintf(err, errlen, "%s: %s", path, sub);
out:
	free(text);
	fclose(f);
	errno = saved;
	return rr;
}

/* ---- applying ---------------------------------------------------------------------------------- */

/*
 * Expands $N / ${N} / $$ in tmpl with the groups of m (user group N is m[N + 1]) over subject,
 * like Go's regexp.Expand: a reference to a name (not all digits) expands to nothing, as it
 * does in Prometheus for a regex without that named group. Output is truncated at outlen.
 */
static void expand(const char *tmpl, const char *subject, const regmatch_t *m, size_t ngroups,
		   char *out, size_t outlen)
{
	size_t o = 0;

#define PUT(ch)                                                                                    \
	do {                                                                                       \
		if (o + 1 < outlen)                                                                \
			out[o++] = (ch);                                                           \
	} while (0)
	for (const char *t = tmpl; *t; t++) {
		const char *name, *end;
		bool digits = true;
		size_t nlen;

		if (*t != '$') {
			PUT(*t);
			continue;
		}
		if (t[1] == '$') {
			PUT('$');
			t++;
			continue;
		}
		if (t[1] == '{') {
			name = t + 2;
			end = strchr(name, '}');
			if (!end) {
				PUT('$');
				continue;
			}
			t = end;
		} else {
			name = t + 1;
			for (end = name; isalnum((unsigned char)*end) || *end == '_'; end++)
				;
			if (end == name) {
				PUT('$');
				continue;
			}
			t = end - 1;
		}
		nlen = (size_t)(end - name);
		for (size_t i = 0; i < nlen; i++)
			if (!isdigit((unsigned char)name[i]))
				digits = false;
		if (digits && nlen && nlen < 4) {
			size_t g = (size_t)atoi(name) + 1;

			if (g < ngroups && m[g].rm_so >= 0)
				for (regoff_t i = m[g].rm_so; i < m[g].rm_eo; i++)
					PUT(subject[i]);
		}
	}
	out[o < outlen ? o : outlen - 1] = 0;
#undef PUT
}

static void join_sources(const struct rule *r, const struct lset *ls, char *out, size_t outlen)
{
	size_t o = 0;

	out[0] = 0;
	for (size_t i = 0; i < r->nsources; i++) {
		const char *v = lset_get(ls, r->sources[i]);

		if (i)
			o += (size_t)snprintf(out + o, o < outlen ? outlen - o : 0, "%s", r->separator);
		if (v && o < outlen)
			o += (size_t)snprintf(out + o, outlen - o, "%s", v);
		if (o >= outlen)
			return;
	}
}

int relabel__apply(const struct relabel_rules *rr, struct lset *ls)
{
	regmatch_t m[MAX_GROUPS];
	char *val = NULL, *tgt = NULL, *rep = NULL;
	int err = 1;

	if (!rr || !rr->n)
		return 1;
	val = malloc(MAX_VALUE);
	tgt = malloc(MAX_VALUE);
	rep = malloc(MAX_VALUE);
	if (!val || !tgt || !rep) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < rr->n; i++) {
		const struct rule *r = &rr->r[i];
		bool match;

		switch (r->action) {
		case ACT_REPLACE:
		case ACT_KEEP:
		case ACT_DROP:
		case ACT_LOWERCASE:
		case ACT_UPPERCASE:
			join_sources(r, ls, val, MAX_VALUE);
			match = !regexec(&r->re, val, MAX_GROUPS, m, 0);
			if (r->action == ACT_KEEP && !match) {
				err = 0;
				goto out;
			}
			if (r->action == ACT_DROP && match) {
				err = 0;
				goto out;
			}
			if (r->action == ACT_REPLACE && match) {
				expand(r->target, val, m, MAX_GROUPS, tgt, MAX_VALUE);
				expand(r->replacement, val, m, MAX_GROUPS, rep, MAX_VALUE);
				if (!valid_label_name(tgt))
					break;
				if (lset_set(ls, tgt, rep) == -ENOMEM) {
					err = -ENOMEM;
					goto out;
				}
			}
			if (r->action == ACT_LOWERCASE || r->action == ACT_UPPERCASE) {
				for (char *c = val; *c; c++)
					*c = (char)(r->action == ACT_LOWERCASE ? tolower((unsigned char)*c)
									       : toupper((unsigned char)*c));
				if (lset_set(ls, r->target, val) == -ENOMEM) {
					err = -ENOMEM;
					goto out;
				}
			}
			break;
		case ACT_LABELMAP: {
			size_t n = ls->n;

			/* Only the labels present before this rule are mapped. */
			for (size_t j = 0; j < n; j++) {
				const char *name = ls->l[j].name;

				if (regexec(&r->re, name, MAX_GROUPS, m, 0))
					continue;
				expand(r->replacement, name, m, MAX_GROUPS, tgt, MAX_VALUE);
				snprintf(rep, MAX_VALUE, "%s", ls->l[j].value);
				if (valid_label_name(tgt) && lset_set(ls, tgt, rep) == -ENOMEM) {
					err = -ENOMEM;
					goto out;
				}
			}
			break;
		}
		case ACT_LABELDROP:
		case ACT_LABELKEEP:
			for (size_t j = 0; j < ls->n;) {
				bool hit = !regexec(&r->re, ls->l[j].name, 0, NULL, 0);

				if (hit == (r->action == ACT_LABELDROP)) {
					snprintf(tgt, MAX_VALUE, "%s", ls->l[j].name);
					lset_del(ls, tgt);
				} else {
					j++;
				}
			}
			break;
		}
	}
out:
	free(val);
	free(tgt);
	free(rep);
	return err;
}
