// SPDX-License-Identifier: Apache-2.0
// The timeline: a time axis, GPU metric panels drawn by uPlot, and one canvas of lanes (GPU
// busy/idle band, kernel lanes per stream, a CPU strip per thread), all sharing one x mapping
// (LEFT gutter, then the plot). Drag selects a range (the flame graph follows), ctrl/shift +
// wheel zooms around the pointer, hover shows values, kernel names and thread states.
import uPlot from 'uplot';
import { el, fmtTime, fmtDur, fmtBytes, bisect, hash } from './util.js';
import { makeBand, drawBand, bandAt, bandTip, hatch, leftOut, LEGEND } from './band.js';

export const LEFT = 150, RIGHT = 14;
const ROW = 15, GAP = 3, HEAD = 20;

export const STATE_COLORS = { running: '#2f9e44', runnable: '#f59f00', blocked: '#4c6ef5' };
const STATE_LEGEND = Object.entries(STATE_COLORS);

const PANELS = [
	{ id: 'util', title: 'GPU activity', fmt: (v) => `${Math.round(v)}%`,
		range: () => [0, 100], series: [
			{ key: 'util', label: 'utilization', color: '#1c7ed6', fill: 'rgba(28,126,214,0.10)' },
			{ key: 'sm', label: 'SM active', color: '#e8590c' },
			{ key: 'tensor', label: 'tensor active', color: '#9c36b5' }] },
	{ id: 'mem', title: 'Memory used', fmt: (v) => fmtBytes(v), range: (mn, mx) => [0, Math.max(mx, 1)],
		series: [
			{ key: 'used', label: 'used', color: '#0c8599', fill: 'rgba(12,133,153,0.12)' },
			{ key: 'total', label: 'total', color: '#adb5bd', dash: [4, 4] }] },
	{ id: 'power', title: 'Power', fmt: (v) => `${Math.round(v)} W`, range: (mn, mx) => [0, Math.max(mx * 1.1, 1)],
		series: [
			{ key: 'pmax', label: 'max', color: 'rgba(240,62,62,0.35)', width: 0.75 },
			{ key: 'pmin', label: 'min', color: 'rgba(240,62,62,0.35)', width: 0.75 },
			{ key: 'power', label: 'power', color: '#e03131' }],
		bands: [{ series: [1, 2], fill: 'rgba(240,62,62,0.12)' }] },
	{ id: 'cpu', title: 'CPU samples / s', fmt: (v) => (v >= 100 ? Math.round(v) : v.toPrecision(2)) + '/s',
		range: (mn, mx) => [0, Math.max(mx * 1.1, 1)], series: [
			{ key: 'node', label: 'node', color: '#495057', fill: 'rgba(73,80,87,0.12)' },
			{ key: 'proc', label: 'process', color: '#2f9e44', fill: 'rgba(47,158,68,0.22)' }] },
];

function timeStep(spanMs, px) {
	const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 10e3, 15e3, 30e3, 60e3, 120e3,
		300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3];
	const want = spanMs / Math.max(2, px / (spanMs >= 12 * 3600e3 ? 140 : 110));
	for (const s of steps) if (s >= want) return s;
	return steps[steps.length - 1];
}

export class Timeline {
	constructor(root, { onBrush, onView, stackOf } = {}) {
		this.root = root;
		this.onBrush = onBrush || (() => {});
		this.onView = onView || (() => {});
		this.stackOf = stackOf || (async () => null);
		this.from = 0;
		this.to = 1;
		this.brush = null;
		this.data = null;
		this.plots = [];
		this.rows = [];
		root.classList.add('timeline');
		this.axis = el('canvas', { class: 'tl-axis' });
		this.panelBox = el('div', { class: 'tl-panels' });
		this.lanes = el('canvas', { class: 'tl-lanes' });
		this.note = el('div', { class: 'tl-note hidden' });
		this.overlay = el('div', { class: 'tl-overlay' });
		this.brushEl = el('div', { class: 'tl-brush hidden' }, el('span', { class: 'tag' }));
		this.baseEl = el('div', { class: 'tl-base hidden' }, el('span', { class: 'tag' }, 'A'));
		this.hair = el('div', { class: 'tl-hair hidden' });
		this.mask = el('canvas', { class: 'tl-mask hidden' });
		this.overlay.append(this.mask, this.baseEl, this.brushEl, this.hair);
		this.tip = el('div', { class: 'tooltip hidden' });
		document.body.append(this.tip);
		root.append(this.axis, this.panelBox, this.note, this.lanes, this.overlay);
		this.bind();
		new ResizeObserver(() => this.layout()).observe(root);
	}

