// SPDX-License-Identifier: Apache-2.0
// The findings panel (timeline and Efficiency pages): /api/v1/insights for the page's range,
// grouping and selector (docs/insights.md), each finding with its title, the dollars and
// GPU-seconds at stake, its confidence (an estimated one marked and hatched, as estimated
// causes are), the summary, the recommendation and evidence links that open the view showing
// it (the finding's `ui` link: range, selector and view) beside the exact API call.
import * as api from './api.js';
import { el } from './util.js';

const usd = (v) => (typeof v === 'number' ? `$${v.toFixed(2)}` : null);
const pct = (v) => `${(100 * v).toFixed(v > 0 && v < 0.01 ? 1 : 0)}%`;

function fmtSecs(s) {
	if (s >= 3600) return `${(s / 3600).toFixed(1)} GPU-h`;
	if (s >= 60) return `${(s / 60).toFixed(1)} GPU-min`;
	return `${s.toFixed(1)} GPU-s`;
}

// An evidence link of the answer as a link of this page: the server writes the query string
// the UI's state.js reads ("?node=..&from=.."); a hash form ("#/flame?..") or a path is taken too.
export function evidenceHref(ui) {
	if (!ui) return null;
	if (ui.startsWith('?')) return location.pathname + ui;
	if (ui.startsWith('/?')) return location.pathname + ui.slice(1);
	if (ui.startsWith('#')) {
		const q = ui.indexOf('?');
		return location.pathname + (q >= 0 ? ui.slice(q) : '');
	}
	return ui;
}

function confidence(f) {
	const share = typeof f.estimated_share === 'number' ? f.estimated_share : 0;
	if (f.confidence === 'estimated' || share > 0) {
		return el('span', { class: 'conf est-mark', 'data-conf': 'estimated',
			title: `computed from GPU-idle time that is partly estimated: ${pct(share)} of it stands for time no source decided (duty-cycle trace windows extrapolated; docs/estimator.md)` },
		`≈ estimated ${pct(share)}`);
	}
	if (f.confidence === 'low') {
		return el('span', { class: 'conf low', 'data-conf': 'low', title: 'little evidence behind this finding: check it' }, 'low confidence');
	}
	return el('span', { class: 'conf measured', 'data-conf': 'measured', title: 'from time a source decided exactly' }, 'measured');
}

function evidenceItem(e) {
	const href = evidenceHref(e.ui);
	return el('li', { class: 'ev' },
		href ? el('a', { class: 'ev-link', href, title: 'open the view that shows it' }, e.label) : el('span', {}, e.label),
		e.api ? el('a', { class: 'ev-api', href: e.api, target: '_blank', rel: 'noopener', title: e.api }, 'API') : null);
}

function findingCard(f, i) {
	const d = usd(f.dollars_at_stake);
	return el('article', { class: 'finding', 'data-id': f.id, 'data-kind': f.kind },
		el('div', { class: 'f-head' },
			el('span', { class: 'f-rank' }, `${i + 1}`),
			el('span', { class: 'f-title' }, f.title),
			el('span', { class: 'spacer' }),
			d ? el('span', { class: 'f-dollars', title: 'what the GPU time at stake cost (the server\'s --gpu-hour-price)' }, `${d} at stake`)
				: el('span', { class: 'f-dollars none', title: 'no --gpu-hour-price on the server' }, 'no price'),
			el('span', { class: 'f-secs', title: `${f.gpu_seconds_at_stake.toFixed(1)} GPU-seconds, ${pct(f.share_of_held || 0)} of the GPU time held` },
				`${fmtSecs(f.gpu_seconds_at_stake)} · ${pct(f.share_of_held || 0)} of held`),
			confidence(f)),
		el('div', { class: 'f-where' }, `${f.workload} · node ${f.node}${f.gpu !== null && f.gpu !== undefined ? ` GPU ${f.gpu}` : ''} · ${f.kind}`),
		el('div', { class: 'f-summary' }, f.summary),
		el('div', { class: 'f-rec' }, el('b', {}, 'Fix: '), f.recommendation),
		el('ul', { class: 'f-evidence' }, ...(f.evidence || []).map(evidenceItem)));
}

// The panel: `root` to place on the page, `load(params)` (from, to in ms; by; selector) fetches
// and draws (the same parameters twice in a row fetch once), `clear()` hides it.
export function FindingsPanel() {
	const sub = el('span', { class: 'sec-sub', id: 'findings-sub' });
	const note = el('div', { class: 'findings-note hidden', id: 'findings-note' });
	const list = el('div', { class: 'findings-list', id: 'findings-list' });
	const root = el('section', { class: 'card', id: 'findings-card' },
		el('div', { class: 'sec-head' }, el('h2', {}, 'Findings'), sub), note, list);
	let key = '', abort = null;

	function say(text) {
		note.textContent = text;
		note.classList.toggle('hidden', !text);
	}

	async function load({ from, to, by, selector }) {
		const k = JSON.stringify([Math.round(from), Math.round(to), by || '', selector || '']);
		root.classList.remove('hidden');
		if (k === key) return;
		key = k;
		if (abort) abort.abort();
		const ac = (abort = new AbortController());
		root.dataset.state = 'loading';
		sub.textContent = 'checking…';
		let ans;
		try {
			ans = await api.get('insights', { from, to, by: by || 'namespace', selector: selector || undefined, limit: 20 }, { signal: ac.signal });
		} catch (e) {
			if (e.name === 'AbortError') return;
			list.replaceChildren();
			sub.textContent = '';
			root.dataset.state = e.kind === 'notfound' ? 'nodata' : 'error';
			// a range without data is an answer (the server's sentence says why), not a failure
			say(e.kind === 'notfound' ? `Nothing to check: ${e.message.replace(/^insights: /, '')}` : `Findings unavailable: ${e.message}`);
			if (e.kind !== 'notfound') key = '';	// try again next time
			return;
		}
		const fs = ans.findings || [];
		sub.textContent = `${fs.length} finding${fs.length === 1 ? '' : 's'} over ${ans.workloads_checked} workload${ans.workloads_checked === 1 ? '' : 's'} by ${ans.by}, costliest first`;
		say(fs.length ? (ans.estimate && ans.estimate.summary) || '' : 'No finding: no workload in this range wastes GPU time enough to name a cause.');
		list.replaceChildren(...fs.map(findingCard));
		root.dataset.state = 'done';
	}

	// Nothing in the page's range: no request, the panel hidden.
	function clear() {
		if (abort) abort.abort();
		key = '';
		root.classList.add('hidden');
		root.dataset.state = 'cleared';
	}

	return { root, load, clear };
}
