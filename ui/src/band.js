// SPDX-License-Identifier: Apache-2.0
// The GPU busy/idle band of the timeline: busy ranges (gpu_busy), idle ranges coloured by the
// source that decided them (gpu_observed, label source: kernels / gpm / nvml), the duty-cycle
// trace windows (source=kernels, reason budget|continuous) outlined, since GPU-idle answers
// let their idle samples stand for the undecided time near them, and time no source observed
// hatched as unknown. timeline.js draws the lanes; this file knows what a band means.
import { bisect, fmtDur, fmtTime } from './util.js';

export const BUSY = '#40c057';
// Highest first: where sources overlap, the first one decided (docs/efficiency.md's ranks).
export const SOURCES = [
	['kernels', '#f08c8c', 'kernels (trace window)'],
	['gpm', '#ffb366', 'GPM'],
	['nvml', '#ffe066', 'NVML'],
	['', '#f8d7d3', 'a source it does not name'],
];
const COLOR = new Map(SOURCES.map(([s, c]) => [s, c]));
const NAME = new Map(SOURCES.map(([s, , n]) => [s, n]));
export const WINDOW = '#5f3dc4';	// outline of a duty-cycle window
const UNLOADED = '#dee2e6';
// How far a duty-cycle window's idle samples reach, and the undecided time of its own a window
// needs to stand for any (src/server/store/idle_est.h).
export const REACH_MS = 120e3, MIN_OWN_MS = 100;

export const isDuty = (o) => o.src === 'kernels' && (o.reason === 'budget' || o.reason === 'continuous');
const srcOf = (o) => (COLOR.has(o.src) ? o.src : '');

// The diagonal hatch of unknown time, one pattern per canvas context.
const hatches = new WeakMap();
export function hatch(c) {
	if (!hatches.has(c)) {
		const t = document.createElement('canvas');
		t.width = t.height = 6;
		const g = t.getContext('2d');
		g.fillStyle = '#f1f3f5';
		g.fillRect(0, 0, 6, 6);
		g.strokeStyle = '#9aa1a9';
		g.lineWidth = 1.4;
		g.beginPath();
		for (const o of [-6, 0, 6]) {
			g.moveTo(o, 6);
			g.lineTo(o + 6, 0);
		}
		g.stroke();
		hatches.set(c, c.createPattern(t, 'repeat'));
	}
	return hatches.get(c);
}

// The legend of the band's head row: [text, fill (a colour or 'hatch'), outline?].
export const LEGEND = [
	['busy', BUSY],
	...SOURCES.filter(([s]) => s).map(([s, c, n]) => [`idle: ${n.replace(' (trace window)', '')}`, c]),
	['duty-cycle window (estimates)', null, WINDOW],
	['unknown (no source)', 'hatch'],
];

// Union of intervals sorted by start: [{s, e, first}] (first: the first interval of each piece).
function merged(items) {
	const out = [];
	for (const it of items) {
		const last = out[out.length - 1];
		if (last && it.s <= last.e) last.e = Math.max(last.e, it.e);
		else out.push({ s: it.s, e: it.e, first: it });
	}
	return out;
}

// Length of [a, b) covered by m (merged).
function covered(m, a, b) {
	let sum = 0;
	for (let i = Math.max(0, bisect(m, a, (v) => v.s)); i < m.length && m[i].s < b; i++)
		sum += Math.max(0, Math.min(b, m[i].e) - Math.max(a, m[i].s));
	return sum;
}

// A band's data from the loaded intervals: busy {s, e, src} and observed {s, e, src, reason},
// each sorted by start; loadedTo: the time after which the answers were cut off (limit).
// stand: the duty-cycle windows (merged) that the estimator lets stand for undecided time, as
// idle_est.c picks them: enough undecided time of their own, not only the driver's counters.
export function makeBand(busy, observed, extent, loadedTo) {
	const bySrc = new Map(SOURCES.map(([s]) => [s, []]));
	for (const o of observed) bySrc.get(srcOf(o)).push(o);
	const longest = (v) => v.reduce((m, x) => Math.max(m, x.e - x.s), 0);
	const duty = observed.filter(isDuty), exact = merged(observed.filter((o) => !isDuty(o)));
	const stand = merged(duty).filter((w) => w.e - w.s - covered(exact, w.s, w.e) >= MIN_OWN_MS);
	const reach = merged(stand.map((w) => ({ s: w.s - REACH_MS, e: w.e + REACH_MS })));
	return { items: busy, obs: observed, bySrc, duty, stand, decided: merged(observed), reach, maxLen: longest(observed),
		busyLen: longest(busy), extent, loadedTo };
}