	get plotW() {
		return Math.max(50, this.root.clientWidth - LEFT - RIGHT);
	}
	xOf(t) {
		return LEFT + ((t - this.from) / (this.to - this.from)) * this.plotW;
	}
	tOf(x) {
		return this.from + ((x - LEFT) / this.plotW) * (this.to - this.from);
	}

	setView(from, to) {
		this.from = from;
		this.to = to;
		for (const p of this.plots) p.u.setScale('x', { min: from, max: to });
		this.drawAxis();
		this.drawLanes();
		this.drawBrush();
	}

	setBrush(b) {
		this.brush = b;
		this.drawBrush();
	}

	setData(d) {
		this.data = d;
		this.buildPanels();
		this.buildRows();
		this.layout();
	}

	buildPanels() {
		for (const p of this.plots) p.u.destroy();
		this.plots = [];
		this.panelBox.replaceChildren();
		const m = this.data && this.data.metrics;
		if (!m) return;
		for (const def of PANELS) {
			const cols = m[def.id];
			if (!cols || !cols.x.length) continue;
			const head = el('div', { class: 'panel-head' });
			const title = el('span', { class: 'panel-title' }, def.title);
			const legend = el('span', { class: 'panel-legend' });
			head.append(title, legend);
			const chart = el('div', { class: 'panel-chart' });
			const box = el('div', { class: 'panel', 'data-panel': def.id }, head, chart);
			this.panelBox.append(box);
			const series = [{}];
			for (const s of def.series)
				series.push({ label: s.label, stroke: s.color, width: s.width || 1.5, fill: s.fill, dash: s.dash,
					points: { show: false }, spanGaps: false });
			const data = [cols.x, ...def.series.map((s) => cols[s.key] || cols.x.map(() => null))];
			const u = new uPlot({
				width: this.root.clientWidth, height: 80,
				cursor: { show: false }, legend: { show: false }, select: { show: false },
				padding: [9, RIGHT, 4, 0],
				scales: {
					x: { time: false, auto: false, range: () => [this.from, this.to] },
					y: { range: (u, mn, mx) => def.range(mn, mx) },
				},
				axes: [{ show: false }, {
					size: LEFT, gap: 6, font: '11px system-ui, sans-serif', stroke: '#868e96',
					grid: { stroke: '#f1f3f5', width: 1 }, ticks: { show: false },
					values: (u, vals) => vals.map((v) => def.fmt(v)), splits: (u, i, mn, mx) => [mn, (mn + mx) / 2, mx],
				}],
				series, bands: def.bands,
			}, data, chart);
			// keep the legend: swatches, and values under the pointer
			legend.replaceChildren(...def.series.filter((s) => !s.key.startsWith('pm')).map((s) =>
				el('span', { class: 'lg' }, el('i', { style: `background:${s.color}` }), (cols.labels && cols.labels[s.key]) || s.label,
					el('b', { 'data-key': s.key }, ''))));
			this.plots.push({ def, u, cols, legend });
		}
	}

