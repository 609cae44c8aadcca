/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Renders the server's flame graph JSON (/api/v1/flamegraph) as a self-contained interactive
 * SVG: frames stacked bottom-up from "all", click to zoom, search with highlight and matched
 * share, tooltips (flamegraph.js, embedded).
 */
#ifndef GPUSCOPE_CLI_FLAMESVG_H
#define GPUSCOPE_CLI_FLAMESVG_H

#include <jansson.h>
#include <stdio.h>

struct flame_svg_opts {
	const char *title;	/* NULL: "Flame Graph" */
	const char *subtitle;	/* range, selector, kind; may be NULL */
	unsigned width;		/* px, 0: 1200 */
};

struct flame_svg_stats {
	size_t frames;		/* drawn */
	size_t hidden;		/* narrower than 0.1 px with their descendants: not drawn */
	unsigned max_depth;
};

/*
 * Writes the SVG for answer = {"unit":..,"total":N,"root":{"name","value","children":[..]}}.
 * Returns 0, -EINVAL with a reason in why (malformed answer), or -errno.
 */
int flame_svg_write(FILE *out, json_t *answer, const struct flame_svg_opts *o,
		    struct flame_svg_stats *ret_stats, char *why, size_t whylen);

#endif