// [a, b) pieces of [from, to) that m (merged) leaves uncovered.
function gaps(m, from, to) {
	const out = [];
	let t = from;
	for (let i = Math.max(0, bisect(m, from, (v) => v.s)); i < m.length && t < to; i++) {
		if (m[i].s > t) out.push([t, Math.min(m[i].s, to)]);
		t = Math.max(t, m[i].e);
	}
	if (t < to) out.push([t, to]);
	return out;
}

// What a GPU-idle answer leaves out of [from, to) besides busy time: time no source observed
// and no duty-cycle window stands for (unknown: not counted), as [a, b) pieces.
export function leftOut(r, from, to) {
	const out = [];
	for (const [a, b] of gaps(r.decided, from, to)) out.push(...gaps(r.reach, a, b));
	return out;
}

// Fills items [{s, e}] (sorted) of one colour on the lane y..y+h, merging what touches per pixel.
function fill(c, items, x0, x1, from, to, k, y, h, style) {
	let lx0 = 0, lx1 = -1;
	c.fillStyle = style;
	const flush = () => {
		if (lx1 > lx0) c.fillRect(lx0, y, Math.max(lx1 - lx0, 1), h);
	};
	for (let i = Math.max(0, bisect(items, from, (v) => v.s) - 1); i < items.length; i++) {
		const it = items[i];
		if (it.s > to) break;
		if (it.e < from) continue;
		const a = Math.max(x0 - 1, x0 + (it.s - from) * k), b = Math.min(x1 + 1, x0 + (it.e - from) * k);
		if (a <= lx1 + 0.75) {
			lx1 = Math.max(lx1, b);
		} else {
			flush();
			lx0 = a;
			lx1 = Math.max(b, a + 0.6);
		}
	}
	flush();
}

// Draws band r (makeBand + the row's y) on c; x0..x1 the plot, k pixels per ms.
export function drawBand(c, r, x0, x1, from, to, k, h) {
	const X = (t) => x0 + (t - from) * k;
	const end = Math.min(to, r.loadedTo ?? Infinity);
	if (r.extent) {
		// where the GPU is known to exist and no source observed it: unknown
		const a = Math.max(x0, X(r.extent[0])), b = Math.min(x1, X(Math.min(r.extent[1], end)));
		if (b > a) {
			c.fillStyle = hatch(c);
			c.fillRect(a, r.y, b - a, h);
		}
	}
	if (end < to) {
		c.fillStyle = UNLOADED;
		c.fillRect(Math.max(x0, X(end)), r.y, x1 - Math.max(x0, X(end)), h);
	}
	for (const [s, col] of [...SOURCES].reverse()) fill(c, r.bySrc.get(s), x0, x1, from, to, k, r.y, h, col);
	fill(c, r.items, x0, x1, from, to, k, r.y, h, BUSY);
	// duty-cycle windows outlined (windows closer than 2 px drawn as one)
	c.strokeStyle = WINDOW;
	c.lineWidth = 1.5;
	let wa = 0, wb = -Infinity;
	const outline = () => {
		if (wb > -Infinity) c.strokeRect(wa + 0.75, r.y + 0.75, Math.max(wb - wa - 1.5, 0.5), h - 1.5);
	};
	for (let i = Math.max(0, bisect(r.duty, from, (v) => v.s) - 1); i < r.duty.length; i++) {
		const w = r.duty[i];
		if (w.s > to) break;
		if (w.e < from) continue;
		const a = X(w.s), b = Math.max(X(w.e), a + 2);
		if (a <= wb + 2) {
			wb = Math.max(wb, b);
		} else {
			outline();
			wa = a;
			wb = b;
		}
	}
	outline();
}

