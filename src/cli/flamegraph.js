/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The interactive part of gpuscope's flame graph SVG (embedded by flamesvg.c): click a frame to
 * zoom into it, "Reset Zoom" or a click on the root to zoom out; "Search" (or Ctrl-F, "/")
 * highlights the frames whose name matches a regular expression and shows the share of all
 * samples under them; hovering a frame shows its name, value and share at the bottom.
 * Each frame is <g class="f" data-n=name data-s=start data-w=width data-d=depth>, where start
 * and width are in sample units (samples or ns) from the left edge of the root.
 * URL parameters make a view linkable: ?z=NAME zooms into the widest frame named NAME,
 * ?s=REGEX searches.
 */
var svg, frames = [], details, matched, unzoomBtn, searchBtn, total = 1, unit = "samples";
var PAD = 10, WIDTH = 1180, CHAR_W = 7.1, zoomed = null, searching = false;

function init(evt) {
	svg = document.documentElement;
	total = parseFloat(svg.getAttribute("data-total")) || 1;
	unit = svg.getAttribute("data-unit") || "samples";
	WIDTH = parseFloat(svg.getAttribute("width")) - 2 * PAD;
	details = document.getElementById("details");
	matched = document.getElementById("matched");
	unzoomBtn = document.getElementById("unzoom");
	searchBtn = document.getElementById("search");
	var gs = document.getElementsByTagName("g");
	for (var i = 0; i < gs.length; i++) {
		var g = gs[i];
		if (g.getAttribute("class") !== "f" && !(g.classList && g.classList.contains("f")))
			continue;
		g.fn = g.getAttribute("data-n");
		g.fs = parseFloat(g.getAttribute("data-s"));
		g.fw = parseFloat(g.getAttribute("data-w"));
		g.fd = parseInt(g.getAttribute("data-d"), 10);
		g.rect = g.getElementsByTagName("rect")[0];
		g.label = g.getElementsByTagName("text")[0];
		g.fill = g.rect.getAttribute("fill");
		frames.push(g);
	}
	var root = document.getElementById("frames");
	root.addEventListener("click", function (e) {
		var g = frameOf(e.target);
		if (g)
			zoom(g);
	});
	root.addEventListener("mouseover", function (e) {
		var g = frameOf(e.target);
		if (g)
			details.textContent = describe(g);
	});
	root.addEventListener("mouseout", function () {
		details.textContent = " ";
	});
	unzoomBtn.addEventListener("click", unzoom);
	searchBtn.addEventListener("click", function () {
		if (searching)
			resetSearch();
		else
			searchPrompt();
	});
	window.addEventListener("keydown", function (e) {
		if ((e.keyCode === 70 && (e.ctrlKey || e.metaKey)) || e.key === "/") {
			e.preventDefault();
			searchPrompt();
		} else if (e.key === "Escape") {
			resetSearch();
		}
	});
	var params = urlParams();
	if (params.z) {
		var best = null;
		for (var k = 0; k < frames.length; k++)
			if (frames[k].fn === params.z && (!best || frames[k].fw > best.fw))
				best = frames[k];
		if (best)
			zoom(best);
	}
	if (params.s)
		search(toRegExp(params.s));
}

function urlParams() {
	var out = {}, q = (window.location && window.location.search || "").replace(/^\?/, "");
	var parts = q ? q.split("&") : [];
	for (var i = 0; i < parts.length; i++) {
		var kv = parts[i].split("=");
		try {
			out[decodeURIComponent(kv[0])] = decodeURIComponent((kv[1] || "").replace(/\+/g, " "));
		} catch (err) {
			/* a malformed parameter is ignored */
		}
	}
	return out;
}

