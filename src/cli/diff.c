/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `gpuscope diff`: what changed between two ranges or two selectors (A, the baseline, and B),
 * from /api/v1/diff: a table of the functions whose share of the samples changed most, folded
 * stacks with both counts (flamegraph.pl's difffolded format), or the two sides as pprof files
 * for `go tool pprof -diff_base`.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/client.h"
#include "cli/commands.h"
#include "common/hmap.h"
#include "common/util.h"

static const char usage_text[] =
	"usage: gpuscope diff --server URL [--since 1h | --from T [--to T]] [--selector S]\n"
	"                     [--from2 T [--to2 T]] [--selector2 S]\n"
	"                     [--kind cpu|offcpu_ns|gpu_kernel_ns|cuda_sync_ns] [--limit 25]\n"
	"                     [--folded [-o FILE]] [--pprof PREFIX] [--token-file F] [--ca-file F]\n"
	"Compares A (the range and selector, the baseline) with B (--from2/--to2 and --selector2,\n"
	"each A's when not given; at least one differs). Prints the functions whose share of\n"
	"each side's samples changed most: self and total share in A and B and the change in\n"
	"points. --folded writes 'frame;...;leaf A B' lines (flamegraph.pl's difffolded input;\n"
	"-o FILE, default stdout); --pprof PREFIX writes PREFIX-a.pb.gz and PREFIX-b.pb.gz for\n"
	"`go tool pprof -diff_base PREFIX-a.pb.gz PREFIX-b.pb.gz`.\n"
	"Times: RFC 3339 or Unix seconds; --since defaults to 1h.\n"
	"$GPUSCOPE_SERVER and $GPUSCOPE_TOKEN_FILE are the defaults of --server and --token-file.\n";

struct side_opts {
	const char *from2, *to2, *selector2, *pprof;
	uint64_t from2_ns, to2_ns;
};

/* Takes --from2, --to2, --selector2 and --pprof out of argv (query_parse takes the rest). */
static int take_opts(int *argc, char **argv, struct side_opts *o)
{
	static const char *const names[] = { "--from2", "--to2", "--selector2", "--pprof" };
	const char **dst[] = { &o->from2, &o->to2, &o->selector2, &o->pprof };
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		int which = -1;

		for (int k = 0; k < 4 && which < 0; k++) {
			size_t n = strlen(names[k]);

			if (!strcmp(a, names[k])) {
				if (i + 1 >= *argc) {
					fprintf(stderr, "gpuscope: %s needs a value\n%s", a, usage_text);
					return -1;
				}
				*dst[k] = argv[++i];
				which = k;
			} else if (!strncmp(a, names[k], n) && a[n] == '=') {
				*dst[k] = a + n + 1;
				which = k;
			}
		}
		if (which < 0)
			argv[out++] = argv[i];
	}
	*argc = out;
	argv[out] = NULL;
	if (o->to2 && !o->from2) {
		fprintf(stderr, "gpuscope: --to2 needs --from2\n%s", usage_text);
		return -1;
	}
	if (o->from2 && parse_time_ns(o->from2, &o->from2_ns)) {
		fprintf(stderr, "gpuscope: --from2: '%s' is not an RFC 3339 time or Unix seconds\n%s",
			o->from2, usage_text);
		return -1;
	}
	o->to2_ns = wall_ns();
	if (o->to2 && parse_time_ns(o->to2, &o->to2_ns)) {
		fprintf(stderr, "gpuscope: --to2: '%s' is not an RFC 3339 time or Unix seconds\n%s",
			o->to2, usage_text);
		return -1;
	}
	if (o->from2 && o->from2_ns > o->to2_ns) {
		fprintf(stderr, "gpuscope: --from2 is after --to2\n%s", usage_text);
		return -1;
	}
	return 0;
}