// The intervals of `items` (sorted by start, none longer than maxLen) that hold t, within slack.
function holding(items, t, slack, maxLen) {
	const out = [];
	for (let i = bisect(items, t + slack, (v) => v.s); i >= 0; i--) {
		const it = items[i];
		if (it.s < t - slack - maxLen) break;
		if (it.s - slack <= t && it.e + slack >= t) out.push(it);
	}
	return out;
}

// What band r says at t: { state: busy | idle | unknown | unloaded | none, busy, obs (the
// deciding observation), others (other sources observing t), near (the closest duty-cycle
// window within reach, for unknown time) }.
export function bandAt(r, t, slack = 0) {
	if (r.loadedTo !== undefined && t > r.loadedTo) return { state: 'unloaded' };
	const busyLen = r.busyLen;
	const b = holding(r.items, t, 0, busyLen)[0] || null;
	const obs = holding(r.obs, t, 0, r.maxLen);
	const rank = (o) => SOURCES.findIndex(([s]) => s === srcOf(o));
	obs.sort((x, y) => rank(x) - rank(y) || (isDuty(x) ? 1 : 0) - (isDuty(y) ? 1 : 0));
	const at = { busy: b, obs: obs[0] || null, others: [...new Set(obs.slice(1).map(srcOf))].filter((s) => s !== srcOf(obs[0] || {})) };
	if (b) return { ...at, state: 'busy' };
	if (obs.length) return { ...at, state: 'idle' };
	if (!r.extent || t < r.extent[0] || t > r.extent[1]) {
		// a pixel away from an edge: the nearest range (the pointer is not that precise)
		const near = slack > 0 && (holding(r.items, t, slack, busyLen)[0] || holding(r.obs, t, slack, r.maxLen)[0]);
		return near ? bandAt(r, Math.min(Math.max(t, near.s), near.e)) : { state: 'none' };
	}
	// the window standing for t: the nearest of those that stand for time (merged: disjoint)
	let near = null, dist = Infinity;
	const i = bisect(r.stand, t, (v) => v.s);
	for (const w of [r.stand[i], r.stand[i + 1]]) {
		const d = w ? (t < w.s ? w.s - t : Math.max(0, t - w.e)) : Infinity;
		if (d < dist) [near, dist] = [w.first, d];
	}
	return { ...at, state: 'unknown', near: dist <= REACH_MS ? { w: near, dist } : null };
}

// The tooltip of a band at t: [title, rows, swatch colour].
export function bandTip(gpu, at, t) {
	const from = (x) => [['for', fmtDur(x.e - x.s)], ['from', fmtTime(x.s, 1)]];
	const decided = (o) => (o ? [['decided by', NAME.get(srcOf(o))], ...(o.reason ? [['window', `${o.reason}${isDuty(o) ? ' (duty cycle)' : ''}`]] : [])] : []);
	const also = at.others && at.others.length ? [['also observed by', at.others.map((s) => NAME.get(s)).join(', ')]] : [];
	switch (at.state) {
	case 'busy':
		return [`${gpu} busy`, [...(at.busy.src ? [['source', NAME.get(srcOf(at.busy))]] : decided(at.obs)), ...from(at.busy)], BUSY];
	case 'idle': {
		const rows = [...decided(at.obs), ...also, ['observed', `${fmtDur(at.obs.e - at.obs.s)} from ${fmtTime(at.obs.s, 1)}`]];
		if (isDuty(at.obs)) rows.push(['estimate', `its idle samples also stand for undecided time up to ${REACH_MS / 1e3} s away`]);
		return [`${gpu} idle`, rows, COLOR.get(srcOf(at.obs))];
	}
	case 'unknown':
		return [`${gpu}: unknown`, [['at', fmtTime(t, 1)], ['why', 'no source observed it (no trace window, no GPM or NVML reading at 0 or 100 %)'],
			at.near ? ['estimate', `GPU-idle answers count it from the duty-cycle window ${fmtDur(at.near.dist)} away (${at.near.w.reason})`]
				: ['estimate', `no duty-cycle window within ${REACH_MS / 1e3} s: left out of GPU-idle answers`]], 'hatch'];
	case 'unloaded':
		return [`${gpu}: not loaded`, [['why', 'more busy/idle intervals than one answer holds: zoom in to see them']], UNLOADED];
	default:
		return [`${gpu}: no data`, [['at', fmtTime(t, 1)]], null];
	}
}