function toRegExp(term) {
	try {
		return new RegExp(term);
	} catch (err) {
		return new RegExp(term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
	}
}

function frameOf(el) {
	while (el && el !== svg) {
		if (el.fn !== undefined)
			return el;
		el = el.parentNode;
	}
	return null;
}

function fmtValue(v) {
	if (unit !== "ns")
		return Math.round(v).toLocaleString("en-US") + " samples";
	if (v >= 1e9)
		return (v / 1e9).toFixed(3) + " s";
	if (v >= 1e6)
		return (v / 1e6).toFixed(1) + " ms";
	return (v / 1e3).toFixed(0) + " us";
}

function describe(g) {
	return g.fn + " (" + fmtValue(g.fw) + ", " + (100 * g.fw / total).toFixed(2) + "%)";
}

function fitLabel(g) {
	var w = parseFloat(g.rect.getAttribute("width"));
	var n = Math.floor((w - 6) / CHAR_W);
	g.label.setAttribute("x", parseFloat(g.rect.getAttribute("x")) + 3);
	if (n < 3)
		g.label.textContent = "";
	else if (g.fn.length <= n)
		g.label.textContent = g.fn;
	else
		g.label.textContent = g.fn.substring(0, n - 2) + "..";
}

function show(g, on) {
	if (on)
		g.classList.remove("hide");
	else
		g.classList.add("hide");
}

/* Lays out every frame for a view of [s0, s0 + w0) at depth >= d0; ancestors span the width. */
function layout(s0, w0, d0) {
	var scale = WIDTH / w0, eps = w0 * 1e-9;
	for (var i = 0; i < frames.length; i++) {
		var g = frames[i];
		var inside = g.fd >= d0 && g.fs >= s0 - eps && g.fs + g.fw <= s0 + w0 + eps;
		var above = g.fd < d0 && g.fs <= s0 + eps && g.fs + g.fw >= s0 + w0 - eps;
		if (inside) {
			show(g, true);
			g.classList.remove("parent");
			g.rect.setAttribute("x", PAD + (g.fs - s0) * scale);
			g.rect.setAttribute("width", Math.max(g.fw * scale - 0.5, 0.1));
		} else if (above) {
			show(g, true);
			g.classList.add("parent");
			g.rect.setAttribute("x", PAD);
			g.rect.setAttribute("width", WIDTH);
		} else {
			show(g, false);
			continue;
		}
		fitLabel(g);
	}
}

function zoom(g) {
	if (g.fd === 0) {
		unzoom();
		return;
	}
	zoomed = g;
	layout(g.fs, g.fw, g.fd);
	show(unzoomBtn, true);
}

function unzoom() {
	zoomed = null;
	layout(0, total, 0);
	show(unzoomBtn, false);
}

function searchPrompt() {
	var term = window.prompt("Search functions (regular expression):", "");
	if (term === null || term === "")
		return;
	search(toRegExp(term));
}

/* Highlights matches; the matched share counts nested matches once (merged ranges). */
function search(re) {
	var ranges = [];
	for (var i = 0; i < frames.length; i++) {
		var g = frames[i];
		if (re.test(g.fn)) {
			g.rect.setAttribute("fill", "rgb(230,0,230)");
			ranges.push([g.fs, g.fs + g.fw]);
		} else {
			g.rect.setAttribute("fill", g.fill);
		}
	}
	ranges.sort(function (a, b) { return a[0] - b[0] || b[1] - a[1]; });
	var sum = 0, end = -Infinity;
	for (var j = 0; j < ranges.length; j++) {
		var r = ranges[j];
		if (r[0] >= end) {
			sum += r[1] - r[0];
			end = r[1];
		} else if (r[1] > end) {
			sum += r[1] - end;
			end = r[1];
		}
	}
	searching = true;
	searchBtn.textContent = "Reset Search";
	searchBtn.classList.add("active");
	matched.textContent = "Matched: " + (100 * sum / total).toFixed(1) + "% (" +
		ranges.length + " frames)";
}

function resetSearch() {
	for (var i = 0; i < frames.length; i++)
		frames[i].rect.setAttribute("fill", frames[i].fill);
	searching = false;
	searchBtn.textContent = "Search";
	searchBtn.classList.remove("active");
	matched.textContent = " ";
}
