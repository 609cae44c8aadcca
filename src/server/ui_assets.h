/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The web UI's files, compiled into the server by the UI's build (mk/ui.mk). The server calls
 * ui_asset_find() for every request outside /api/ and /metrics.
 */
#ifndef GPUSCOPE_UI_ASSETS_H
#define GPUSCOPE_UI_ASSETS_H

#include <stddef.h>

struct ui_asset {
	const char *path, *content_type;	/* "/index.html", "text/html; charset=utf-8" */
	const unsigned char *data;		/* static, never freed */
	size_t len;
	const char *encoding;			/* NULL or "gzip" (Content-Encoding of data) */
};

/*
 * The asset for a request path ("/" and unknown client-side routes may map to index.html, at
 * the UI's choice), or NULL. Static data; thread-safe.
 */
const struct ui_asset *ui_asset_find(const char *path);

#endif