/* "2026-12-02 16:50:20 → 16:55:06 UTC (4m46s)" or "the last 1h", with the selector. */
static void describe(char *buf, size_t len, bool range, uint64_t from_ns, uint64_t to_ns,
		     const char *since, const char *sel)
{
	char a[32], b[32], d[32];
	time_t sa = (time_t)(from_ns / NSEC_PER_SEC), sb = (time_t)(to_ns / NSEC_PER_SEC);
	struct tm ta, tb;

	if (!range) {
		snprintf(buf, len, "the last %s, %s", since, sel ? sel : "every process");
		return;
	}
	gmtime_r(&sa, &ta);
	gmtime_r(&sb, &tb);
	strftime(a, sizeof(a), "%Y-%m-%d %H:%M:%S", &ta);
	strftime(b, sizeof(b), ta.tm_yday == tb.tm_yday && ta.tm_year == tb.tm_year ?
			       "%H:%M:%S" : "%Y-%m-%d %H:%M:%S", &tb);
	fmt_duration(to_ns - from_ns, d, sizeof(d));
	snprintf(buf, len, "%s → %s UTC (%s), %s", a, b, d, sel ? sel : "every process");
}

struct fn {
	const char *name;
	double self[2], total[2];	/* A, B */
	double dself, dtotal;		/* B share - A share, in points */
};

struct fns {
	struct fn *v;		/* by the name's index in names */
	size_t n, cap;
	struct strtab names;
};

static struct fn *fn_get(struct fns *f, const char *name)
{
	int64_t idx = strtab_intern(&f->names, name);

	if (idx < 0)
		return NULL;
	if ((size_t)idx < f->n)
		return &f->v[idx];
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 256;
		struct fn *v = realloc(f->v, cap * sizeof(*v));

		if (!v)
			return NULL;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n] = (struct fn){ .name = f->names.strs[idx] };
	return &f->v[f->n++];
}

/*
 * Self and total per function over the tree under node: total counts a node's value only where
 * the function is not already on the path above it (recursion is counted once). 0 or -1 (OOM).
 */
static int walk(json_t *node, struct fns *f, const char **path, size_t depth)
{
	const char *name = json_string_value(json_object_get(node, "name"));
	json_t *kids = json_object_get(node, "children"), *k;
	bool seen = false;
	struct fn *x;
	size_t i;

	if (!name || depth >= 512)
		return 0;
	for (i = 0; i < depth; i++)
		seen |= !strcmp(path[i], name);
	x = fn_get(f, name);
	if (!x)
		return -1;
	x->self[0] += json_number_value(json_object_get(node, "self"));
	x->self[1] += json_number_value(json_object_get(node, "self2"));
	if (!seen) {
		x->total[0] += json_number_value(json_object_get(node, "value"));
		x->total[1] += json_number_value(json_object_get(node, "value2"));
	}
	path[depth] = name;
	json_array_foreach(kids, i, k)
		if (walk(k, f, path, depth + 1))
			return -1;
	return 0;
}

static int by_change(const void *a, const void *b)
{
	const struct fn *x = a, *y = b;

	if (fabs(x->dself) != fabs(y->dself))
		return fabs(x->dself) < fabs(y->dself) ? 1 : -1;
	if (fabs(x->dtotal) != fabs(y->dtotal))
		return fabs(x->dtotal) < fabs(y->dtotal) ? 1 : -1;
	return strcmp(x->name, y->name);
}

static void fmt_value(double v, bool ns, char *buf, size_t len)
{
	if (ns)
		fmt_duration((uint64_t)v, buf, len);
	else
		snprintf(buf, len, "%.0f", v);
}

