/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/agent/meta/relabel.c: config parsing, errors with line and reason, semantics. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include "test.h"
#include "agent/meta/relabel.h"

static struct relabel_rules *parse_ok(const char *text)
{
	char err[256];
	struct relabel_rules *r = relabel__parse(text, err, sizeof(err));

	if (!r)
		fprintf(stderr, "  unexpected parse error: %s\n", err);
	return r;
}

static bool parse_fails(const char *text, const char *want)
{
	char err[256] = "";
	struct relabel_rules *r = relabel__parse(text, err, sizeof(err));

	if (r) {
		fprintf(stderr, "  parsed but should fail with '%s':\n%s\n", want, text);
		relabel__free(r);
		return false;
	}
	return ASSERT_EQ(errno, EINVAL, "errno") && ASSERT_STREQ(strstr(err, want) ? want : err, want, "message");
}

static void set3(struct lset *ls)
{
	lset_init(ls);
	lset_set(ls, "namespace", "ml");
	lset_set(ls, "pod", "trainer-worker-3");
	lset_set(ls, "__meta_kubernetes_pod_label_app_kubernetes_io_name", "bert");
	lset_set(ls, "__meta_kubernetes_pod_label_team", "nlp");
}

static bool test_relabel_parse_forms(void)
{
	const char *cfg = "# comment\n"
			  "relabel_configs:\n"
			  "- source_labels: [namespace, \"pod\"]   # trailing comment\n"
			  "  separator: '/'\n"
			  "  regex: \"ml/(.*)-worker-([0-9]+)\"\n"
			  "  target_label: worker\n"
			  "  replacement: '$1#$2'\n"
			  "\n"
			  "-   action: labelmap\n"
			  "    regex: __meta_kubernetes_pod_label_(.+)\n"
			  "- action: labeldrop\r\n"
			  "  regex: app_kubernetes_io_.*\n";
	struct relabel_rules *r = parse_ok(cfg);
	struct lset ls;
	bool ok;

	CHECK(r);
	set3(&ls);
	ok = ASSERT_EQ(relabel__count(r), 3, "rules") &&
	     ASSERT_EQ(relabel__apply(r, &ls), 1, "kept") &&
	     ASSERT_STREQ(lset_get(&ls, "worker"), "trainer#3", "replace with two groups") &&
	     ASSERT_STREQ(lset_get(&ls, "team"), "nlp", "labelmap") &&
	     ASSERT_TRUE(!lset_get(&ls, "app_kubernetes_io_name"), "labeldrop");
	lset_done(&ls);
	relabel__free(r);
	return ok;
}

static bool test_relabel_errors(void)
{
	CHECK(parse_fails("- action: replace\n  target_label: x\n  regex: \"(unclosed\"\n", "line 1: regex '(unclosed'"));
	CHECK(parse_fails("- action: explode\n", "line 1: unknown action 'explode'"));
	CHECK(parse_fails("- action: keep\n  regex: a\n", "line 1: action keep needs source_labels"));
	CHECK(parse_fails("- source_labels: [a]\n  target: x\n", "line 2: unknown key 'target'"));
	CHECK(parse_fails("- source_labels: [a]\n  regex: a\n  regex: b\n", "line 3: duplicate key 'regex'"));
	CHECK(parse_fails("- source_labels: [a\n", "line 1: source_labels: missing ']'"));
	CHECK(parse_fails("- source_labels: a\n", "line 1: source_labels: write a flow list"));
	CHECK(parse_fails("- source_labels: [a]\n  target_label: \"x\n", "line 2: target_label: unterminated"));
	CHECK(parse_fails("source_labels: [a]\n", "line 1: expected a rule"));
	CHECK(parse_fails("- action: replace\n", "line 1: action replace needs target_label"));
	CHECK(parse_fails("- action: replace\n  target_label: 9x\n", "line 1: target_label '9x' is not a label name"));
	CHECK(parse_fails("- action: labeldrop\n  source_labels: [a]\n", "line 1: action labeldrop takes only regex"));
	CHECK(parse_fails("- action: drop\n\tsource_labels: [a]\n", "line 2: tab character"));
	CHECK(parse_fails("- source_labels: [a]\n  action: keep\n- regex: x\n  target_label: y\n"
			  "- source_labels: [b-c]\n", "line 5: source_labels: 'b-c' is not a label name"));
	CHECK(parse_fails("- source_labels: [a]\n  action keep\n", "line 2: expected 'key: value'"));
	return true;
}

