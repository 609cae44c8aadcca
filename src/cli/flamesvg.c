/* SPDX-License-Identifier: Apache-2.0 */
/* The flame graph SVG writer: layout, colours, escaping; the script is flamegraph.js. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "cli/flamesvg.h"
#include "common/util.h"

/* flamegraph.js, NUL-terminated, assembled into .rodata (the build tracks it in mk/push.mk). */
extern const char flamegraph_js[];
__asm__(".pushsection .rodata\n"
	".global flamegraph_js\n"
	".type flamegraph_js, @object\n"
	"flamegraph_js:\n"
	".incbin \"src/cli/flamegraph.js\"\n"
	".byte 0\n"
	".popsection\n");

#define FRAME_H		16
#define PAD		10
#define TOP		60	/* title, subtitle, buttons */
#define BOTTOM		34	/* details line */
#define FONT_PX		12
#define CHAR_W		(FONT_PX * 0.59)
#define MIN_W_PX	0.1
#define MAX_DEPTH	2048

struct frame {
	const char *name;
	double s, w;		/* sample units */
	unsigned d;
};

struct layout {
	struct frame *v;
	size_t len, cap;
	double min_w;		/* sample units under which a frame is not drawn */
	struct flame_svg_stats st;
};

static int cmp_name(const void *a, const void *b)
{
	const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
	const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));

	return strcmp(x ? x : "", y ? y : "");
}

static int add(struct layout *l, json_t *node, double s, unsigned d, char *why, size_t whylen)
{
	json_t *kids = json_object_get(node, "children"), **sorted = NULL, *k;
	const char *name = json_string_value(json_object_get(node, "name"));
	double w = json_number_value(json_object_get(node, "value")), x = s;
	size_t i, n;
	int err = 0;

	if (!name || !json_is_number(json_object_get(node, "value")) || w < 0) {
		snprintf(why, whylen, "frame at depth %u has no name or value", d);
		return -EINVAL;
	}
	if (d > MAX_DEPTH) {
		snprintf(why, whylen, "tree deeper than %d", MAX_DEPTH);
		return -EINVAL;
	}
	if (w < l->min_w || w == 0) {
		l->st.hidden++;
		return 0;
	}
	if (array_reserve(&l->v, &l->cap, l->len + 1, sizeof(*l->v), 1024))
		return -ENOMEM;
	l->v[l->len++] = (struct frame){ .name = name, .s = s, .w = w, .d = d };
	l->st.frames++;
	if (d > l->st.max_depth)
		l->st.max_depth = d;
	if (!kids)
		return 0;
	if (!json_is_array(kids)) {
		snprintf(why, whylen, "\"children\" of '%s' is not an array", name);
		return -EINVAL;
	}
	n = json_array_size(kids);
	if (!n)
		return 0;
	/* Alphabetical, like flamegraph.pl: the same profile always draws the same picture. */
	sorted = malloc(n * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	json_array_foreach(kids, i, k) {
		if (!json_is_object(k)) {
			snprintf(why, whylen, "a child of '%s' is not an object", name);
			err = -EINVAL;
			goto out;
		}
		sorted[i] = k;
	}
	qsort(sorted, n, sizeof(*sorted), cmp_name);
	for (i = 0; i < n && !err; i++) {
		err = add(l, sorted[i], x, d + 1, why, whylen);
		x += json_number_value(json_object_get(sorted[i], "value"));
	}
out:
	free(sorted);
	return err;
}

static void put_escaped(FILE *out, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", out); break;
		case '<': fputs("&lt;", out); break;
		case '>': fputs("&gt;", out); break;
		case '"': fputs("&quot;", out); break;
		case '\'': fputs("&apos;", out); break;
		default:
			fputc((unsigned char)*s < 0x20 ? '?' : *s, out);
		}
	}
}

/* Warm colours from a hash of the name, so that a function keeps its colour across graphs. */
static void colour(const char *name, unsigned *r, unsigned *g, unsigned *b)
{
	uint64_t h = hash64(name, strlen(name), 0x9e3779b97f4a7c15ULL);
	double v1 = (h & 0xffff) / 65535.0, v2 = ((h >> 16) & 0xffff) / 65535.0,
	       v3 = ((h >> 32) & 0xffff) / 65535.0;

	*r = 205 + (unsigned)(50 * v3);
	*g = (unsigned)(230 * v1);
	*b = (unsigned)(55 * v2);
}

static void fmt_value(double v, bool ns, char *buf, size_t len)
{
	if (ns)
		fmt_duration((uint64_t)v, buf, len);
	else
		snprintf(buf, len, "%.0f samples", v);
}

int flame_svg_write(FILE *out, json_t *answer, const struct flame_svg_opts *o,
		    struct flame_svg_stats *ret_stats, char *why, size_t whylen)
{
	json_t *root = json_object_get(answer, "root");
	const char *unit = json_string_value(json_object_get(answer, "unit"));
	unsigned width = o->width ? o->width : 1200, height;
	double total, scale;
	struct layout l = { 0 };
	bool ns = unit && !strcmp(unit, "ns");
	int err;

	if (!json_is_object(root)) {
		snprintf(why, whylen, "answer has no \"root\" object");
		return -EINVAL;
	}
	total = json_number_value(json_object_get(root, "value"));
	if (total <= 0)
		total = 0;
	scale = total > 0 ? (width - 2.0 * PAD) / total : 0;
	l.min_w = total > 0 ? MIN_W_PX / scale : 0;
	err = add(&l, root, 0, 0, why, whylen);
	if (err)
		goto out;
	height = TOP + (l.st.max_depth + 1) * FRAME_H + BOTTOM;