static int print_table(const struct query *q, json_t *j, const char *da, const char *db)
{
	const char *unit = json_string_value(json_object_get(j, "unit"));
	bool ns = unit && !strcmp(unit, "ns");
	double t[2] = { json_number_value(json_object_get(j, "total")),
			json_number_value(json_object_get(j, "total2")) };
	json_t *root = json_object_get(j, "root"), *k;
	const char *path[512];
	struct fns f = { 0 };
	char va[32], vb[32];
	size_t i, shown = 0;
	int rc = 1;

	json_array_foreach(json_object_get(root, "children"), i, k)
		if (walk(k, &f, path, 0))
			goto out;
	for (i = 0; i < f.n; i++) {
		struct fn *x = &f.v[i];

		x->dself = 100 * ((t[1] > 0 ? x->self[1] / t[1] : 0) - (t[0] > 0 ? x->self[0] / t[0] : 0));
		x->dtotal = 100 * ((t[1] > 0 ? x->total[1] / t[1] : 0) -
				   (t[0] > 0 ? x->total[0] / t[0] : 0));
	}
	if (f.n)
		qsort(f.v, f.n, sizeof(*f.v), by_change);
	fmt_value(t[0], ns, va, sizeof(va));
	fmt_value(t[1], ns, vb, sizeof(vb));
	printf("A: %s: %s%s\n", da, va, ns ? "" : " samples");
	printf("B: %s: %s%s\n", db, vb, ns ? "" : " samples");
	printf("shares of each side's total; change in points (B - A), largest first\n");
	printf("%8s %8s %8s  %8s %8s %8s  %s\n", "SELF A", "SELF B", "CHANGE", "TOTAL A", "TOTAL B",
	       "CHANGE", "FUNCTION");
	for (i = 0; i < f.n && (long)shown < q->limit; i++) {
		const struct fn *x = &f.v[i];
		double s[2] = { t[0] > 0 ? 100 * x->self[0] / t[0] : 0,
				t[1] > 0 ? 100 * x->self[1] / t[1] : 0 };
		double to[2] = { t[0] > 0 ? 100 * x->total[0] / t[0] : 0,
				 t[1] > 0 ? 100 * x->total[1] / t[1] : 0 };

		if (fabs(x->dself) < 0.005 && fabs(x->dtotal) < 0.005)
			continue;	/* unchanged */
		printf("%7.2f%% %7.2f%% %+8.2f  %7.2f%% %7.2f%% %+8.2f  %s\n", s[0], s[1],
		       x->dself + 0.0, to[0], to[1], x->dtotal + 0.0, x->name);
		shown++;
	}
	if (!t[0] && !t[1])
		printf("(no samples on either side)\n");
	else if (!shown)
		printf("(no function's share changed)\n");
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "gpuscope: out of memory\n");
	free(f.v);
	strtab_done(&f.names);
	return rc;
}

/* "a;b;c A B" for every node with self samples on either side, depth first by name. */
static int folded(json_t *node, char *path, size_t len, size_t cap, FILE *out)
{
	json_t *kids = json_object_get(node, "children"), *k;
	const char *name = json_string_value(json_object_get(node, "name"));
	double s1 = json_number_value(json_object_get(node, "self"));
	double s2 = json_number_value(json_object_get(node, "self2"));
	size_t n, i;

	if (!name)
		return 0;
	n = strlen(name);
	if (len + n + 2 >= cap)
		return 0;	/* deeper than a line holds: the rest of the branch is cut */
	if (len)
		path[len++] = ';';
	memcpy(path + len, name, n + 1);
	len += n;
	if (s1 > 0 || s2 > 0)
		fprintf(out, "%s %.0f %.0f\n", path, s1, s2);
	json_array_foreach(kids, i, k)
		folded(k, path, len, cap, out);
	return 0;
}

/* Writes one side's pprof to path. 0 or 1 (printed). */
static int get_pprof(const struct query *q, const char *path)
{
	struct http_body b = { 0 };
	char *url = query_url(q, "pprof");
	int rc = 1;

	if (!url) {
		fprintf(stderr, "gpuscope: out of memory\n");
		return 1;
	}
	if (http_get(q, url, &b))
		goto out;
	if (b.len < 2 || (unsigned char)b.data[0] != 0x1f || (unsigned char)b.data[1] != 0x8b) {
		fprintf(stderr, "gpuscope: server: answer is not a gzip'd profile (%zu bytes)\n",
			b.len);
		goto out;
	}
	if (write_output(path, b.data, b.len))
		goto out;
	fprintf(stderr, "gpuscope: wrote %s (%zu bytes)\n", path, b.len);
	rc = 0;
out:
	free(b.data);
	free(url);
	return rc;
}

