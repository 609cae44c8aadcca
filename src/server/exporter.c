/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server's computed Prometheus counters (exporter.h): per-workload GPU seconds and idle
 * dollars with bounded cardinality, and profile queries read from a YAML file (libyaml).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "common/batch.h"
#include "common/hmap.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"
#include "server/exporter.h"
#include "server/query.h"
#include "server/selector.h"

#define MAX_QUERIES	256
#define FN_RE_MAX	1024		/* bytes of a function regex */
#define FN_NAME_MAX	255		/* bytes of a frame name the regex sees (frame_name's buffer) */
#define MAX_WINDOW_NS	(3600 * NSEC_PER_SEC)	/* one scrape counts at most an hour */
#define EVICT_NS	(3600 * NSEC_PER_SEC)	/* a workload without GPU time this long frees its slot */

struct pquery {
	char *name;
	char *sel_text;
	struct selector *sel;
	enum sample_kind kind;
	int gpu_idle;			/* -1: any time */
	struct selector *fn;		/* function regex, whole name: selector.c's engine and limits */
	bool fn_failed;			/* a regex hit its match limits: the series is left out */
	struct u64map match;		/* stack id -> 1 matches, 2 does not (kept across cuts) */
	double total;			/* samples, or ns, over [start, wm_ns) */
	uint64_t wm_ns;			/* its own window end: a cut query counts its window later */
	uint64_t cuts;			/* evaluations cut at the scrape's time budget */
};

struct wl {				/* a workload with series of its own */
	char *ns, *pod;
	double secs[3];			/* busy, idle, unknown */
	double idle_dollars;
	uint64_t last_ns;		/* window end of its last GPU time */
};

struct seen {				/* every recent workload's idle cost, for the ranking */
	char *key;			/* ns\x01pod */
	double idle_dollars, idle_s;
	uint64_t last_ns;
	bool slotted;
};

struct exporter {
	struct store *st;
	struct efficiency *e;
	struct exporter_cfg cfg;
	pthread_mutex_t cmu;		/* counting (one scrape at a time): q[]'s selectors, match */
	pthread_mutex_t mu;		/* what a scrape prints: totals, workloads, marks */
	size_t next_q;			/* the query a scrape evaluates first (the last one cut) */
	struct pquery *q;
	size_t nq;
	struct wl *wl;
	size_t nwl;
	struct seen *seen;
	size_t nseen;
	struct wl other;
	double unheld_secs, unheld_dollars;
	uint64_t start_ns, wm_ns;
	uint64_t windows, window_errors, cpu_ns;
};

/* ---- the queries file --------------------------------------------------------------------- */

static const char *scalar(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static bool valid_name(const char *s)
{
	if (!*s || !(((*s | 32) >= 'a' && (*s | 32) <= 'z') || *s == '_'))
		return false;
	for (; *s; s++)
		if (!(((*s | 32) >= 'a' && (*s | 32) <= 'z') || (*s >= '0' && *s <= '9') ||
		      *s == '_'))
			return false;
	return true;
}

static void pquery_done(struct pquery *q)
{
	free(q->name);
	free(q->sel_text);
	selector_free(q->sel);
	selector_free(q->fn);
	u64map_done(&q->match);
}

#define BAD(node, ...)                                                                            \
	do {                                                                                       \
		int _n = snprintf(err, errlen, "%s:%zu: ", file, (size_t)(node)->start_mark.line + 1); \
		snprintf(err + _n, errlen > (size_t)_n ? errlen - (size_t)_n : 0, __VA_ARGS__);    \
		return -EINVAL;                                                                    \
	} while (0)

/*
 * "{fn=~\"V\"}" for the function regex V, so that it compiles and matches as a selector's
 * regex does (PCRE2, RE2 syntax, anchored, match limits); NULL on ENOMEM.
 */
static char *fn_selector(const char *v)
{
	size_t n = strlen(v);
	char *out = malloc(2 * n + 16), *o = out;

	if (!out)
		return NULL;
	o += sprintf(o, "{fn=~\"");
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			*o++ = '\\';
		if (*v == '\n' || *v == '\t') {
			*o++ = '\\';
			*o++ = *v == '\n' ? 'n' : 't';
			continue;
		}
		*o++ = *v;
	}
	strcpy(o, "\"}");
	return out;
}