	buildRows() {
		const d = this.data, rows = [];
		if (d && d.busy) {
			// one band per GPU of the node (an overview), the selected one first-class
			rows.push({ head: 'GPU busy / idle', legend: LEGEND });
			const all = d.busyAll && d.busyAll.length ? d.busyAll : [[d.gpuLabel.replace('GPU ', ''), d.busy]];
			let ext = d.busyExtent;
			for (const [, items] of all) if (items.length) {
				const a = items[0].s, b = items.reduce((m, x) => Math.max(m, x.e), -Infinity);
				ext = ext ? [Math.min(ext[0], a), Math.max(ext[1], b)] : [a, b];
			}
			const obsOf = (g) => (d.observedAll && d.observedAll.get(String(g))) || [];
			for (const [g] of all) for (const o of obsOf(g)) ext = ext ? [Math.min(ext[0], o.s), Math.max(ext[1], o.e)] : [o.s, o.e];
			for (const [g, items] of all) {
				const sel = `GPU ${g}` === d.gpuLabel;
				rows.push({ label: `GPU ${g}${sel ? ' ◂' : ''}`, gpu: `GPU ${g}`, kind: 'busy', selected: sel,
					...makeBand(sel ? d.busy : items, obsOf(g), ext, d.loadedTo) });
			}
		}
		if (d && d.gpuNote) rows.push({ head: 'GPU', note: d.gpuNote });
		if (d && d.kernelsNote) rows.push({ head: 'Kernels by stream', note: d.kernelsNote });
		if (d && d.threadsNote) rows.push({ head: d.procLabel || 'CPU threads', note: d.threadsNote });
		if (d && d.streams && d.streams.length) {
			rows.push({ head: `Kernels by stream${d.kernelsTruncated ? ' (more than shown: zoom in to see all)' : ''}` });
			for (const s of d.streams) rows.push({ label: s.label, kind: 'kernel', items: s.items });
		}
		if (d && d.threads && d.threads.length) {
			rows.push({ head: `${d.procLabel || 'Threads'}${d.threadsTruncated ? ' (more than shown: zoom in to see all)' : ''}`, legend: STATE_LEGEND });
			for (const t of d.threads) rows.push({ label: t.label, kind: 'thread', items: t.items });
		}
		let y = 0;
		for (const r of rows) {
			r.y = y;
			r.h = r.head ? HEAD : ROW;
			y += r.h + (r.head ? 0 : GAP);
		}
		this.rows = rows;
		this.lanesH = y + 4;
	}

	layout() {
		const w = this.root.clientWidth;
		for (const p of this.plots) p.u.setSize({ width: w, height: 80 });
		const dpr = window.devicePixelRatio || 1;
		const size = (c, h) => {
			c.width = Math.round(w * dpr);
			c.height = Math.round(h * dpr);
			c.style.width = w + 'px';
			c.style.height = h + 'px';
			c.getContext('2d').setTransform(dpr, 0, 0, dpr, 0, 0);
		};
		size(this.axis, 26);
		size(this.lanes, Math.max(this.lanesH || 0, 1));
		this.lanes.classList.toggle('hidden', !this.rows.length);
		this.drawAxis();
		this.drawLanes();
		this.drawBrush();
	}

