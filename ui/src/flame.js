// SPDX-License-Identifier: Apache-2.0
// Icicle flame graph on a canvas: root on top, callees below, width = value. The tree is
// flattened once into typed arrays in pre-order (so a subtree is a contiguous index range);
// drawing walks that order and skips any subtree narrower than a pixel, so a 100 000-node tree
// draws in a few milliseconds. Click zooms to a frame (animated), search highlights matches
// and reports their share, the tooltip shows self and total. Diff trees (value = range A,
// value2 = range B) are coloured red (grew) / blue (shrank) by the change in share.
import { hash, fmtValue, fmtPct, el } from './util.js';

const ROW = 18;
const FONT = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

const PALETTES = {
	cpu: [8, 42, 78, 58],		// hue from, hue span, saturation, lightness
	offcpu_ns: [198, 40, 62, 64],
	gpu_kernel_ns: [88, 55, 52, 56],
	cuda_sync_ns: [262, 40, 50, 68],
};

// '#rrggbb' of an HSL colour: a canvas parses hex fill styles faster than hsl() strings.
function hslHex(h, s, l) {
	s /= 100;
	l /= 100;
	const k = (n) => (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
	const f = (n) => Math.round(255 * (l - a * Math.max(-1, Math.min(k(n) - 3, 9 - k(n), 1))));
	return '#' + [f(0), f(8), f(4)].map((v) => v.toString(16).padStart(2, '0')).join('');
}

export class Flame {
	constructor(root, { onFocus, onHover, onClickFrame } = {}) {
		this.root = root;
		this.onFocus = onFocus || (() => {});
		this.onHover = onHover || (() => {});
		this.canvas = el('canvas', { class: 'flame-canvas' });
		this.tip = el('div', { class: 'tooltip hidden' });
		root.append(this.canvas);
		document.body.append(this.tip);
		this.ctx = this.canvas.getContext('2d');
		this.n = 0;
		this.renders = 0;
		this.lastRenderMs = 0;
		this.range = [0, 1];
		this.focusIdx = 0;
		this.hover = -1;
		this.anim = 0;
		this.canvas.addEventListener('mousemove', (e) => this.mousemove(e));
		this.canvas.addEventListener('mouseleave', () => this.hideTip());
		this.canvas.addEventListener('click', (e) => {
			const i = this.hit(e);
			if (i >= 0) this.zoomTo(i === this.focusIdx ? this.parent[i] < 0 ? 0 : this.parent[i] : i);
		});
		new ResizeObserver(() => this.resize()).observe(root);
	}

	// tree: {name, value, self, value2?, children}; opts: {unit, kind, diff}
	setTree(tree, { unit = 'samples', kind = 'cpu', diff = false, focus = '' } = {}) {
		this.unit = unit;
		this.kind = kind;
		this.diff = diff;
		const names = [], nameIdx = new Map();
		// count nodes first to size the arrays
		const countOf = (t) => {
			let c = 1;
			if (t.children) for (const x of t.children) c += countOf(x);
			return c;
		};
		const n = countOf(tree);
		this.n = n;
		this.name = new Int32Array(n);
		this.depth = new Uint16Array(n);
		this.start = new Float64Array(n);
		this.value = new Float64Array(n);
		this.self = new Float64Array(n);
		this.value2 = new Float64Array(n);
		this.valueA = diff ? new Float64Array(n) : null;
		this.parent = new Int32Array(n);
		this.end = new Int32Array(n);	// index one past the subtree
		this.match = new Uint8Array(n);
		let i = 0, maxDepth = 0;
		// diff: width is the mean of the two ranges' shares, so neither range's length dominates
		const ta = tree.value || 1, tb = tree.value2 || 1;
		const wv = diff ? (t) => ((t.value || 0) / ta + (t.value2 || 0) / tb) / 2 : (t) => t.value || 0;
		const cmp = (a, b) => wv(b) - wv(a) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
		// pre-order, widest child first (children are sorted in place)
		const rec = (t, d, p, s) => {
			const k = i++;
			let ni = nameIdx.get(t.name);
			if (ni === undefined) {
				ni = names.length;
				names.push(t.name);
				nameIdx.set(t.name, ni);
			}
			this.name[k] = ni;
			this.depth[k] = d;
			this.start[k] = s;
			this.value[k] = wv(t);
			this.self[k] = t.self || 0;
			this.value2[k] = t.value2 || 0;
			if (diff) this.valueA[k] = t.value || 0;
			this.parent[k] = p;
			if (d > maxDepth) maxDepth = d;
			const kids = t.children;
			if (kids && kids.length) {
				if (kids.length > 1) kids.sort(cmp);
				let off = s;
				for (const c of kids) {
					rec(c, d + 1, k, off);
					off += wv(c);
				}
			}
			this.end[k] = i;
		};
		rec(tree, 0, -1, 0);
		this.names = names;
		this.colors = new Array(names.length);
		this.maxDepth = maxDepth;
		this.raw = tree;
		if (diff) {
			this.totA = tree.value || 0;
			this.totB = tree.value2 || 0;
			let maxd = 0;
			this.delta = new Float64Array(n);
			for (let q = 0; q < n; q++) {
				const dd = (this.totB ? this.value2[q] / this.totB : 0) - (this.totA ? this.valueA[q] / this.totA : 0);
				this.delta[q] = dd;
				maxd = Math.max(maxd, Math.abs(dd));
			}
			// full colour from a 10-point change: a small difference stays faint
			this.maxDelta = Math.max(maxd, 0.10);
		}
		this.focusIdx = 0;
		if (focus) this.focusIdx = this.findPath(focus.split(';'));
		this.range = [this.start[this.focusIdx], this.start[this.focusIdx] + this.value[this.focusIdx]];
		if (this.query) this.search(this.query);
		this.resize();
	}

	path(i) {
		const p = [];
		for (; i > 0; i = this.parent[i]) p.push(this.names[this.name[i]]);
		return p.reverse();
	}

	findPath(parts) {
		let i = 0;
		for (const name of parts) {
			let found = -1;
			for (let c = i + 1; c < this.end[i]; c = this.end[c]) {
				if (this.names[this.name[c]] === name) {
					found = c;
					break;
				}
			}
			if (found < 0) break;
			i = found;
		}
		return i;
	}

	resize() {
		const dpr = window.devicePixelRatio || 1;
		const w = Math.max(200, this.root.clientWidth);
		const h = Math.max(ROW * 4, (this.maxDepth + 1) * ROW + 4);
		this.w = w;
		this.h = h;
		this.canvas.width = Math.round(w * dpr);
		this.canvas.height = Math.round(h * dpr);
		this.canvas.style.width = w + 'px';
		this.canvas.style.height = h + 'px';
		this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
		this.draw();
	}

	color(i) {
		if (this.diff) {
			const d = this.delta[i] / this.maxDelta;
			const a = Math.min(1, Math.abs(d));
			if (Math.abs(this.delta[i]) < 1e-9) return '#e5e7eb';
			const l = Math.round(92 - a * 40);
			return d > 0 ? hslHex(0, 75, l) : hslHex(215, 75, l);
		}
		const ni = this.name[i];
		let c = this.colors[ni];
		if (c === undefined) {
			const [h0, span, s, l] = PALETTES[this.kind] || PALETTES.cpu;
			const x = hash(this.names[ni]);
			c = this.colors[ni] = hslHex(h0 + (x % span), s, l + ((x >> 8) % 12) - 4);
		}
		return c;
	}

	draw() {
		const t0 = performance.now();
		const ctx = this.ctx, w = this.w;
		ctx.clearRect(0, 0, w, this.h);
		if (!this.n) return;
		const [a, b] = this.range;
		const k = w / (b - a || 1);
		const fd = this.depth[this.focusIdx];
		const searching = !!this.query;
		ctx.font = FONT;
		ctx.textBaseline = 'middle';
		const cw = this.charW || (this.charW = ctx.measureText('abcdefghijklmnopqrstuvwxyz_:.').width / 29);
		// frames narrower than this are skipped with their subtree (coarser while animating)
		const minW = this.animating ? 1.5 : 0.5;
		let drawn = 0, lastFill = null;
		ctx.globalAlpha = 1;
		for (let i = 0; i < this.n;) {
			const s = this.start[i], v = this.value[i];
			const x0 = (s - a) * k, x1 = (s + v - a) * k;
			if (x1 - x0 < minW || x1 <= 0 || x0 >= w || v <= 0) {
				i = this.end[i];	// skip the subtree: every child is narrower / outside
				continue;
			}
			const cx0 = Math.max(0, x0), cx1 = Math.min(w, x1);
			const y = this.depth[i] * ROW;
			let fill = this.color(i);
			if (searching && !this.match[i]) fill = this.diff ? fill : '#e5e7eb';
			if (searching && this.match[i] && !this.diff) fill = '#d946ef';
			const alpha = this.depth[i] < fd ? 0.55 : 1;
			if (alpha !== ctx.globalAlpha) ctx.globalAlpha = alpha;
			if (fill !== lastFill) ctx.fillStyle = lastFill = fill;
			ctx.fillRect(cx0, y, Math.max(cx1 - cx0 - (cx1 - cx0 > 2 ? 1 : 0), 0.5), ROW - 1);
			if (i === this.hover) {
				ctx.strokeStyle = '#111827';
				ctx.lineWidth = 1;
				ctx.strokeRect(cx0 + 0.5, y + 0.5, cx1 - cx0 - 2, ROW - 2);
			}
			const tw = cx1 - cx0 - 6;
			if (tw > 3 * cw && !this.animating) {	// labels on the final frame of a zoom only
				const name = this.names[this.name[i]];
				const max = Math.floor(tw / cw);
				ctx.fillStyle = lastFill = '#111827';
				ctx.fillText(name.length > max ? name.slice(0, max - 1) + '…' : name, cx0 + 3, y + ROW / 2 + 0.5);
			}
			drawn++;
			i++;
		}
		ctx.globalAlpha = 1;
		this.drawn = drawn;
		this.renders++;
		this.lastRenderMs = performance.now() - t0;
		this.root.dataset.renders = String(this.renders);
	}

	zoomTo(i, animate = true) {
		this.focusIdx = i;
		const target = [this.start[i], this.start[i] + this.value[i]];
		this.onFocus(i ? this.path(i).join(';') : '');
		cancelAnimationFrame(this.anim);
		if (!animate) {
			this.range = target;
			this.draw();
			return Promise.resolve();
		}
		const from = this.range.slice(), t0 = performance.now(), dur = 220;
		return new Promise((done) => {
			const step = (now) => {
				const p = Math.min(1, (now - t0) / dur), e = 1 - Math.pow(1 - p, 3);
				this.range = [from[0] + (target[0] - from[0]) * e, from[1] + (target[1] - from[1]) * e];
				this.animating = p < 1;
				this.draw();
				if (p < 1) this.anim = requestAnimationFrame(step);
				else done();
			};
			this.anim = requestAnimationFrame(step);
		});
	}

	// Marks frames matching `q` (a regular expression, or plain text if it is not one); returns
	// the share of the focused total held by matching frames (nested matches counted once).
	search(q) {
		this.query = q || '';
		this.match.fill(0);
		if (!this.n || !this.query) {
			this.draw();
			return null;
		}
		let re;
		try {
			re = new RegExp(this.query, 'i');
		} catch (e) {
			re = new RegExp(this.query.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
		}
		const hit = this.names.map((s) => re.test(s));
		let sum = 0, sum2 = 0;
		for (let i = 0; i < this.n;) {
			if (hit[this.name[i]]) {
				for (let j = i; j < this.end[i]; j++) if (hit[this.name[j]]) this.match[j] = 1;
				sum += this.diff ? this.valueA[i] : this.value[i];
				sum2 += this.value2[i];
				i = this.end[i];
			} else i++;
		}
		this.draw();
		const tot = this.diff ? this.totA : this.value[0];
		return { value: sum, share: tot ? sum / tot : 0, share2: this.diff && this.totB ? sum2 / this.totB : null };
	}

	hit(e) {
		const r = this.canvas.getBoundingClientRect();
		const x = e.clientX - r.left, y = e.clientY - r.top;
		const d = Math.floor(y / ROW);
		const [a, b] = this.range;
		const v = a + (x / this.w) * (b - a);
		// descend from the root along the frame containing v
		let i = 0;
		if (d === 0) return v >= this.start[0] && v <= this.start[0] + this.value[0] ? 0 : -1;
		for (let depth = 0; depth < d; depth++) {
			let next = -1;
			for (let c = i + 1; c < this.end[i]; c = this.end[c]) {
				if (v >= this.start[c] && v < this.start[c] + this.value[c]) {
					next = c;
					break;
				}
			}
			if (next < 0) return -1;
			i = next;
		}
		return i;
	}

	mousemove(e) {
		const i = this.hit(e);
		if (i !== this.hover) {
			this.hover = i;
			this.draw();
		}
		if (i < 0) return this.hideTip();
		const name = this.names[this.name[i]];
		const u = this.unit;
		const rows = [];
		if (this.diff) {
			const a = this.valueA[i], b2 = this.value2[i];
			const sa = this.totA ? a / this.totA : 0, sb = this.totB ? b2 / this.totB : 0;
			rows.push(['baseline (A)', `${fmtValue(a, u)} · ${fmtPct(sa)}`]);
			rows.push(['selection (B)', `${fmtValue(b2, u)} · ${fmtPct(sb)}`]);
			rows.push(['change', `${sb - sa >= 0 ? '+' : ''}${((sb - sa) * 100).toFixed(2)} pts`]);
		} else {
			const root = this.value[0], f = this.value[this.focusIdx];
			rows.push(['total', `${fmtValue(this.value[i], u)} · ${fmtPct(this.value[i] / root)}` +
				(this.focusIdx ? ` (${fmtPct(this.value[i] / f)} of zoom)` : '')]);
			rows.push(['self', `${fmtValue(this.self[i], u)} · ${fmtPct(this.self[i] / root)}`]);
		}
		this.tip.replaceChildren(el('div', { class: 'tip-title' }, name),
			...rows.map(([k, v]) => el('div', { class: 'tip-row' }, el('span', {}, k), el('b', {}, v))),
			el('div', { class: 'tip-hint' }, i === this.focusIdx && i ? 'click to zoom out' : 'click to zoom in'));
		this.tip.classList.remove('hidden');
		const tw = this.tip.offsetWidth, th = this.tip.offsetHeight;
		let x = e.clientX + 14, y = e.clientY + 14;
		if (x + tw > innerWidth - 8) x = e.clientX - tw - 14;
		if (y + th > innerHeight - 8) y = e.clientY - th - 14;
		this.tip.style.left = x + 'px';
		this.tip.style.top = y + 'px';
	}

	hideTip() {
		this.tip.classList.add('hidden');
		if (this.hover >= 0) {
			this.hover = -1;
			this.draw();
		}
	}

	// For tests and the benchmark: the frames as drawn, widest first.
	frames(limit = 50) {
		const out = [];
		const tot = this.value[this.focusIdx] || 1;
		for (let i = 0; i < this.n; i++)
			out.push({ name: this.names[this.name[i]], path: this.path(i).join(';'), depth: this.depth[i],
				share: this.value[i] / tot, self: this.self[i] / tot });
		return out.sort((x, y) => y.share - x.share || x.depth - y.depth).slice(0, limit);
	}
}

// Per-function totals of a flame tree: self = sum of self; total = value summed over frames
// without an ancestor of the same name (recursion counted once).
export function topFunctions(tree, diff = false) {
	const m = new Map();
	const onPath = new Map();
	const walk = (t, isRoot) => {
		const name = t.name;
		let e = m.get(name);
		if (!e) m.set(name, (e = { name, self: 0, total: 0, self2: 0, total2: 0 }));
		const first = !onPath.get(name);
		if (!isRoot) {
			e.self += t.self || 0;
			e.self2 += t.self2 || 0;
			if (first) {
				e.total += t.value || 0;
				e.total2 += t.value2 || 0;
			}
		}
		onPath.set(name, (onPath.get(name) || 0) + 1);
		for (const c of t.children || []) walk(c, false);
		onPath.set(name, onPath.get(name) - 1);
	};
	walk(tree, true);
	m.delete(tree.name);
	return [...m.values()];
}
