// SPDX-License-Identifier: Apache-2.0
// Small helpers: formatting of times, durations, bytes and values; colour hashing; DOM.

export const $ = (sel, root = document) => root.querySelector(sel);

export function el(tag, attrs = {}, ...kids) {
	attrs = attrs || {};
	const e = document.createElement(tag);
	for (const [k, v] of Object.entries(attrs)) {
		if (v === undefined || v === null || v === false) continue;
		if (k === 'class') e.className = v;
		else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
		else if (k === 'text') e.textContent = v;
		else e.setAttribute(k, v === true ? '' : v);
	}
	for (const c of kids.flat()) {
		if (c === null || c === undefined || c === false) continue;
		e.append(c instanceof Node ? c : document.createTextNode(String(c)));
	}
	return e;
}

const pad = (n, w = 2) => String(Math.floor(n)).padStart(w, '0');

// Wall-clock time of Unix ms, local time zone; millisecond digits when `step` is below 1 s.
export function fmtTime(ms, step = 1000) {
	const d = new Date(ms);
	let s = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
	if (step < 1000) s += '.' + pad(d.getMilliseconds(), 3);
	return s;
}

export function fmtDate(ms) {
	const d = new Date(ms);
	return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${fmtTime(ms)}`;
}

const dayOf = (ms) => new Date(ms).toDateString();

// A time range: times only within one day, dates too when it spans days (or `always`).
export function fmtRange(a, z, always = false) {
	const step = z - a < 10e3 ? 1 : 1000;
	if (dayOf(a) !== dayOf(z) || z - a >= 86400e3) return `${fmtDate(a)} → ${fmtDate(z)}`;
	return always ? `${fmtDate(a)} → ${fmtTime(z, step)}` : `${fmtTime(a, step)} – ${fmtTime(z, step)}`;
}

// Duration in ms → "12.3 µs", "4.50 ms", "1.20 s", "3m 05s", "2h 10m".
export function fmtDur(ms) {
	const a = Math.abs(ms);
	if (a < 1e-3) return `${(ms * 1e6).toFixed(0)} ns`;
	if (a < 1) return `${(ms * 1e3).toPrecision(3)} µs`;
	if (a < 1000) return `${ms.toPrecision(3)} ms`;
	if (a < 60e3) return `${(ms / 1000).toPrecision(3)} s`;
	if (a < 3600e3) return `${Math.floor(a / 60e3)}m ${pad((a % 60e3) / 1000)}s`;
	return `${Math.floor(a / 3600e3)}h ${pad((a % 3600e3) / 60e3)}m`;
}

export function fmtBytes(b) {
	const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
	let i = 0;
	while (Math.abs(b) >= 1024 && i < u.length - 1) {
		b /= 1024;
		i++;
	}
	return `${b.toFixed(i && b < 100 ? 1 : 0)} ${u[i]}`;
}

export function fmtCount(n) {
	if (n >= 1e9) return (n / 1e9).toFixed(2) + ' G';
	if (n >= 1e6) return (n / 1e6).toFixed(2) + ' M';
	if (n >= 1e4) return (n / 1e3).toFixed(1) + ' k';
	return String(Math.round(n));
}

// A flame-graph value in its unit: samples are counted, *_ns kinds are durations.
export function fmtValue(v, unit) {
	return unit === 'ns' ? fmtDur(v / 1e6) : `${fmtCount(v)} samples`;
}

export function fmtPct(x) {
	if (!isFinite(x)) return '–';
	return x >= 0.1 ? (x * 100).toFixed(1) + '%' : (x * 100).toFixed(2) + '%';
}

export function hash(s) {
	let h = 2166136261;
	for (let i = 0; i < s.length; i++) {
		h ^= s.charCodeAt(i);
		h = Math.imul(h, 16777619);
	}
	return h >>> 0;
}

// Escapes a label value for a selector string.
export const quote = (v) => '"' + String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"') + '"';

// Adds name="value" to a selector unless it already constrains `name`.
export function withMatcher(sel, name, value) {
	const s = (sel || '').trim();
	const inner = s.replace(/^\{/, '').replace(/\}$/, '').trim();
	if (new RegExp(`(^|[{,\\s])${name}\\s*(=|!=|=~|!~)`).test(inner)) return s;
	const m = `${name}=${quote(value)}`;
	return inner ? `{${m},${inner}}` : `{${m}}`;
}

export function debounce(fn, ms) {
	let t = 0;
	return (...a) => {
		clearTimeout(t);
		t = setTimeout(() => fn(...a), ms);
	};
}

// Index of the last element of the sorted array `a` whose key is <= x (-1 if none).
export function bisect(a, x, key = (v) => v) {
	let lo = 0, hi = a.length - 1, r = -1;
	while (lo <= hi) {
		const m = (lo + hi) >> 1;
		if (key(a[m]) <= x) {
			r = m;
			lo = m + 1;
		} else hi = m - 1;
	}
	return r;
}