	drawAxis() {
		const c = this.axis.getContext('2d'), w = this.root.clientWidth;
		c.clearRect(0, 0, w, 26);
		const span = this.to - this.from;
		if (!(span > 0)) return;
		const step = timeStep(span, this.plotW);
		c.font = '11px system-ui, sans-serif';
		c.fillStyle = '#495057';
		c.strokeStyle = '#ced4da';
		c.textAlign = 'center';
		c.textBaseline = 'top';
		const tz = new Date(this.from).getTimezoneOffset() * 60e3;
		let t = Math.ceil((this.from - (step >= 3600e3 ? -tz : 0)) / step) * step + (step >= 3600e3 ? -tz : 0);
		for (; t <= this.to; t += step) {
			const x = Math.round(this.xOf(t)) + 0.5;
			c.beginPath();
			c.moveTo(x, 18);
			c.lineTo(x, 26);
			c.stroke();
			// ticks a day or more apart, or views spanning days, name the date
			const d = new Date(t), date = `${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
			const label = span >= 12 * 3600e3 ? `${date} ${fmtTime(t, step).slice(0, 5)}` : fmtTime(t, step), hw = c.measureText(label).width / 2;
			if (x + hw <= w - 2 && x - hw >= LEFT - 40) c.fillText(label, x, 4);
		}
		c.textAlign = 'left';
		c.fillStyle = '#868e96';
		c.fillText(fmtDur(span) + ' shown', 8, 4);
		c.beginPath();
		c.moveTo(LEFT, 25.5);
		c.lineTo(w - RIGHT, 25.5);
		c.stroke();
	}

	drawLanes() {
		const c = this.lanes.getContext('2d'), w = this.root.clientWidth;
		c.clearRect(0, 0, w, this.lanesH || 0);
		const x0 = LEFT, x1 = w - RIGHT;
		const k = this.plotW / (this.to - this.from);
		c.font = '11px system-ui, sans-serif';
		c.textBaseline = 'middle';
		for (const r of this.rows) {
			if (r.head) {
				c.fillStyle = '#343a40';
				c.font = '600 11px system-ui, sans-serif';
				c.fillText(r.head, 8, r.y + HEAD / 2 + 2);
				c.font = '11px system-ui, sans-serif';
				if (r.note) {
					c.fillStyle = '#868e96';
					c.fillText(r.note, Math.max(LEFT, 24 + c.measureText(r.head).width + 24), r.y + HEAD / 2 + 2);
				}
				if (r.legend) {
					let lx = Math.max(LEFT, 16 + c.measureText(r.head).width + 24);
					for (const [s, col, outline] of r.legend) {
						if (col) {
							c.fillStyle = col === 'hatch' ? hatch(c) : col;
							c.fillRect(lx, r.y + 7, 10, 9);
						}
						if (outline) {
							c.strokeStyle = outline;
							c.lineWidth = 1.5;
							c.strokeRect(lx + 0.75, r.y + 7.75, 8.5, 7.5);
						}
						c.fillStyle = '#495057';
						c.fillText(s, lx + 14, r.y + HEAD / 2 + 2);
						lx += 24 + c.measureText(s).width;
					}
				}
				continue;
			}
			c.fillStyle = r.selected ? '#111827' : '#495057';
			c.font = r.selected ? '600 11px system-ui, sans-serif' : '11px system-ui, sans-serif';
			let label = r.label;
			while (label.length > 3 && c.measureText(label).width > LEFT - 16) label = label.slice(0, -2);
			if (label !== r.label) label += '…';
			c.fillText(label, 14, r.y + ROW / 2 + 0.5);
			c.font = '11px system-ui, sans-serif';
			c.fillStyle = '#f8f9fa';
			c.fillRect(x0, r.y, x1 - x0, ROW);
			c.save();
			c.beginPath();
			c.rect(x0, r.y, x1 - x0, ROW);
			c.clip();
			if (r.kind === 'busy') {
				// busy, idle by the source that decided it, duty-cycle windows, unknown hatched
				drawBand(c, r, x0, x1, this.from, this.to, k, ROW);
				c.restore();
				continue;
			}
			// intervals, merged per pixel when they touch and share a colour
			let lastCol = null, lx0 = 0, lx1 = -1;
			const flush = () => {
				if (lastCol !== null && lx1 > lx0) {
					c.fillStyle = lastCol;
					c.fillRect(lx0, r.y + (r.kind === 'kernel' ? 1 : 0), Math.max(lx1 - lx0, 1), ROW - (r.kind === 'kernel' ? 2 : 0));
				}
			};
			const items = r.items;
			let i = Math.max(0, bisect(items, this.from, (v) => v.s) - 1);
			for (; i < items.length; i++) {
				const it = items[i];
				if (it.s > this.to) break;
				if (it.e < this.from) continue;
				const a = x0 + (it.s - this.from) * k, b = x0 + (it.e - this.from) * k;
				const col = r.kind === 'thread' ? (STATE_COLORS[it.state] || '#adb5bd')
					: `hsl(${hash(it.name || '') % 360}, 55%, 55%)`;
				if (col === lastCol && a <= lx1 + 0.75) {
					lx1 = Math.max(lx1, b);
				} else {
					flush();
					lastCol = col;
					lx0 = a;
					lx1 = Math.max(b, a + 0.6);
				}
			}
			flush();
			// names of kernels wide enough to carry them
			if (r.kind === 'kernel' && k > 0) {
				c.fillStyle = '#fff';
				let i2 = Math.max(0, bisect(items, this.from, (v) => v.s));
				for (; i2 < items.length && items[i2].s <= this.to; i2++) {
					const it = items[i2];
					const a = Math.max(x0, x0 + (it.s - this.from) * k), b = Math.min(x1, x0 + (it.e - this.from) * k);
					if (b - a > 60) {
						const max = Math.floor((b - a - 6) / 6);
						c.fillText(it.name.length > max ? it.name.slice(0, max - 1) + '…' : it.name, a + 3, r.y + ROW / 2 + 0.5);
					}
				}
			}
			c.restore();
		}
	}

	// "only while the GPU was idle": veil what the flame graph leaves out: busy time, and time
	// no source observed that no duty-cycle window stands for
	setIdleMask(on) {
		this.idleMask = on;
		this.drawMask();
	}

	drawMask() {
		const busy = this.rows.find((r) => r.kind === 'busy' && r.selected) || this.rows.find((r) => r.kind === 'busy');
		const on = this.idleMask && busy;
		this.mask.classList.toggle('hidden', !on);
		if (!on) return;
		const w = this.root.clientWidth, h = this.root.clientHeight, dpr = window.devicePixelRatio || 1;
		this.mask.width = Math.round(w * dpr);
		this.mask.height = Math.round(h * dpr);
		this.mask.style.width = w + 'px';
		this.mask.style.height = h + 'px';
		const c = this.mask.getContext('2d');
		c.setTransform(dpr, 0, 0, dpr, 0, 0);
		c.fillStyle = 'rgba(100,116,139,0.22)';
		const veil = (s, e) => {
			const a = Math.max(LEFT, this.xOf(s)), b = Math.min(w - RIGHT, this.xOf(e));
			if (b > a) c.fillRect(a, 26, b - a, h - 26);
		};
		for (const it of busy.items) if (it.e >= this.from && it.s <= this.to) veil(it.s, it.e);
		for (const [a, b] of leftOut(busy, this.from, Math.min(this.to, busy.loadedTo ?? Infinity))) veil(a, b);
	}

	// range A of a comparison, drawn under the brush (which is then range B)
	setBaseline(b) {
		this.baseline = b;
		this.brushEl.firstChild.textContent = b ? 'B' : '';
		this.drawBrush();
	}

	drawBrush() {
		const place = (e, b) => {
			if (!b || b[1] <= this.from || b[0] >= this.to) {
				e.classList.add('hidden');
				return;
			}
			const a = Math.max(LEFT, this.xOf(b[0])), z = Math.min(this.root.clientWidth - RIGHT, this.xOf(b[1]));
			e.style.left = a + 'px';
			e.style.width = Math.max(1, z - a) + 'px';
			e.classList.remove('hidden');
		};
		place(this.brushEl, this.brush);
		place(this.baseEl, this.baseline);
		this.drawMask();
	}

	bind() {
		const root = this.root;
		let drag = null;
		const pos = (e) => {
			const r = root.getBoundingClientRect();
			return [e.clientX - r.left, e.clientY - r.top];
		};
		root.addEventListener('mousedown', (e) => {
			const [x] = pos(e);
			if (e.button !== 0 || x < LEFT || x > root.clientWidth - RIGHT) return;
			e.preventDefault();
			drag = { x0: x, x1: x };
		});
		window.addEventListener('mousemove', (e) => {
			const [x, y] = pos(e);
			if (drag) {
				drag.x1 = Math.max(LEFT, Math.min(root.clientWidth - RIGHT, x));
				const a = this.tOf(Math.min(drag.x0, drag.x1)), b = this.tOf(Math.max(drag.x0, drag.x1));
				this.brush = [a, b];
				this.drawBrush();
			}
			this.hover(e, x, y);
		});
		window.addEventListener('mouseup', () => {
			if (!drag) return;
			const d = drag;
			drag = null;
			if (Math.abs(d.x1 - d.x0) < 3) {
				this.brush = null;
				this.drawBrush();
				this.onBrush(null);
				return;
			}
			this.onBrush(this.brush.slice());
		});
		root.addEventListener('wheel', (e) => {
			if (!(e.ctrlKey || e.shiftKey || e.metaKey)) return;
			const [x] = pos(e);
			if (x < LEFT) return;
			e.preventDefault();
			const f = Math.exp((e.deltaY || e.deltaX) * 0.002);
			this.zoomAround(this.tOf(x), f);
		}, { passive: false });
		root.addEventListener('mouseleave', () => {
			this.hair.classList.add('hidden');
			this.tip.classList.add('hidden');
			for (const p of this.plots) for (const b of p.legend.querySelectorAll('b')) b.textContent = '';
		});
	}

	zoomAround(t, f) {
		const span = Math.max(1, (this.to - this.from) * f);	// down to 1 ms across the plot
		const r = (t - this.from) / (this.to - this.from);
		const from = t - r * span;
		this.setView(from, from + span);
		this.onView(from, from + span);
	}

	hover(e, x, y) {
		const inside = x >= LEFT && x <= this.root.clientWidth - RIGHT && y >= 0 && y <= this.root.clientHeight;
		if (!inside) {
			this.hair.classList.add('hidden');
			this.tip.classList.add('hidden');
			return;
		}
		this.hair.style.left = x + 'px';
		this.hair.classList.remove('hidden');
		const t = this.tOf(x);
		for (const p of this.plots) {
			const i = bisect(p.cols.x, t);
			for (const b of p.legend.querySelectorAll('b')) {
				const v = i >= 0 ? p.cols[b.dataset.key][i] : null;
				b.textContent = v === null || v === undefined ? '' : ' ' + p.def.fmt(v);
			}
		}
		// lanes
		const lr = this.lanes.getBoundingClientRect(), rr = this.root.getBoundingClientRect();
		const ly = y - (lr.top - rr.top);
		const row = this.rows.find((r) => !r.head && ly >= r.y && ly < r.y + ROW);
		if (!row) {
			this.tip.classList.add('hidden');
			return;
		}
		const slack = 3 * (this.to - this.from) / this.plotW;
		if (row.kind === 'busy') {
			const [title, rows, swatch] = bandTip(row.gpu, bandAt(row, t, slack), t);
			this.showTip(e, title, rows, undefined, swatch);
			return;
		}
		const items = row.items;
		let best = null;
		for (let i = Math.max(0, bisect(items, t + slack, (v) => v.s)); i >= 0; i--) {
			const it = items[i];
			if (it.e + slack < t - 60e3) break;
			if (it.s - slack <= t && it.e + slack >= t) {
				if (!best || (it.s <= t && it.e >= t)) best = it;
				if (it.s <= t && it.e >= t) break;
			}
		}
		if (!best) {
			this.tip.classList.add('hidden');
			return;
		}
		if (row.kind === 'kernel') {
			const rows = [['duration', fmtDur(best.e - best.s)], ['start', fmtTime(best.s, 1)]];
			for (const k of ['stream', 'device', 'correlation_id', 'graph_id']) if (best.attrs[k]) rows.push([k, best.attrs[k]]);
			this.showTip(e, best.name, rows);
			return;
		}
		const rows = [['duration', fmtDur(best.e - best.s)], ['start', fmtTime(best.s, 1)]];
		if (best.attrs.reason) rows.push(['reason', best.attrs.reason]);
		if (best.attrs.cpu) rows.push(['cpu', best.attrs.cpu]);
		this.showTip(e, `${row.label}: ${best.state}`, rows, best.attrs.stack_id);
	}

	async showTip(e, title, rows, stackId, swatch = STATE_COLORS[title.split(': ').pop()]) {
		const sw = swatch === 'hatch' ? el('i', { class: 'sw hatch' }) : swatch ? el('i', { class: 'sw', style: `background:${swatch}` }) : null;
		const kids = [el('div', { class: 'tip-title' }, sw, title),
			...rows.map(([k, v]) => el('div', { class: 'tip-row' }, el('span', {}, k), el('b', {}, v)))];
		const stackBox = el('div', { class: 'tip-stack' });
		if (stackId) kids.push(stackBox);
		this.tip.replaceChildren(...kids);
		this.tip.classList.remove('hidden');
		this.placeTip(e);
		this.tipFor = stackId;
		if (stackId) {
			stackBox.textContent = 'loading stack…';
			const frames = await this.stackOf(stackId);
			if (this.tipFor !== stackId) return;
			stackBox.replaceChildren(...[el('div', { class: 'tip-sub' }, 'blocking stack (innermost first)'),
				...(frames || []).slice(0, 14).map((f) => el('div', { class: 'frame' }, f.function || '[unknown]')),
				frames && frames.length > 14 ? el('div', { class: 'frame more' }, `… ${frames.length - 14} more`) : null].filter(Boolean));
			if (!frames) stackBox.textContent = 'stack unavailable';
			this.placeTip(e);
		}
	}

	placeTip(e) {
		const tw = this.tip.offsetWidth, th = this.tip.offsetHeight;
		let x = e.clientX + 14, y = e.clientY + 14;
		if (x + tw > innerWidth - 8) x = e.clientX - tw - 14;
		if (y + th > innerHeight - 8) y = Math.max(8, e.clientY - th - 14);
		this.tip.style.left = x + 'px';
		this.tip.style.top = y + 'px';
	}
}