static bool test_relabel_keep_drop(void)
{
	struct relabel_rules *keep = parse_ok("- source_labels: [namespace]\n  regex: ml|research\n  action: keep\n");
	struct relabel_rules *drop = parse_ok("- source_labels: [pod]\n  regex: trainer\n  action: drop\n");
	struct lset ls;
	bool ok;

	CHECK(keep && drop);
	set3(&ls);
	/* anchored: "trainer" does not match "trainer-worker-3" */
	ok = ASSERT_EQ(relabel__apply(keep, &ls), 1, "keep ml") &&
	     ASSERT_EQ(relabel__apply(drop, &ls), 1, "drop is anchored");
	lset_set(&ls, "namespace", "mlx");
	ok = ok && ASSERT_EQ(relabel__apply(keep, &ls), 0, "keep is anchored: mlx dropped");
	lset_set(&ls, "pod", "trainer");
	ok = ok && ASSERT_EQ(relabel__apply(drop, &ls), 0, "drop trainer");
	lset_del(&ls, "namespace");
	ok = ok && ASSERT_EQ(relabel__apply(keep, &ls), 0, "missing label is empty string");
	lset_done(&ls);
	relabel__free(keep);
	relabel__free(drop);
	return ok;
}

static bool test_relabel_replace_semantics(void)
{
	struct relabel_rules *r = parse_ok(
		"- source_labels: [pod]\n  regex: '(.*)-worker-(.*)'\n  target_label: job\n"	/* $1 default */
		"- source_labels: [pod]\n  regex: nomatch\n  target_label: pod\n  replacement: x\n"
		"- source_labels: [namespace]\n  target_label: ns_$1\n  replacement: '$$${1}$1x'\n"
		"- source_labels: [team]\n  target_label: namespace\n  replacement: ''\n"	/* delete */
		"- source_labels: [pod]\n  target_label: upper\n  action: uppercase\n"
		"- action: labelkeep\n  regex: job|pod|ns_ml|upper\n");
	struct lset ls;
	bool ok;

	CHECK(r);
	set3(&ls);
	lset_set(&ls, "team", "x");
	ok = ASSERT_EQ(relabel__apply(r, &ls), 1, "kept") &&
	     ASSERT_STREQ(lset_get(&ls, "job"), "trainer", "default $1 is the first user group") &&
	     ASSERT_STREQ(lset_get(&ls, "pod"), "trainer-worker-3", "no match: unchanged") &&
	     /* $1x is the named group "1x", which does not exist: empty, like Prometheus */
	     ASSERT_STREQ(lset_get(&ls, "ns_ml"), "$ml", "$$, ${1}, $1x") &&
	     ASSERT_TRUE(!lset_get(&ls, "namespace"), "empty replacement deletes") &&
	     ASSERT_STREQ(lset_get(&ls, "upper"), "TRAINER-WORKER-3", "uppercase") &&
	     ASSERT_EQ(ls.n, 4, "labelkeep kept 4");
	lset_done(&ls);
	relabel__free(r);
	return ok;
}

static bool test_relabel_load_file(void)
{
	char path[] = "/tmp/gpuscope-relabel-XXXXXX", err[512];
	struct relabel_rules *r;
	int fd = mkstemp(path);
	FILE *f;
	bool ok;

	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	fputs("- source_labels: [a]\n  action: keep\n  regex: '[z-a]'\n", f);
	fclose(f);
	r = relabel__load(path, err, sizeof(err));
	ok = ASSERT_TRUE(!r, "bad range refused") && ASSERT_TRUE(strstr(err, path) != NULL, "file named") &&
	     ASSERT_TRUE(strstr(err, "line 1: regex '[z-a]'") != NULL, "line and reason");
	unlink(path);
	r = relabel__load(path, err, sizeof(err));
	ok = ok && ASSERT_TRUE(!r && errno == ENOENT, "missing file");
	r = parse_ok("");
	ok = ok && ASSERT_TRUE(r && relabel__count(r) == 0, "empty config");
	relabel__free(r);
	return ok;
}

TEST_MAIN(T(test_relabel_parse_forms), T(test_relabel_errors), T(test_relabel_keep_drop),
	  T(test_relabel_replace_semantics), T(test_relabel_load_file))