	fprintf(out, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
		     "<svg version=\"1.1\" width=\"%u\" height=\"%u\" viewBox=\"0 0 %u %u\" "
		     "onload=\"init(evt)\" xmlns=\"http://www.w3.org/2000/svg\" "
		     "data-total=\"%.17g\" data-unit=\"%s\">\n",
		width, height, width, height, total > 0 ? total : 1, ns ? "ns" : "samples");
	fprintf(out, "<!-- gpuscope flame graph: %zu frames drawn, %zu narrower than %.1f px "
		     "left out -->\n", l.st.frames, l.st.hidden, MIN_W_PX);
	fprintf(out,
		"<defs><linearGradient id=\"bg\" y1=\"0\" y2=\"1\" x1=\"0\" x2=\"0\">"
		"<stop stop-color=\"#eeeeee\" offset=\"5%%\"/><stop stop-color=\"#eeeeb0\" "
		"offset=\"95%%\"/></linearGradient></defs>\n"
		"<style type=\"text/css\">\n"
		"text { font-family: Verdana, sans-serif; font-size: %dpx; fill: #000; }\n"
		"#title { font-size: 17px; } #subtitle { fill: #555; }\n"
		"#search, #unzoom { cursor: pointer; opacity: 0.6; } #search:hover, "
		"#unzoom:hover, #search.active { opacity: 1; }\n"
		".f text { pointer-events: none; }\n"
		".f:hover rect { stroke: #000; stroke-width: 0.5; cursor: pointer; }\n"
		".hide { display: none; } .parent { opacity: 0.5; }\n"
		"</style>\n"
		"<script type=\"text/ecmascript\"><![CDATA[\n%s]]></script>\n",
		FONT_PX, flamegraph_js);
	fprintf(out, "<rect x=\"0\" y=\"0\" width=\"%u\" height=\"%u\" fill=\"url(#bg)\"/>\n",
		width, height);
	fprintf(out, "<text id=\"title\" x=\"%u\" y=\"24\" text-anchor=\"middle\">", width / 2);
	put_escaped(out, o->title ? o->title : "Flame Graph");
	fprintf(out, "</text>\n<text id=\"subtitle\" x=\"%u\" y=\"44\" text-anchor=\"middle\">",
		width / 2);
	put_escaped(out, o->subtitle ? o->subtitle : "");
	fprintf(out, "</text>\n"
		     "<text id=\"unzoom\" class=\"hide\" x=\"%d\" y=\"24\">Reset Zoom</text>\n"
		     "<text id=\"search\" x=\"%u\" y=\"24\" text-anchor=\"end\">Search</text>\n"
		     "<text id=\"matched\" x=\"%u\" y=\"%u\" text-anchor=\"end\"> </text>\n"
		     "<text id=\"details\" x=\"%d\" y=\"%u\"> </text>\n"
		     "<g id=\"frames\">\n",
		PAD, width - PAD, width - PAD, height - 12, PAD, height - 12);
	for (size_t i = 0; i < l.len; i++) {
		const struct frame *f = &l.v[i];
		double x = PAD + f->s * scale, w = f->w * scale;
		unsigned y = height - BOTTOM - (f->d + 1) * FRAME_H, r, g, b;
		int fit = (int)((w - 6) / CHAR_W);
		size_t nlen = strlen(f->name);
		char val[48];

		if (f->d == 0)
			r = 230, g = 200, b = 140;
		else
			colour(f->name, &r, &g, &b);
		fmt_value(f->w, ns, val, sizeof(val));
		fputs("<g class=\"f\" data-n=\"", out);
		put_escaped(out, f->name);
		fprintf(out, "\" data-s=\"%.17g\" data-w=\"%.17g\" data-d=\"%u\"><title>", f->s, f->w,
			f->d);
		put_escaped(out, f->name);
		fprintf(out, " (%s, %.2f%%)</title><rect x=\"%.2f\" y=\"%u\" width=\"%.2f\" "
			     "height=\"%d\" rx=\"2\" fill=\"rgb(%u,%u,%u)\"/><text x=\"%.2f\" "
			     "y=\"%u\">",
			val, total > 0 ? 100.0 * f->w / total : 0.0, x, y, w > 1 ? w - 0.5 : w,
			FRAME_H - 1, r, g, b, x + 3, y + FRAME_H - 4);
		if (fit >= 3) {
			if (nlen <= (size_t)fit) {
				put_escaped(out, f->name);
			} else {
				/* Cut on a UTF-8 character boundary. */
				char buf[1024];
				size_t k = (size_t)fit - 2 < sizeof(buf) - 1 ? (size_t)fit - 2 :
									      sizeof(buf) - 1;

				while (k && ((unsigned char)f->name[k] & 0xc0) == 0x80)
					k--;
				memcpy(buf, f->name, k);
				buf[k] = 0;
				put_escaped(out, buf);
				fputs("..", out);
			}
		}
		fputs("</text></g>\n", out);
	}
	fputs("</g>\n</svg>\n", out);
	if (ferror(out)) {
		err = -EIO;
		goto out;
	}
	if (ret_stats)
		*ret_stats = l.st;
out:
	free(l.v);
	return err;
}