/*
 * Whether fn hits its match limits on probe names as long as a frame name gets: a pattern
 * that would fail every scrape is refused at start instead.
 */
static bool fn_too_costly(struct selector *fn)
{
	static const char fill[] = { 'a', '_', ':', '0' };
	char name[FN_NAME_MAX + 1];
	bool bad = false;

	for (size_t k = 0; k < sizeof(fill) && !bad; k++) {
		const char *pairs[2] = { "fn", name };

		memset(name, fill[k], FN_NAME_MAX);
		name[FN_NAME_MAX] = '\0';
		name[FN_NAME_MAX - 1] = '!';	/* a mismatch at the end makes a matcher backtrack */
		selector_match(fn, pairs, 1);
		bad = selector_failed(fn) != 0;
	}
	return bad;
}

/* One query mapping into q (zeroed); -EINVAL with "FILE:LINE: why". */
static int parse_query(yaml_document_t *d, yaml_node_t *m, const char *file, struct pquery *q,
		       char *err, size_t errlen)
{
	char why[256];

	q->gpu_idle = -1;
	q->kind = SAMPLE_CPU;
	if (m->type != YAML_MAPPING_NODE)
		BAD(m, "a query is a mapping (name, selector, kind, function, gpu_idle)");
	for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
		yaml_node_t *kn = yaml_document_get_node(d, p->key);
		yaml_node_t *vn = yaml_document_get_node(d, p->value);
		const char *k = scalar(kn), *v = scalar(vn);

		if (!k)
			BAD(kn, "a key must be a plain string");
		if (!v)
			BAD(vn, "'%s' must be a string", k);
		if (!strcmp(k, "name")) {
			if (!valid_name(v))
				BAD(vn, "name '%s' is not [A-Za-z_][A-Za-z0-9_]*", v);
			free(q->name);
			q->name = strdup(v);
		} else if (!strcmp(k, "selector")) {
			selector_free(q->sel);
			q->sel = selector_parse(v, why, sizeof(why));
			if (!q->sel)
				BAD(vn, "selector '%s': %s", v, why);
			free(q->sel_text);
			q->sel_text = strdup(v);
		} else if (!strcmp(k, "kind")) {
			int kd = sample_kind_parse(v);

			if (kd < 0)
				BAD(vn, "kind '%s' is not cpu, offcpu_ns, gpu_kernel_ns or cuda_sync_ns",
				    v);
			q->kind = (enum sample_kind)kd;
		} else if (!strcmp(k, "function")) {
			char *sel;

			if (strlen(v) > FN_RE_MAX)
				BAD(vn, "function regex '%.60s...' is longer than %d bytes", v,
				    FN_RE_MAX);
			sel = fn_selector(v);
			if (!sel)
				return -ENOMEM;
			selector_free(q->fn);
			q->fn = selector_parse(sel, why, sizeof(why));
			free(sel);
			if (!q->fn)
				BAD(vn, "function regex '%.60s%s': %s", v, strlen(v) > 60 ? "..." : "",
				    why);
			if (fn_too_costly(q->fn))
				BAD(vn, "function regex '%.60s%s' exceeds the regex match limits on a "
				    "%d-byte function name", v, strlen(v) > 60 ? "..." : "",
				    FN_NAME_MAX);
		} else if (!strcmp(k, "gpu_idle")) {
			char *end;
			long g = strtol(v, &end, 10);

			if (!*v || *end || g < 0 || g > 1023)
				BAD(vn, "gpu_idle '%s' is not a GPU index (0..1023)", v);
			q->gpu_idle = (int)g;
		} else {
			BAD(kn, "unknown key '%s' (name, selector, kind, function, gpu_idle)", k);
		}
	}
	if (!q->name)
		BAD(m, "query without a name");
	return 0;
}

