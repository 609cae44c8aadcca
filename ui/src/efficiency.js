// SPDX-License-Identifier: Apache-2.0
// The Efficiency page (?view=efficiency): GPU-hours held, busy, idle and unknown per workload
// with idle dollars and idle causes, from /api/v1/efficiency (docs/efficiency.md). The table
// sorts by any column; each row links to the workload's timeline and its GPU-idle flame graph.
import * as api from './api.js';
import * as State from './state.js';
import { el, fmtDate } from './util.js';
import { FindingsPanel } from './findings.js';

const BY = ['namespace', 'pod', 'owner', 'kubeflow_job', 'ray_cluster', 'comm', 'pid', 'node'];
const RANGES = [['1h', 3600e3], ['6h', 6 * 3600e3], ['24h', 86400e3], ['7d', 7 * 86400e3], ['30d', 30 * 86400e3]];

const h2 = (v) => (v === null || v === undefined ? '–' : v.toFixed(2));
const usd = (v) => (v === null || v === undefined ? '–' : `$${v.toFixed(2)}`);
const pct = (v) => (v === null || v === undefined ? '–' : `${(100 * v).toFixed(0)}%`);
const mainSource = (w) => {
	let best = 'unknown', bv = 0;
	for (const [k, v] of Object.entries(w.sources || {})) if (v > bv) [best, bv] = [k, v];
	return best;
};

// Columns: header, value for sorting, cell text, numeric?
const COLS = [
	['Workload', (w) => w.workload, (w) => w.workload, false],
	['GPUs', (w) => w.gpus.length, (w) => String(w.gpus.length), true],
	['Held GPU-h', (w) => w.held_gpu_hours, (w) => h2(w.held_gpu_hours), true],
	['Busy', (w) => w.busy_gpu_hours, (w) => h2(w.busy_gpu_hours), true],
	['Idle', (w) => w.idle_gpu_hours, (w) => h2(w.idle_gpu_hours), true],
	['Unknown', (w) => w.unknown_gpu_hours, (w) => h2(w.unknown_gpu_hours), true],
	['Util', (w) => w.utilization ?? -1, (w) => pct(w.utilization), true],
	['Idle $', (w) => w.idle_dollars ?? -1, (w) => usd(w.idle_dollars), true],
	['Source', (w) => mainSource(w), (w) => mainSource(w), false],
];

// The main view of one workload: its busiest-idle GPU, its first process there, the range.
function viewLink(w, ans, idle) {
	const c = w.causes || {};
	const g = w.gpus.find((x) => x.node === c.node && x.gpu === c.gpu) || w.gpus[0];
	const holder = (w.holders || []).find((h) => h.node === g.node) || (w.holders || [])[0];
	const p = new URLSearchParams();
	p.set('node', g.node);
	p.set('gpu', g.gpu);
	if (holder) p.set('pid', holder.pid);
	if (idle) {
		p.set('sel', c.selector || w.selector);
		p.set('idle', '1');
	}
	p.set('from', String(Math.round(ans.from_ms)));
	p.set('to', String(Math.round(ans.to_ms)));
	return `${location.pathname}?${p.toString()}`;
}

// The causes' GPU-idle answer when part of it is estimated (causes.idle_estimate, the shape of
// a flame graph's gpu_sources.estimate): duty-cycle trace windows' samples standing for time no
// source decided. Absent (an older server) or nothing estimated: null.
function idleEstimate(w) {
	const e = w.causes && w.causes.idle_estimate;
	return e && typeof e === 'object' && e.estimated_share > 0 ? e : null;
}

function estimateTitle(e) {
	const p = (x) => (typeof x === 'number' ? `${(100 * x).toFixed(x > 0 && x < 0.01 ? 2 : 0)}%` : '?');
	return `${e.summary || 'part of this GPU-idle answer is estimated'}\n` +
		`decided exactly ${p(e.exact)} of the range, traced by ${e.windows ?? '?'} duty-cycle window${e.windows === 1 ? '' : 's'} ${p(e.traced)}, ` +
		`extrapolated from them ${p(e.extrapolated)}, unknown ${p(e.unknown)}; ${p(e.estimated_share)} of the samples behind these causes are estimated` +
		(e.max_weight ? ` (weights up to ${e.max_weight.toFixed(1)})` : '');
}

function causesText(w) {
	const c = w.causes;
	if (!c) return '';
	const parts = (c.functions || []).slice(0, 2).map((f) => `${f.name} ${(100 * f.share).toFixed(0)}%`);
	const b = (c.blocked || [])[0];
	if (b && c.idle_seconds > 0) parts.push(`wait ${b.reason} ${(100 * b.thread_seconds / c.idle_seconds).toFixed(0)}%`);
	if (c.no_cpu_share !== null && c.no_cpu_share !== undefined) parts.push(`no CPU ${(100 * c.no_cpu_share).toFixed(0)}%`);
	return parts.join(', ');
}