static int write_pprofs(const struct query *qa, const struct side_opts *o)
{
	struct query qb = *qa;
	char *pa = NULL, *pb = NULL;
	int rc = 1;

	if (o->from2) {
		qb.have_range = true;
		qb.since = NULL;
		qb.from_ns = o->from2_ns;
		qb.to_ns = o->to2_ns;
	}
	if (o->selector2)
		qb.selector = o->selector2;
	if (asprintf(&pa, "%s-a.pb.gz", o->pprof) < 0 || asprintf(&pb, "%s-b.pb.gz", o->pprof) < 0)
		goto out;
	if (get_pprof(qa, pa) || get_pprof(&qb, pb))
		goto out;
	printf("go tool pprof -diff_base %s %s\n", pa, pb);
	rc = 0;
out:
	free(pa);
	free(pb);
	return rc;
}

int cmd_diff(int argc, char **argv)
{
	struct side_opts o = { 0 };
	char *url = NULL, da[320], db[320];
	json_t *j = NULL;
	struct query q;
	FILE *out = stdout;
	int rc;

	if (take_opts(&argc, argv, &o))
		return 2;
	url = query_open(argc, argv, Q_LIMIT | Q_FOLDED | Q_OUTPUT_OPT, usage_text, "diff", &q, &rc);
	if (!url)
		return rc;
	rc = 2;
	if (!o.from2 && !o.selector2) {
		fprintf(stderr, "gpuscope: diff needs a second side: --from2 T [--to2 T] and/or "
				"--selector2 S\n%s", usage_text);
		goto out;
	}
	if (q.output && !q.folded) {
		fprintf(stderr, "gpuscope: -o goes with --folded (the table is printed)\n%s",
			usage_text);
		goto out;
	}
	rc = 1;
	if (o.pprof) {
		rc = write_pprofs(&q, &o);
		goto out;
	}
	if (o.from2) {
		char f[40], t[40];

		snprintf(f, sizeof(f), "%llu.%09llu", (unsigned long long)(o.from2_ns / NSEC_PER_SEC),
			 (unsigned long long)(o.from2_ns % NSEC_PER_SEC));
		snprintf(t, sizeof(t), "%llu.%09llu", (unsigned long long)(o.to2_ns / NSEC_PER_SEC),
			 (unsigned long long)(o.to2_ns % NSEC_PER_SEC));
		if (query_url_add(&url, "from2", f) || query_url_add(&url, "to2", t))
			goto oom;
	}
	if (o.selector2 && query_url_add(&url, "selector2", o.selector2))
		goto oom;
	j = http_get_json(&q, url);
	if (!j)
		goto out;
	if (!json_is_object(json_object_get(j, "root"))) {
		fprintf(stderr, "gpuscope: server: answer has no \"root\"\n");
		goto out;
	}
	if (q.folded) {
		char *path = malloc(1 << 16);
		json_t *k;
		size_t i;

		if (!path)
			goto oom;
		if (q.output && strcmp(q.output, "-")) {
			out = fopen(q.output, "we");
			if (!out) {
				fprintf(stderr, "gpuscope: %s: %m\n", q.output);
				free(path);
				goto out;
			}
		}
		json_array_foreach(json_object_get(json_object_get(j, "root"), "children"), i, k)
			folded(k, path, 0, 1 << 16, out);
		free(path);
		rc = 0;
		if (out != stdout && fclose(out)) {
			fprintf(stderr, "gpuscope: writing %s: %m\n", q.output);
			rc = 1;
		}
		goto out;
	}
	describe(da, sizeof(da), q.have_range, q.from_ns, q.to_ns, q.since, q.selector);
	describe(db, sizeof(db), o.from2 || q.have_range, o.from2 ? o.from2_ns : q.from_ns,
		 o.from2 ? o.to2_ns : q.to_ns, q.since, o.selector2 ? o.selector2 : q.selector);
	rc = print_table(&q, j, da, db);
	goto out;
oom:
	fprintf(stderr, "gpuscope: out of memory\n");
	rc = 1;
out:
	json_decref(j);
	free(url);
	return rc;
}