static int load_queries(struct exporter *x, const char *file, char *err, size_t errlen)
{
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_node_t *root, *list;
	FILE *f = fopen(file, "rb");
	int rc = 0;

	if (!f) {
		snprintf(err, errlen, "%s: %s", file, strerror(errno));
		return -errno;
	}
	if (!yaml_parser_initialize(&parser)) {
		fclose(f);
		snprintf(err, errlen, "%s: out of memory", file);
		return -ENOMEM;
	}
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc)) {
		snprintf(err, errlen, "%s:%zu: %s%s%s", file, (size_t)parser.problem_mark.line + 1,
			 parser.problem ? parser.problem : "not YAML",
			 parser.context ? " " : "", parser.context ? parser.context : "");
		yaml_parser_delete(&parser);
		fclose(f);
		return -EINVAL;
	}
	root = yaml_document_get_root_node(&doc);
	list = root;
	if (root && root->type == YAML_MAPPING_NODE) {
		list = NULL;
		for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
		     p < root->data.mapping.pairs.top; p++) {
			yaml_node_t *kn = yaml_document_get_node(&doc, p->key);

			if (scalar(kn) && !strcmp(scalar(kn), "queries")) {
				list = yaml_document_get_node(&doc, p->value);
			} else {
				snprintf(err, errlen, "%s:%zu: unknown key '%s' (the file holds"
					 " 'queries:', a list)", file, (size_t)kn->start_mark.line + 1,
					 scalar(kn) ? scalar(kn) : "?");
				rc = -EINVAL;
				goto out;
			}
		}
	}
	if (!list || list->type != YAML_SEQUENCE_NODE) {
		snprintf(err, errlen, "%s:%zu: expected 'queries:' with a list of queries", file,
			 root ? (size_t)root->start_mark.line + 1 : 1);
		rc = -EINVAL;
		goto out;
	}
	for (yaml_node_item_t *it = list->data.sequence.items.start;
	     it < list->data.sequence.items.top && !rc; it++) {
		yaml_node_t *m = yaml_document_get_node(&doc, *it);
		struct pquery *n;

		if (x->nq == MAX_QUERIES) {
			snprintf(err, errlen, "%s:%zu: more than %d queries", file,
				 (size_t)m->start_mark.line + 1, MAX_QUERIES);
			rc = -EINVAL;
			break;
		}
		n = realloc(x->q, (x->nq + 1) * sizeof(*n));
		if (!n) {
			rc = -ENOMEM;
			break;
		}
		x->q = n;
		memset(&x->q[x->nq], 0, sizeof(*x->q));
		rc = parse_query(&doc, m, file, &x->q[x->nq], err, errlen);
		for (size_t i = 0; !rc && i < x->nq; i++) {
			if (!strcmp(x->q[i].name, x->q[x->nq].name)) {
				snprintf(err, errlen, "%s:%zu: name '%s' is used twice", file,
					 (size_t)m->start_mark.line + 1, x->q[i].name);
				rc = -EINVAL;
			}
		}
		x->nq++;	/* counted even when bad: exporter_free() releases it */
	}
out:
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	fclose(f);
	return rc;
}

/* ---- windows ------------------------------------------------------------------------------ */

struct wctx {
	struct exporter *x;
	struct eff_row *rows;
	char **keys;			/* ns\x01pod, owned */
	size_t n;
	double unheld_secs, unheld_dollars;
};