export function showEfficiency(root, S) {
	const by = S.by || 'namespace';
	let sortCol = 7, sortDir = -1, ans = null;
	const now = Date.now();
	if (S.from === undefined || S.to === undefined) {
		S.to = now;
		S.from = now - 86400e3;
	}
	const bySel = el('select', { id: 'eff-by', onchange: () => {
		S.by = bySel.value;
		State.save(S, true);
		load();
	} }, ...(BY.includes(by) ? BY : [...BY, by]).map((b) => el('option', { value: b }, b)));
	bySel.value = by;
	const selInp = el('input', { type: 'search', id: 'eff-sel', placeholder: '{namespace=~"team-.*"}', value: S.sel || '' });
	selInp.addEventListener('change', () => {
		S.sel = selInp.value;
		State.save(S, true);
		load();
	});
	const rangeLbl = el('span', { class: 'sec-sub', id: 'eff-range' });
	const status = el('div', { class: 'empty hidden', id: 'eff-status' });
	const thead = el('thead');
	const tbody = el('tbody');
	const totals = el('div', { class: 'eff-totals', id: 'eff-totals' });
	const table = el('table', { class: 'eff', id: 'eff-table' }, thead, tbody);
	const header = el('header', {},
		el('div', { class: 'brand' }, el('span', { class: 'logo' }), 'gpuscope'),
		el('a', { class: 'nav', href: `${location.pathname}` }, 'Timeline'),
		el('a', { class: 'nav on', href: `${location.pathname}?view=efficiency` }, 'Efficiency'),
		el('div', { class: 'spacer' }),
		el('div', { class: 'seg', id: 'eff-presets' }, ...RANGES.map(([n, ms]) => el('button', { class: 'btn', onclick: () => {
			S.to = Date.now();
			S.from = S.to - ms;
			State.save(S, true);
			load();
		} }, n))));
	const card = el('section', { class: 'card', id: 'eff-card' },
		el('div', { class: 'sec-head' }, el('h2', {}, 'GPU efficiency'), rangeLbl),
		el('div', { class: 'toolbar' }, el('label', { class: 'field dark' }, 'Group by', bySel), selInp),
		status, table, totals);
	const findings = FindingsPanel();
	root.replaceChildren(header, el('main', {}, card, findings.root));

	function renderHead() {
		thead.replaceChildren(el('tr', {}, ...COLS.map(([name, , , num], i) => el('th', {
			class: (num ? 'num ' : '') + 'sortable' + (i === sortCol ? (sortDir < 0 ? ' desc' : ' asc') : ''),
			'data-col': String(i),
			onclick: () => {
				sortDir = i === sortCol ? -sortDir : (num ? -1 : 1);
				sortCol = i;
				render();
			},
		}, name)), el('th', {}, 'Top causes while idle'), el('th', {}, '')));
	}

	function render() {
		renderHead();
		if (!ans) return;
		const key = COLS[sortCol][1];
		const rows = [...ans.workloads].sort((a, b) => {
			const x = key(a), y = key(b);
			return (x < y ? -1 : x > y ? 1 : 0) * sortDir || (a.workload < b.workload ? -1 : 1);
		});
		tbody.replaceChildren(...rows.map((w) => el('tr', { 'data-workload': w.workload },
			...COLS.map(([, , text, num]) => el('td', { class: num ? 'num' : '' }, text(w))),
			el('td', { class: 'causes' }, ...(idleEstimate(w) ? [el('span', { class: 'est-mark', title: estimateTitle(idleEstimate(w)) },
				`≈ estimated ${(100 * idleEstimate(w).estimated_share).toFixed(0)}%`), ' '] : []), causesText(w)),
			el('td', { class: 'links' },
				el('a', { class: 'tl-link', href: viewLink(w, ans, false), title: 'this workload\'s timeline' }, 'timeline'),
				' · ',
				el('a', { class: 'idle-link', href: viewLink(w, ans, true), title: 'CPU while this workload\'s GPU was idle' }, 'idle flame graph')))),
		...(ans.unheld || []).map((u) => el('tr', { class: 'unheld', 'data-workload': '(unheld)' },
			el('td', {}, `(unheld) ${u.node}/GPU ${u.gpu}`), el('td', { class: 'num' }, '1'),
			el('td', { class: 'num' }, h2(u.gpu_hours)), el('td', { class: 'num' }, h2(u.busy_gpu_hours)),
			el('td', { class: 'num' }, '–'), el('td', { class: 'num' }, '–'), el('td', { class: 'num' }, '–'),
			el('td', { class: 'num' }, usd(u.dollars)), el('td', {}, u.source), el('td', {}, 'nobody held this GPU'), el('td', {}))));
		const t = ans.totals;
		totals.textContent = `Held ${h2(t.held_gpu_hours)} GPU-h: busy ${h2(t.busy_gpu_hours)}, idle ${h2(t.idle_gpu_hours)} (${usd(t.idle_dollars)}), unknown ${h2(t.unknown_gpu_hours)}; unheld ${h2(t.unheld_gpu_hours)} GPU-h (${usd(t.unheld_dollars)})` +
			(t.idle_dollars === null ? ' · no --gpu-hour-price on the server: dollars unknown' : '');
	}

	async function load() {
		rangeLbl.textContent = `${fmtDate(S.from)} → ${fmtDate(S.to)}`;
		status.classList.add('hidden');
		try {
			ans = await api.get('efficiency', { from: S.from, to: S.to, by: S.by || 'namespace', selector: S.sel || undefined, causes: 25 });
		} catch (e) {
			ans = null;
			tbody.replaceChildren();
			totals.textContent = '';
			// a range without GPU data is an answer (as `gpuscope report` says it), not a failure
			status.textContent = e.kind === 'notfound' ? 'No GPU data in this range, so there is nothing to report. Maybe no agent ' +
				'here sees a GPU (no NVIDIA driver or libnvidia-ml on the node, or the agent runs with --no-gpu: `gpuscope doctor` ' +
				'on the node says), the agents ran at another time (widen the range), or the selector matches no process that holds a GPU.'
				: e.message;
			status.classList.remove('hidden');
			renderHead();
			findings.clear();
			return;
		}
		render();
		// the findings of the same rows (their GPU time is there: the answer above had it)
		findings.load({ from: S.from, to: S.to, by: S.by || 'namespace', selector: S.sel });
	}
	load();
	return { reload: load };
}
