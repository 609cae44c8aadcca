/* SPDX-License-Identifier: Apache-2.0 */
/* Flame graph SVG writer: layout (widths, order, depth), escaping, narrow frames, bad answers. */
#include <errno.h>
#include <stdlib.h>
#include "cli/flamesvg.c"	/* the CLI is not a library */
#include "test.h"

static char *render(const char *json, struct flame_svg_stats *st, int *ret_err, char *why)
{
	json_t *j = json_loads(json, 0, NULL);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	*ret_err = flame_svg_write(f, j, &(struct flame_svg_opts){ .title = "t<&>" }, st, why,
				   256);
	fclose(f);
	json_decref(j);
	return buf;
}

static bool test_flamesvg_layout(void)
{
	const char *json =
		"{\"unit\":\"samples\",\"total\":100,\"root\":{\"name\":\"all\",\"value\":100,"
		"\"self\":0,\"children\":[{\"name\":\"main\",\"value\":100,\"self\":0,\"children\":["
		"{\"name\":\"zeta<b>\",\"value\":25,\"self\":25},"
		"{\"name\":\"alpha\",\"value\":75,\"self\":75}]}]}}";
	struct flame_svg_stats st = { 0 };
	char why[256];
	int err;
	char *svg = render(json, &st, &err, why);
	bool ok = ASSERT_EQ(err, 0, "write") && ASSERT_EQ(st.frames, 4, "frames") &&
		  ASSERT_EQ(st.max_depth, 2, "depth") &&
		  /* alpha sorts first: starts at 0 with width 75; zeta starts at 75. */
		  ASSERT_TRUE(strstr(svg, "data-n=\"alpha\" data-s=\"0\" data-w=\"75\" data-d=\"2\""),
			      "alpha laid out") &&
		  ASSERT_TRUE(strstr(svg, "data-n=\"zeta&lt;b&gt;\" data-s=\"75\" data-w=\"25\""),
			      "zeta escaped and laid out") &&
		  ASSERT_TRUE(strstr(svg, "<title>alpha (75 samples, 75.00%)</title>"), "tooltip") &&
		  ASSERT_TRUE(strstr(svg, ">t&lt;&amp;&gt;</text>"), "title escaped") &&
		  ASSERT_TRUE(strstr(svg, "function zoom(g)"), "script embedded") &&
		  ASSERT_TRUE(!strstr(strstr(svg, "<![CDATA[") + 9, "]]>\n<rect") ||
				      strstr(svg, "]]></script>"),
			      "CDATA closed once");
	free(svg);
	return ok;
}

static bool test_flamesvg_narrow_frames_left_out(void)
{
	/* 1 of 100000 samples is 0.0118 px at 1180 px: left out, and counted. */
	const char *json =
		"{\"unit\":\"ns\",\"root\":{\"name\":\"all\",\"value\":100000,\"children\":["
		"{\"name\":\"big\",\"value\":99999},{\"name\":\"tiny\",\"value\":1,"
		"\"children\":[{\"name\":\"tinier\",\"value\":1}]}]}}";
	struct flame_svg_stats st = { 0 };
	char why[256];
	int err;
	char *svg = render(json, &st, &err, why);
	bool ok = ASSERT_EQ(err, 0, "write") && ASSERT_EQ(st.frames, 2, "drawn") &&
		  ASSERT_EQ(st.hidden, 1, "hidden subtrees") &&
		  ASSERT_TRUE(!strstr(svg, "tiny"), "tiny not drawn") &&
		  ASSERT_TRUE(strstr(svg, "data-unit=\"ns\""), "unit");
	free(svg);
	return ok;
}

static bool test_flamesvg_bad_answers(void)
{
	static const char *const bad[] = {
		"{\"nope\":1}",
		"{\"root\":{\"value\":3}}",
		"{\"root\":{\"name\":\"all\",\"value\":3,\"children\":{}}}",
		"{\"root\":{\"name\":\"all\",\"value\":3,\"children\":[1]}}",
	};
	bool ok = true;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct flame_svg_stats st;
		char why[256] = "";
		int err;
		char *svg = render(bad[i], &st, &err, why);

		ok &= ASSERT_EQ(err, -EINVAL, bad[i]) && ASSERT_TRUE(why[0], "reason given");
		free(svg);
	}
	return ok;
}

TEST_MAIN(T(test_flamesvg_layout), T(test_flamesvg_narrow_frames_left_out),
	  T(test_flamesvg_bad_answers))