static int window_row(void *ctx, const struct eff_row *r)
{
	struct wctx *w = ctx;
	struct eff_row *n;
	char **k;

	if (r->unheld) {
		w->unheld_secs += r->t.held / 1e9;
		w->unheld_dollars += r->unheld_dollars;
		return 0;
	}
	n = realloc(w->rows, (w->n + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	w->rows = n;
	k = realloc(w->keys, (w->n + 1) * sizeof(*k));
	if (!k)
		return -ENOMEM;
	w->keys = k;
	if (asprintf(&w->keys[w->n], "%s\x01%s", *r->namespace_ ? r->namespace_ : "(none)",
		     *r->pod ? r->pod : "(none)") < 0)
		return -ENOMEM;
	w->rows[w->n++] = *r;
	return 0;
}

static double idle_s(const struct eff_tally *t)
{
	return (t->idle[0] + t->idle[1] + t->idle[2]) / 1e9;
}

static double busy_s(const struct eff_tally *t)
{
	return (t->busy[0] + t->busy[1] + t->busy[2]) / 1e9;
}

static void wl_add(struct wl *w, const struct eff_row *r, uint64_t end)
{
	w->secs[0] += busy_s(&r->t);
	w->secs[1] += idle_s(&r->t);
	w->secs[2] += r->t.unknown / 1e9;
	w->idle_dollars += r->idle_dollars;
	if (r->t.held > 0)
		w->last_ns = end;
}

struct match_ctx {
	struct pquery *q;
	const struct u64map *agg;
	uint64_t deadline_ns;		/* CLOCK_MONOTONIC */
	double sum;
};

static int match_stack(void *ctx, uint64_t id, const struct frame *f, size_t nf)
{
	struct match_ctx *m = ctx;
	uint64_t *v = u64map_find(m->agg, id), *known;
	bool hit = false;
	char tmp[FN_NAME_MAX + 1];

	if (mono_ns() > m->deadline_ns)
		return -ETIMEDOUT;
	for (size_t i = 0; i < nf && !hit; i++) {
		const char *pairs[2] = { "fn", frame_name(&f[i], tmp, sizeof(tmp)) };

		hit = selector_match(m->q->fn, pairs, 1);
	}
	if (selector_failed(m->q->fn))
		return selector_failed(m->q->fn);
	known = u64map_upsert(&m->q->match, id, hit ? 1 : 2, NULL);
	if (!known)
		return -ENOMEM;
	if (hit && v)
		m->sum += (double)*v;
	return 0;
}

/* store_query.emit: sums per stack into agg, and stops the scan once the deadline passed. */
struct agg_emit {
	struct u64map *agg;
	uint64_t deadline_ns;
	unsigned n;
};

static int agg_emit(void *ctx, uint32_t group, uint64_t key, uint64_t value)
{
	struct agg_emit *a = ctx;
	uint64_t *v;

	(void)group;
	if (!(++a->n & 1023) && mono_ns() > a->deadline_ns)
		return -ETIMEDOUT;
	v = u64map_upsert(a->agg, key, 0, NULL);
	if (!v)
		return -ENOMEM;
	*v += value;
	return 0;
}

/*
 * Value of query q over [from, to) into *ret (cmu held). 0; -ETIMEDOUT when deadline_ns
 * (CLOCK_MONOTONIC) passed first: cut, the stacks classified so far are kept for the next try;
 * -E2BIG when a regex of q hit its match limits on some value; -errno.
 */
static int eval_query(struct exporter *x, struct pquery *q, uint64_t from, uint64_t to,
		      uint64_t deadline_ns, double *ret)
{
	struct u64map agg = { 0 };
	struct agg_emit ae = { &agg, deadline_ns, 0 };
	struct store_query sq = { from, to, q->sel, q->kind, q->gpu_idle };
	struct match_ctx m = { q, &agg, deadline_ns, 0 };
	uint64_t *ids = NULL;
	size_t nids = 0;
	int err;

	selector_reset(q->sel);
	selector_set_deadline(q->sel, deadline_ns);
	sq.emit = agg_emit;
	sq.emit_ctx = &ae;
	err = x->st->ops->aggregate(x->st, &sq, &agg);
	if (selector_failed(q->sel))
		err = selector_failed(q->sel);
	if (err)
		goto out;
	if (!q->fn) {
		for (size_t i = 0; i < agg.cap; i++)
			if (agg.keys[i])
				m.sum += (double)agg.vals[i];
		if (agg.has_zero)
			m.sum += (double)agg.zero_val;
		goto done;
	}
	ids = malloc((agg.len + 1) * sizeof(*ids));
	if (!ids) {
		err = -ENOMEM;
		goto out;
	}
	/* Stacks already classified are summed here; the others are read and classified. */
	for (size_t i = 0; i < agg.cap; i++) {
		uint64_t *k;

		if (!agg.keys[i])
			continue;
		k = u64map_find(&q->match, agg.keys[i]);
		if (!k)
			ids[nids++] = agg.keys[i];
		else if (*k == 1)
			m.sum += (double)agg.vals[i];
	}
	selector_reset(q->fn);
	selector_set_deadline(q->fn, deadline_ns);
	if (nids)
		err = x->st->ops->stacks(x->st, ids, nids, match_stack, &m);
	if (err && selector_failed(q->fn))
		err = selector_failed(q->fn);
	if (err)
		goto out;
done:
	*ret = m.sum;
out:
	free(ids);
	u64map_done(&agg);
	return err;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* Ranking of workloads: idle dollars, then idle seconds, then name (ascending). */
static int cmp_seen(const struct seen *x, const struct seen *y)
{
	if (x->idle_dollars != y->idle_dollars)
		return x->idle_dollars < y->idle_dollars ? 1 : -1;
	if (x->idle_s != y->idle_s)
		return x->idle_s < y->idle_s ? 1 : -1;
	return strcmp(x->key, y->key);
}

static int cmp_seen_q(const void *a, const void *b)
{
	return cmp_seen(a, b);
}

static bool wl_is(const struct wl *w, const char *key)
{
	const char *sep = strchr(key, '\x01');

	return !strncmp(w->ns, key, (size_t)(sep - key)) && !w->ns[sep - key] &&
	       !strcmp(w->pod, sep + 1);
}

/* Moves a slot's counts into "other" (which stays monotonic) and frees the slot. */
static void wl_evict(struct exporter *x, size_t i)
{
	for (int k = 0; k < 3; k++)
		x->other.secs[k] += x->wl[i].secs[k];
	x->other.idle_dollars += x->wl[i].idle_dollars;
	free(x->wl[i].ns);
	free(x->wl[i].pod);
	x->wl[i] = x->wl[--x->nwl];
}

static struct seen *seen_get(struct exporter *x, const char *key, uint64_t end)
{
	size_t cap = 8 * x->cfg.top + 64;

	for (size_t i = 0; i < x->nseen; i++)
		if (!strcmp(x->seen[i].key, key))
			return &x->seen[i];
	if (x->nseen == cap) {
		/* Full: forget the lowest-ranked workload that has no series. */
		size_t worst = SIZE_MAX;

		for (size_t i = 0; i < x->nseen; i++)
			if (!x->seen[i].slotted &&
			    (worst == SIZE_MAX || cmp_seen(&x->seen[i], &x->seen[worst]) > 0))
				worst = i;
		if (worst == SIZE_MAX)
			return NULL;
		free(x->seen[worst].key);
		x->seen[worst] = x->seen[--x->nseen];
	} else {
		struct seen *n = realloc(x->seen, cap * sizeof(*n));

		if (!n)
			return NULL;
		x->seen = n;
	}
	x->seen[x->nseen] = (struct seen){ .key = strdup(key), .last_ns = end };
	if (!x->seen[x->nseen].key)
		return NULL;
	return &x->seen[x->nseen++];
}

/*
 * Gives the --export-top series to the workloads with the highest idle cost so far (among
 * those with GPU time in the last hour). A workload that falls out of the top hands its counts
 * to "other"; one that enters starts from zero (its earlier time is in "other" already).
 */
static int rerank(struct exporter *x, uint64_t end)
{
	size_t want = 0;

	for (size_t i = 0; i < x->nwl;)
		if (end - x->wl[i].last_ns > EVICT_NS)
			wl_evict(x, i);
		else
			i++;
	for (size_t i = 0; i < x->nseen;) {
		if (end - x->seen[i].last_ns > EVICT_NS) {
			free(x->seen[i].key);
			x->seen[i] = x->seen[--x->nseen];
		} else {
			i++;
		}
	}
	qsort(x->seen, x->nseen, sizeof(*x->seen), cmp_seen_q);
	want = x->nseen < x->cfg.top ? x->nseen : x->cfg.top;
	for (size_t i = 0; i < x->nseen; i++)
		x->seen[i].slotted = false;
	/* Evict slots whose workload is no longer in the top. */
	for (size_t k = 0; k < x->nwl;) {
		bool keep = false;

		for (size_t i = 0; i < want && !keep; i++)
			keep = wl_is(&x->wl[k], x->seen[i].key);
		if (keep)
			k++;
		else
			wl_evict(x, k);
	}
	for (size_t i = 0; i < want; i++) {
		const char *key = x->seen[i].key, *sep = strchr(key, '\x01');
		bool has = false;
		struct wl *n;

		x->seen[i].slotted = true;
		for (size_t k = 0; k < x->nwl && !has; k++)
			has = wl_is(&x->wl[k], key);
		if (has)
			continue;
		n = realloc(x->wl, (x->nwl + 1) * sizeof(*n));
		if (!n)
			return -ENOMEM;
		x->wl = n;
		n = &x->wl[x->nwl];
		*n = (struct wl){ strndup(key, (size_t)(sep - key)), strdup(sep + 1) };
		n->last_ns = end;
		if (!n->ns || !n->pod) {
			free(n->ns);
			free(n->pod);
			return -ENOMEM;
		}
		x->nwl++;
	}
	return 0;
}

/* Folds a window's workload rows into the ranking and the series (mu held). */
static int add_workloads(struct exporter *x, struct wctx *w, uint64_t end)
{
	int err = 0;

	for (size_t i = 0; i < w->n && !err; i++) {
		struct seen *sn = seen_get(x, w->keys[i], end);

		if (!sn) {
			err = -ENOMEM;
			break;
		}
		sn->idle_dollars += w->rows[i].idle_dollars;
		sn->idle_s += idle_s(&w->rows[i].t);
		if (w->rows[i].t.held > 0)
			sn->last_ns = end;
	}
	if (!err)
		err = rerank(x, end);
	for (size_t i = 0; i < w->n && !err; i++) {
		struct wl *slot = NULL;

		for (size_t k = 0; k < x->nwl && !slot; k++)
			if (wl_is(&x->wl[k], w->keys[i]))
				slot = &x->wl[k];
		wl_add(slot ? slot : &x->other, &w->rows[i], end);
	}
	if (!err) {
		x->unheld_secs += w->unheld_secs;
		x->unheld_dollars += w->unheld_dollars;
	}
	return err;
}

/* The workloads' GPU time over [wm, end) (cmu held; mu taken to publish it). */
static void count_workloads(struct exporter *x, uint64_t end)
{
	struct wctx w = { x };
	int err;

	if (end > x->wm_ns + MAX_WINDOW_NS)
		end = x->wm_ns + MAX_WINDOW_NS;
	if (end <= x->wm_ns)
		return;
	err = efficiency_window(x->e, x->wm_ns, end, window_row, &w);
	pthread_mutex_lock(&x->mu);
	if (!err)
		err = add_workloads(x, &w, end);
	if (err) {
		x->window_errors++;
		log_warn("exporter: window [%llu, %llu): %s, counted at the next scrape",
			 (unsigned long long)x->wm_ns, (unsigned long long)end, strerror(-err));
	} else {
		x->wm_ns = end;
		x->windows++;
	}
	pthread_mutex_unlock(&x->mu);
	for (size_t i = 0; i < w.n; i++)
		free(w.keys[i]);
	free(w.keys);
	free(w.rows);
}

/*
 * Each query over its own window [q.wm, end), within the scrape's time budget (cmu held; mu
 * taken to publish each value). A query still running at the budget's end is cut, and so is
 * one not reached by then: its window stays open and is counted at a later scrape, starting
 * with it (the stacks it classified are kept, so a retry goes further), and the cut is counted.
 * The regexes run here, on the scraping worker, never on an event loop.
 */
static void count_queries(struct exporter *x, uint64_t end, uint64_t deadline_ns)
{
	bool cut = false;

	for (size_t k = 0; k < x->nq; k++) {
		size_t i = (x->next_q + k) % x->nq;
		struct pquery *q = &x->q[i];
		uint64_t qend = end < q->wm_ns + MAX_WINDOW_NS ? end : q->wm_ns + MAX_WINDOW_NS;
		double v = 0;
		int err;

		if (q->fn_failed || qend <= q->wm_ns)
			continue;
		err = mono_ns() >= deadline_ns ? -ETIMEDOUT :
		      eval_query(x, q, q->wm_ns, qend, deadline_ns, &v);
		pthread_mutex_lock(&x->mu);
		if (!err) {
			q->total += v;
			q->wm_ns = qend;
		} else if (err == -ETIMEDOUT) {
			q->cuts++;
			if (!cut)
				x->next_q = i;
			cut = true;
		} else if (err == -E2BIG) {
			/* A value short of the truth is worse than none: the query stops. */
			log_warn("export query %s: a regex hit its match limits; its series is left "
				 "out", q->name);
			q->fn_failed = true;
		} else {
			x->window_errors++;
			log_warn("export query %s: window [%llu, %llu): %s, counted at the next "
				 "scrape", q->name, (unsigned long long)q->wm_ns,
				 (unsigned long long)qend, strerror(-err));
		}
		pthread_mutex_unlock(&x->mu);
	}
}

static void wl_print(FILE *out, const struct wl *w, const char *ns, const char *pod)
{
	static const char *const states[3] = { "busy", "idle", "unknown" };

	for (int s = 0; s < 3; s++)
		prom_sample(out, "gpuscope_server_gpu_seconds_total",
			    (struct prom_label[]){ { "state", states[s] }, { "namespace", ns },
						   { "pod", pod } },
			    3, w->secs[s]);
}

int exporter_metrics(struct exporter *x, FILE *out)
{
	uint64_t now = wall_ns(), deadline = mono_ns() + x->cfg.budget_ns, end, t0;

	/* One scrape counts at a time; another one meanwhile prints what is counted so far
	 * instead of waiting. */
	if (!pthread_mutex_trylock(&x->cmu)) {
		t0 = thread_cpu_ns();
		end = now > x->cfg.settle_ns ?
			      (now - x->cfg.settle_ns) / NSEC_PER_MSEC * NSEC_PER_MSEC : 0;
		count_workloads(x, end);
		count_queries(x, end, deadline);
		pthread_mutex_lock(&x->mu);
		x->cpu_ns += thread_cpu_ns() - t0;
		pthread_mutex_unlock(&x->mu);
		pthread_mutex_unlock(&x->cmu);
	}
	pthread_mutex_lock(&x->mu);
	prom_family(out, "gpuscope_server_gpu_seconds_total", "counter",
		    "GPU time by state and holder workload (top workloads by idle cost, the rest as "
		    "namespace=\"other\").");
	for (size_t i = 0; i < x->nwl; i++)
		wl_print(out, &x->wl[i], x->wl[i].ns, x->wl[i].pod);
	wl_print(out, &x->other, "other", "other");
	prom_sample(out, "gpuscope_server_gpu_seconds_total",
		    (struct prom_label[]){ { "state", "unheld" }, { "namespace", "" }, { "pod", "" } },
		    3, x->unheld_secs);
	prom_family(out, "gpuscope_server_gpu_idle_cost_dollars_total", "counter",
		    "Dollars of GPU time held but idle (--gpu-hour-price).");
	for (size_t i = 0; i < x->nwl; i++)
		prom_sample(out, "gpuscope_server_gpu_idle_cost_dollars_total",
			    (struct prom_label[]){ { "namespace", x->wl[i].ns },
						   { "pod", x->wl[i].pod } },
			    2, x->wl[i].idle_dollars);
	prom_sample(out, "gpuscope_server_gpu_idle_cost_dollars_total",
		    (struct prom_label[]){ { "namespace", "other" }, { "pod", "other" } }, 2,
		    x->other.idle_dollars);
	prom_family(out, "gpuscope_server_gpu_unheld_cost_dollars_total", "counter",
		    "Dollars of GPU time nobody held.");
	prom_sample(out, "gpuscope_server_gpu_unheld_cost_dollars_total", NULL, 0, x->unheld_dollars);
	if (x->nq)
		prom_family(out, "gpuscope_profile_value_total", "counter",
			    "Profile queries of --export-queries (cpu: samples; other kinds: seconds).");
	for (size_t i = 0; i < x->nq; i++) {
		bool cpu = x->q[i].kind == SAMPLE_CPU;

		if (x->q[i].fn_failed)
			continue;

		prom_sample(out, "gpuscope_profile_value_total",
			    (struct prom_label[]){ { "query", x->q[i].name },
						   { "unit", cpu ? "samples" : "seconds" } },
			    2, cpu ? x->q[i].total : x->q[i].total / 1e9);
	}
	if (x->nq) {
		prom_family(out, "gpuscope_server_export_query_cuts_total", "counter",
			    "Evaluations of a profile query cut at the scrape's time budget "
			    "(--export-timeout): its window is counted at a later scrape.");
		for (size_t i = 0; i < x->nq; i++)
			prom_sample1_u64(out, "gpuscope_server_export_query_cuts_total", "query",
					 x->q[i].name, x->q[i].cuts);
		prom_family(out, "gpuscope_server_export_query_window_end_seconds", "gauge",
			    "Data time up to which each profile query is counted.");
		for (size_t i = 0; i < x->nq; i++)
			prom_sample1(out, "gpuscope_server_export_query_window_end_seconds",
				     "query", x->q[i].name, x->q[i].wm_ns / 1e9);
	}
	prom_family(out, "gpuscope_server_export_window_seconds", "gauge",
		    "Data time the counters cover: start (server start) and end (last window).");
	prom_sample1(out, "gpuscope_server_export_window_seconds", "edge", "start", x->start_ns / 1e9);
	prom_sample1(out, "gpuscope_server_export_window_seconds", "edge", "end", x->wm_ns / 1e9);
	prom_family(out, "gpuscope_server_export_windows_total", "counter",
		    "Windows counted, and those that failed (retried at the next scrape).");
	prom_sample1_u64(out, "gpuscope_server_export_windows_total", "result", "ok", x->windows);
	prom_sample1_u64(out, "gpuscope_server_export_windows_total", "result", "error", x->window_errors);
	prom_family(out, "gpuscope_server_export_cpu_seconds_total", "counter",
		    "CPU time spent counting windows.");
	prom_sample(out, "gpuscope_server_export_cpu_seconds_total", NULL, 0, x->cpu_ns / 1e9);
	prom_gauge(out, "gpuscope_server_export_workloads",
		   "Workloads with series of their own (at most --export-top).", x->nwl);
	pthread_mutex_unlock(&x->mu);
	return 0;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

struct exporter *exporter_new(struct store *st, struct efficiency *e,
			      const struct exporter_cfg *cfg, char *err, size_t errlen)
{
	struct exporter *x = calloc(1, sizeof(*x));

	if (!x) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	x->st = st;
	x->e = e;
	x->cfg = *cfg;
	x->other.ns = x->other.pod = NULL;
	if (!x->cfg.budget_ns)
		x->cfg.budget_ns = EXPORT_TIMEOUT_DEFAULT_NS;
	x->start_ns = x->wm_ns = wall_ns() / NSEC_PER_MSEC * NSEC_PER_MSEC;
	pthread_mutex_init(&x->cmu, NULL);
	pthread_mutex_init(&x->mu, NULL);
	if (cfg->queries_file && load_queries(x, cfg->queries_file, err, errlen)) {
		exporter_free(x);
		return NULL;
	}
	for (size_t i = 0; i < x->nq; i++)
		x->q[i].wm_ns = x->start_ns;
	return x;
}

void exporter_free(struct exporter *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->nq; i++)
		pquery_done(&x->q[i]);
	free(x->q);
	for (size_t i = 0; i < x->nwl; i++) {
		free(x->wl[i].ns);
		free(x->wl[i].pod);
	}
	free(x->wl);
	for (size_t i = 0; i < x->nseen; i++)
		free(x->seen[i].key);
	free(x->seen);
	pthread_mutex_destroy(&x->mu);
	pthread_mutex_destroy(&x->cmu);
	free(x);
}
