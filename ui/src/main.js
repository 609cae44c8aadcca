// SPDX-License-Identifier: Apache-2.0
// gpuscope web UI: the page shell, data loading and the states in between. The timeline
// (timeline.js) and the flame graph (flame.js) share the URL state (state.js); every query
// goes through api.js to the same server that served this page.
import 'uplot/dist/uPlot.min.css';
import './app.css';
import uPlot from 'uplot';
import * as api from './api.js';
import * as State from './state.js';
import { Timeline } from './timeline.js';
import { Flame, topFunctions } from './flame.js';
import { SelectorBox } from './selector.js';
import { showEfficiency } from './efficiency.js';
import { FindingsPanel } from './findings.js';
import { ProcPicker } from './picker.js';
import { $, el, fmtRange, fmtDur, fmtValue, fmtPct, withMatcher, debounce } from './util.js';

const S = State.load();
const app = {
	state: S, nodes: [], gpus: [], procs: [], ready: false,
	loads: { timeline: 0, flame: 0 }, timings: {},
};
window.__gpuscope = app;

// ---- shell --------------------------------------------------------------------------------
const nodeSel = el('select', { id: 'node', title: 'node' });
const gpuSel = el('select', { id: 'gpu', title: 'GPU of the node' });
const procBox = el('div', { class: 'picker-box' });
const rangeLbl = el('span', { class: 'range-label' });
const presets = [['5m', 5 * 60e3], ['15m', 15 * 60e3], ['1h', 3600e3], ['6h', 6 * 3600e3], ['24h', 86400e3]];

const header = el('header', {},
	el('div', { class: 'brand' }, el('span', { class: 'logo' }), 'gpuscope'),
	el('a', { class: 'nav on', href: location.pathname }, 'Timeline'),
	el('a', { class: 'nav', id: 'nav-eff', href: `${location.pathname}?view=efficiency`,
		onclick: (e) => {	// keep the range in view
			e.currentTarget.href = `${location.pathname}?view=efficiency&from=${Math.round(S.from)}&to=${Math.round(S.to)}`;
		} }, 'Efficiency'),
	el('label', { class: 'field' }, 'Node', nodeSel),
	el('label', { class: 'field' }, 'GPU', gpuSel),
	el('div', { class: 'field' }, 'Process', procBox),
	el('div', { class: 'spacer' }),
	el('div', { class: 'seg', id: 'presets' }, ...presets.map(([n, ms]) =>
		el('button', { class: 'btn', onclick: () => setView(viewEnd() - ms, viewEnd(), true) }, n)),
	el('button', { class: 'btn', title: 'the latest data of this node', onclick: () => jumpLatest() }, 'latest')),
	el('button', { class: 'btn icon', title: 'zoom out (−)', onclick: () => zoom(2) }, '−'),
	el('button', { class: 'btn icon', title: 'zoom in (+)', onclick: () => zoom(0.5) }, '+'),
	el('button', { class: 'btn icon', title: 'reload', onclick: () => refresh() }, '↻'),
	el('button', { class: 'btn', id: 'capture', title: 'trace every kernel of this node (or the selected process) for 5 s, then download the trace for Perfetto',
		onclick: () => capture() }, 'Capture'));
const captureNote = el('div', { class: 'banner hidden', id: 'capture-note' });
const banner = el('div', { class: 'banner hidden', id: 'banner' });

const tlTitle = el('span', { class: 'sec-sub' });
const tlNote = el('div', { class: 'empty hidden', id: 'tl-empty' });
const tlRoot = el('div', { id: 'timeline' });
const timelineSec = el('section', { class: 'card', id: 'tl-card' },
	el('div', { class: 'sec-head' }, el('h2', {}, 'Timeline'), tlTitle, el('div', { class: 'spacer' }),
		el('span', { class: 'hint' }, 'drag: select a range · ctrl/shift + wheel: zoom'),
		el('button', { class: 'btn', id: 'zoomsel', onclick: () => zoomToBrush() }, 'Zoom to selection')),
	tlRoot, tlNote);

const kindSeg = el('div', { class: 'seg', id: 'kinds' }, ...State.KINDS.map(([k, n]) =>
	el('button', { class: 'btn', 'data-kind': k, onclick: () => {
		S.kind = k;
		S.focus = '';
		commit();
		loadFlame();
	} }, n)));
const idleBox = el('input', { type: 'checkbox', id: 'idle', onchange: () => {
	S.idle = idleBox.checked;
	S.focus = '';
	commit();
	loadFlame();
} });
const idleLbl = el('label', { class: 'toggle', title: 'keep only samples taken while the selected GPU ran no kernel' }, idleBox,
	el('span', { id: 'idle-text' }, 'only while the GPU was idle'));
// Python only: the interpreter's own frames between Python frames folded away (the server's
// view=python); on by default for a Python process, the raw stacks one click away
const pyBox = el('input', { type: 'checkbox', id: 'pyonly', onchange: () => {
	S.py = pyBox.checked ? '1' : '0';
	S.focus = '';
	commit();
	loadFlame();
} });
const pyLbl = el('label', { class: 'toggle', title: 'fold the interpreter\'s own frames (_PyEval_EvalFrameDefault, PyObject_Call, ...) between Python frames: Python functions adjacent, native code they call kept; untick for the raw stacks' }, pyBox,
	el('span', {}, 'Python only'));
function pythonProc() {
	const p = app.procs.find((x) => x.pid === S.pid);
	return !!p && (/^python/.test(p.comm || '') || /\.py$/.test(p.program || '') || /^python/.test(p.program || ''));
}
function pyView() {
	return S.py === '1' || (S.py !== '0' && S.fl === 'proc' && pythonProc());
}
const scopeSeg = el('div', { class: 'seg', id: 'scope', title: 'the flame graph of the selected process, or of every process of the node' },
	el('button', { class: 'btn', 'data-scope': 'proc', onclick: () => setScope('proc') }, 'This process'),
	el('button', { class: 'btn', 'data-scope': '', onclick: () => setScope('') }, 'Whole node'));
const GROUPS = [['', 'no grouping'], ['comm', 'process name'], ['pid,comm', 'process'], ['thread', 'thread'], ['pod', 'pod']];
const groupSel = el('select', { id: 'groupby', class: 'groupby', title: 'group the flame graph\'s root by a label' },
	...GROUPS.map(([v, n]) => el('option', { value: v }, n)));
groupSel.addEventListener('focus', () => fillGroupLabels());
groupSel.addEventListener('change', () => {
	S.grp = groupSel.value;
	S.focus = '';
	commit(true);
	loadFlame();
});
const search = el('input', { type: 'search', id: 'search', placeholder: 'search frames (regex)', value: S.q });
const matchLbl = el('span', { class: 'match hidden', id: 'match' });
const cmpBtn = el('button', { class: 'btn', id: 'cmp', onclick: () => toggleCompare() }, 'Compare…');
const flameInfo = el('div', { class: 'flame-info' });
const flameBox = el('div', { class: 'flame-box', id: 'flame' });
const flameEmpty = el('div', { class: 'empty hidden', id: 'flame-empty' });
const topBody = el('tbody');
const topTable = el('table', { class: 'top', id: 'top' },
	el('thead', {}, el('tr', {}, el('th', {}, 'Function'), el('th', { class: 'num' }, 'Self'), el('th', { class: 'num' }, 'Total'))), topBody);
const selRoot = el('div', { class: 'sel' });
const flameSec = el('section', { class: 'card', id: 'flame-card' },
	el('div', { class: 'sec-head' }, el('h2', {}, 'Flame graph'), flameInfo),
	el('div', { class: 'toolbar' }, selRoot),
	el('div', { class: 'toolbar' }, scopeSeg, el('label', { class: 'field dark' }, 'Group by', groupSel), kindSeg, idleLbl, pyLbl,
		el('div', { class: 'spacer' }), search, matchLbl, cmpBtn,
		el('button', { class: 'btn', title: 'zoom the flame graph out to the root', onclick: () => flame.zoomTo(0) }, 'Reset zoom')),
	el('div', { class: 'flame-row' }, el('div', { class: 'flame-scroll' }, flameEmpty, flameBox),
		el('div', { class: 'top-box' }, el('div', { class: 'top-head' }, 'Top functions'), topTable)));

// what wastes GPU time in the view, for the node's workloads (findings.js)
const findings = FindingsPanel();
$('#app').append(header, captureNote, banner, el('main', {}, timelineSec, findings.root, flameSec));

// ---- deep capture: the node's agent opens a CUPTI window now (server: /api/v1/capture) ---------
const CAPTURE_MS = 5000;

async function capture() {
	if (!S.node) return;
	const show = (...xs) => {
		captureNote.replaceChildren(...xs);
		captureNote.classList.remove('hidden');
	};
	const pid = S.fl === 'proc' && S.pid ? S.pid : undefined;
	const what = `${S.node}${pid ? ` pid ${pid}` : ''}`;
	let c;
	try {
		c = await api.post('capture', { node: S.node, pid, duration: `${CAPTURE_MS}ms` });
		show(`Capture of ${what}: asked the agent for ${CAPTURE_MS / 1000} s of tracing…`);
		const give_up = Date.now() + CAPTURE_MS + 60e3;
		while (c.state === 'pending' || c.state === 'delivered') {
			if (Date.now() > give_up) break;
			await new Promise((r) => setTimeout(r, 500));
			c = await api.get('capture/status', { id: c.id });
		}
	} catch (e) {
		show(`Capture of ${what} failed: ${e.message}`);
		return;
	}
	if (c.state !== 'done' || c.from_ms === undefined) {
		show(`Capture of ${what}: ${c.state === 'expired' ? 'no agent of this node took the request (is it running, and pointed at this server?)' : `no answer (${c.state})`}`);
		return;
	}
	// not injected: no window; the trace of the last seconds still has CPU, strips, GPU metrics
	const [from, to] = c.to_ms > c.from_ms ? [c.from_ms, c.to_ms] : [Date.now() - CAPTURE_MS, Date.now()];
	const href = api.url('trace', { node: S.node, pid, from, to });
	const why = c.status && c.status !== 'ok' ? ` (${c.status}${c.message ? ': ' + c.message : ''}: no GPU kernels in it; CPU, thread states and GPU metrics are)` : '';
	show(`Capture of ${what} done${why}: `, el('a', { href, download: `gpuscope-${S.node}-${c.id}.json`, id: 'capture-link' }, 'download the trace'),
		' (Chrome trace JSON: open it in ui.perfetto.dev) · ', el('button', { class: 'btn', onclick: () => setView(from - 5e3, to + 5e3, true) }, 'show it on the timeline'));
	app.capture = c;
}

// ---- components ---------------------------------------------------------------------------
const stackCache = new Map();
const timeline = new Timeline(tlRoot, {
	onBrush: (b) => {
		S.bfrom = b ? b[0] : undefined;
		S.bto = b ? b[1] : undefined;
		S.focus = '';
		commit(true);
		loadFlame();
	},
	onView: (a, b) => setView(a, b, false),
	stackOf: (id) => {
		if (!stackCache.has(id))
			stackCache.set(id, api.get(`stack/${encodeURIComponent(id)}`).then((r) => r.frames).catch(() => null));
		return stackCache.get(id);
	},
});
const flame = new Flame(flameBox, {
	onFocus: (path) => {
		S.focus = path;
		commit();
	},
});
const selector = new SelectorBox(selRoot, {
	labels: cached(() => api.get('labels', viewParams()).then((r) => r.labels || [])),
	// values of the node in view (node's own values span every node)
	values: (name) => cached(() => api.get(`label/${encodeURIComponent(name)}/values`,
		{ ...viewParams(), selector: name === 'node' ? undefined : `{${nodeMatcher()}}` }).then((r) => r.values || []), name)(),
	onApply: (v) => {
		S.sel = v;
		S.focus = '';
		commit();
		loadFlame();
	},
});
selector.value = S.sel;
const picker = new ProcPicker(procBox, {
	onPick: (pid) => {
		if (S.pid === pid && S.fl === 'proc') return;
		S.pid = pid;
		S.fl = 'proc';	// picking a process: its flame graph too (the toggle goes back)
		S.focus = '';
		commit(true);
		loadTimeline();
		loadFlame();
	},
});
app.picker = picker;

function setScope(v) {
	if ((S.fl || '') === v) return;
	S.fl = v;
	S.focus = '';
	commit(true);
	loadFlame();
}

// every label name of the node's data as a group-by choice, besides the usual ones
let groupLabelsDone = false;
async function fillGroupLabels() {
	if (groupLabelsDone) return;
	groupLabelsDone = true;
	try {
		const names = await selector.labels();
		const have = new Set(GROUPS.map(([v]) => v));
		for (const n of names) if (!have.has(n)) groupSel.append(el('option', { value: n }, n));
		groupSel.value = S.grp || '';
	} catch (e) {
		groupLabelsDone = false;
	}
}
app.timeline = timeline;
app.flame = flame;

function cached(fn, key = '') {
	const memo = new Map();
	return () => {
		const k = key + '|' + S.node + '|' + Math.round(S.from / 60e3) + '|' + Math.round(S.to / 60e3);
		if (!memo.has(k)) memo.set(k, fn().catch((e) => {
			memo.delete(k);
			throw e;
		}));
		return memo.get(k);
	};
}

// ---- state --------------------------------------------------------------------------------
const viewParams = () => ({ from: S.from, to: S.to });
const viewEnd = () => {
	const n = app.nodes.find((x) => x.node === S.node);
	return n && n.last_ms ? Math.max(n.last_ms, S.to || 0) : Date.now();
};
const nodeMatcher = () => S.node ? `node="${S.node}"` : '';

function commit(push = false) {
	State.save(S, push);
	syncControls();
}

function syncControls() {
	for (const b of kindSeg.children) b.classList.toggle('on', b.dataset.kind === S.kind);
	idleBox.checked = !!S.idle;
	idleBox.disabled = S.gpu === undefined || S.gpu === '';
	pyBox.checked = pyView();
	$('#idle-text').textContent = S.gpu ? `only while GPU ${S.gpu} of ${S.node} was idle` : 'only while the GPU was idle (no GPU on this node)';
	const cmp = S.afrom !== undefined;
	timeline.setBaseline(cmp ? [S.afrom, S.ato] : null);
	timeline.setIdleMask(!!S.idle && !!S.gpu);
	cmpBtn.textContent = cmp ? 'Stop comparing' : 'Compare…';
	cmpBtn.classList.toggle('on', cmp);
	$('#zoomsel').disabled = S.bfrom === undefined;
	tlTitle.textContent = S.from ? fmtRange(S.from, S.to, true) : '';
	for (const b of scopeSeg.children) b.classList.toggle('on', b.dataset.scope === (S.fl === 'proc' && S.pid ? 'proc' : ''));
	scopeSeg.firstChild.disabled = !S.pid;
	scopeSeg.firstChild.textContent = S.pid ? `Process ${picker.name(S.pid)}` : 'This process';
	if (S.grp && ![...groupSel.options].some((o) => o.value === S.grp)) groupSel.append(el('option', { value: S.grp }, S.grp));
	groupSel.value = S.grp || '';
}

function setView(from, to, push) {
	if (!(to > from)) return;
	S.from = from;
	S.to = to;
	commit(push);
	timeline.setView(from, to);
	syncControls();
	reloadTimeline();
	if (S.bfrom === undefined) reloadFlame();
}
const reloadTimeline = debounce(() => loadTimeline(), 120);
const reloadFlame = debounce(() => loadFlame(), 200);

function zoom(f) {
	const c = (S.from + S.to) / 2, h = Math.max(1, ((S.to - S.from) * f) / 2);
	setView(c - h, c + h, true);
}

function zoomToBrush() {
	if (S.bfrom === undefined) return;
	const pad = (S.bto - S.bfrom) * 0.05;
	setView(S.bfrom - pad, S.bto + pad, true);
}

function jumpLatest() {
	const n = app.nodes.find((x) => x.node === S.node);
	if (!n || !n.last_ms) return setView(Date.now() - 15 * 60e3, Date.now(), true);
	const first = n.first_ms || n.last_ms - 15 * 60e3;
	const from = Math.max(first, n.last_ms - 15 * 60e3), pad = (n.last_ms - from) * 0.02 + 1;
	setView(from - pad, n.last_ms + pad, true);
}

function toggleCompare() {
	if (S.afrom !== undefined) {
		S.afrom = S.ato = undefined;
	} else {
		// the current selection (or the view) becomes the baseline A; the next selection is B
		S.afrom = S.bfrom !== undefined ? S.bfrom : S.from;
		S.ato = S.bto !== undefined ? S.bto : S.to;
		S.bfrom = S.bto = undefined;
		timeline.setBrush(null);
	}
	S.focus = '';
	commit(true);
	loadFlame();
}

// ---- banners and empty states -------------------------------------------------------------
let retryTimer = 0;
function showBanner(kind, msg, actions = []) {
	banner.className = `banner ${kind}`;
	banner.replaceChildren(el('div', { class: 'banner-text' }, ...msg), ...actions);
}
const hideBanner = () => banner.classList.add('hidden');

function failed(e) {
	if (e.name === 'AbortError') return;
	clearTimeout(retryTimer);
	if (e.kind === 'unreachable') {
		showBanner('error', [el('b', {}, 'The gpuscope server is unreachable. '),
			`Nothing answered at ${location.origin}. Check that gpuscope-server is running and reachable from this browser; this page retries every 5 s.`],
		[el('button', { class: 'btn', onclick: () => boot() }, 'Retry now')]);
		retryTimer = setTimeout(boot, 5000);
	} else if (e.kind === 'auth') {
		const inp = el('input', { type: 'password', placeholder: 'bearer token' });
		showBanner('error', [el('b', {}, 'This server needs a token. '), 'It was started with --token-file; paste the token to continue (kept in this browser only).'],
			[inp, el('button', { class: 'btn', onclick: () => {
				api.setToken(inp.value.trim());
				boot();
			} }, 'Use token')]);
	} else {
		showBanner('error', [el('b', {}, 'The server answered with an error. '), e.message]);
	}
}

// ---- boot ---------------------------------------------------------------------------------
async function fetchNodes() {
	try {
		const r = await api.get('nodes');
		return (r.nodes || []).map((n) => (typeof n === 'string' ? { node: n } : n));
	} catch (e) {
		if (e.kind !== 'notfound') throw e;
		// a server without /nodes: every node that ever sent data, from the label index
		const r = await api.get('label/node/values', { from: 0, to: Date.now() + 86400e3 });
		return (r.values || []).map((node) => ({ node }));
	}
}

async function boot() {
	clearTimeout(retryTimer);
	try {
		app.nodes = (await fetchNodes()).sort((a, b) => (a.node < b.node ? -1 : 1));
	} catch (e) {
		return failed(e);
	}
	if (!app.nodes.length) {
		showBanner('info', [el('b', {}, 'No agent has sent data to this server yet. '),
			'Start gpuscope-agent on each GPU node and point it at this server, e.g. ',
			el('code', {}, `sudo gpuscope-agent run --server ${location.origin}`),
			'. This page looks again every 5 s.']);
		tlNote.replaceChildren(el('div', { class: 'empty-title' }, 'Waiting for the first agent'),
			el('div', {}, 'The timeline and flame graph fill in as soon as a node sends its first batch.'));
		tlNote.classList.remove('hidden');
		tlRoot.classList.add('hidden');
		flameSec.classList.add('hidden');
		retryTimer = setTimeout(boot, 5000);
		return;
	}
	hideBanner();
	tlNote.classList.add('hidden');
	tlRoot.classList.remove('hidden');
	flameSec.classList.remove('hidden');
	if (!S.node || !app.nodes.some((n) => n.node === S.node)) S.node = app.nodes[0].node;
	nodeSel.replaceChildren(...app.nodes.map((n) => el('option', { value: n.node }, n.node)));
	nodeSel.value = S.node;
	if (S.from === undefined || S.to === undefined) {
		jumpLatest();
	}
	timeline.setView(S.from, S.to);
	if (S.bfrom !== undefined) timeline.setBrush([S.bfrom, S.bto]);
	app.ready = true;
	// a link that names the GPU and process starts drawing while the selectors fill in
	const early = S.gpu !== undefined && S.pid !== undefined;
	if (early) {
		loadTimeline();
		loadFlame();
	}
	const before = [S.gpu, S.pid].join();
	await loadNodeChoices();
	commit();
	if (!early || before !== [S.gpu, S.pid].join()) {
		loadTimeline();
		loadFlame();
	} else if (timeline.data) {
		timeline.data.procLabel = procLabel();	// the process's name is known now
		timeline.setData(timeline.data);
	}
}

async function loadNodeChoices() {
	const sel = `{${nodeMatcher()}}`;
	const wide = { from: S.from - 86400e3, to: S.to + 86400e3 };
	let gpus = [], pr = { processes: [], total: 0 };
	try {
		[gpus, pr] = await Promise.all([
			api.get('label/gpu/values', { ...wide, selector: sel }).then((r) => r.values || []),
			// the processes by CPU samples in the view: one request, names included
			api.get('processes', { from: S.from, to: S.to, selector: sel, limit: 1000 }).catch((e) => {
				if (e.kind !== 'notfound') throw e;
				// an older server (or ui/dev/mock.mjs): the pids, unranked and unnamed
				return api.get('label/pid/values', { ...wide, selector: sel })
					.then((r) => ({ processes: (r.values || []).map((pid) => ({ pid, comm: '', value: 0 })), total: 0 }));
			}),
		]);
	} catch (e) {
		return failed(e);
	}
	gpus.sort((a, b) => a - b);
	app.gpus = gpus;
	// a GPU or process named by the URL stays, even without data in this view
	if (S.gpu === undefined || S.gpu === '') S.gpu = gpus[0];
	const gopts = gpus.includes(S.gpu) || S.gpu === undefined ? gpus : [...gpus, S.gpu];
	gpuSel.replaceChildren(...(gopts.length ? gopts.map((g) => el('option', { value: g }, gpus.includes(g) ? `GPU ${g}` : `GPU ${g} (no data)`))
		: [el('option', { value: '' }, 'none')]));
	gpuSel.value = S.gpu || '';
	gpuSel.disabled = !gopts.length;
	app.procs = pr.processes || [];
	picker.setItems(app.procs, pr.total || 0, pr.count);
	if (S.pid === undefined || S.pid === '') {
		// the process that runs kernels on the selected GPU, else the busiest one
		let pick = app.procs.length ? app.procs[0].pid : undefined;
		if (S.gpu !== undefined) {
			try {
				const r = await api.get('label/pid/values', { ...wide, selector: `{${nodeMatcher()},gpu="${S.gpu}"}` });
				const g = (r.values || []).find((p) => app.procs.some((x) => x.pid === p)) || (r.values || [])[0];
				if (g) pick = g;
			} catch (e) {
				/* keep the busiest */
			}
		}
		S.pid = pick;
	}
	picker.value = S.pid;
}

nodeSel.addEventListener('change', async () => {
	S.node = nodeSel.value;
	S.gpu = S.pid = undefined;
	S.fl = '';
	await loadNodeChoices();
	commit(true);
	refresh();
});
gpuSel.addEventListener('change', () => {
	S.gpu = gpuSel.value;
	commit(true);
	refresh();
});

function refresh() {
	stackCache.clear();
	loadTimeline();
	loadFlame();
}

// ---- timeline data ------------------------------------------------------------------------
let tlAbort = null;
// Kernel lanes and CPU strips are fetched only when a pixel spans little enough time to show
// single intervals; wider views show the busy band and metrics, and say how far to zoom.
const KERNEL_SPAN = 5 * 60e3, THREAD_SPAN = 15 * 60e3;
const METRICS = ['gpu_utilization', 'gpu_sm_active', 'gpu_tensor_active', 'gpu_memory_used_bytes', 'gpu_memory_total_bytes', 'gpu_power_watts'];

async function loadTimeline() {
	if (!app.ready) return;
	if (tlAbort) tlAbort.abort();
	const ac = (tlAbort = new AbortController());
	const t0 = performance.now();
	const from = S.from, to = S.to, buckets = Math.max(50, Math.round(timeline.plotW));
	const gsel = `{${nodeMatcher()},gpu="${S.gpu}"}`, hasGpu = S.gpu !== undefined && S.gpu !== '';
	const opt = { signal: ac.signal };
	const series = (name) => api.get('series', { name, from, to, buckets, selector: gsel }, opt)
		.then((r) => (r.series || []).filter((s) => !s.labels || !s.labels.pid)[0] || null);
	const intervals = (kind, selector, limit) => api.get('intervals', { kind, from, to, selector, limit }, opt);
	// CPU samples over time: the node, and the selected process beside it
	const cbuckets = Math.max(30, Math.min(1000, Math.round(timeline.plotW / 3)));
	const samples = (selector) => api.get('samples', { from, to, buckets: cbuckets, selector, kind: 'cpu' }, opt)
		.then((r) => ((r.series || [])[0] || { values: [] }).values).catch((e) => {
			if (e.kind === 'notfound') return null;	// an older server
			throw e;
		});
	let res, cpuNode, cpuProc;
	try {
		[cpuNode, cpuProc] = await Promise.all([samples(`{${nodeMatcher()}}`),
			S.pid ? samples(`{${nodeMatcher()},pid="${S.pid}"}`) : null]);
		res = await Promise.all([
			...(hasGpu ? METRICS.map(series) : METRICS.map(() => null)),
			hasGpu ? intervals('gpu_busy', `{${nodeMatcher()}}`, 40000) : null,	// every GPU of the node
			hasGpu ? intervals('gpu_observed', `{${nodeMatcher()}}`, 40000) : null,	// which source decided, per GPU
			hasGpu && to - from <= KERNEL_SPAN ? intervals('gpu_kernel', gsel, 20000) : null,
			S.pid && to - from <= THREAD_SPAN ? intervals('thread_state', `{${nodeMatcher()},pid="${S.pid}"}`, 50000) : null,
		]);
	} catch (e) {
		return failed(e);
	}
	if (ac.signal.aborted) return;
	hideBanner();
	const [util, sm, tensor, used, total, power, busy, observed, kernels, threads] = res;
	const cols = (s, scale = 1, col = 2) => (s ? [s.points.map((p) => p[0]), s.points.map((p) => p[col] === null ? null : p[col] * scale)] : null);
	const join = (list) => {
		const present = list.filter(Boolean);
		if (!present.length) return null;
		const j = uPlot.join(list.map((t) => t || present[0].slice(0, 1).concat([present[0][0].map(() => null)])));
		return j;
	};
	const metrics = {};
	let cpuTotal = 0;
	if (cpuNode && cpuNode.length) {
		const step = (to - from) / cpuNode.length, perSec = 1000 / step;
		cpuTotal = cpuNode.reduce((a, b) => a + b, 0);
		metrics.cpu = { x: cpuNode.map((_, i) => from + (i + 0.5) * step), node: cpuNode.map((v) => v * perSec),
			proc: cpuProc ? cpuProc.map((v) => v * perSec) : cpuNode.map(() => null),
			labels: { node: `all of ${S.node}`, proc: S.pid ? `${picker.name(S.pid)}` : 'process' } };
	}
	const u = join([cols(util), cols(sm, 100), cols(tensor, 100)]);
	if (u) metrics.util = { x: u[0], util: u[1], sm: u[2], tensor: u[3] };
	const m = join([cols(used), cols(total)]);
	if (m) metrics.mem = { x: m[0], used: m[1], total: m[2] };
	const p = join([cols(power, 1, 3), cols(power, 1, 1), cols(power)]);
	if (p) metrics.power = { x: p[0], pmax: p[1], pmin: p[2], power: p[3] };
	const iv = (r) => (r ? r.intervals || [] : []);
	const busyBy = new Map();
	for (const g of app.gpus) busyBy.set(String(g), []);
	const obsBy = new Map();
	const byGpu = (r, m, item) => {
		for (const i of iv(r)) {
			const l = i.labels || {}, g = String(l.gpu ?? '?');
			if (!m.has(g)) m.set(g, []);
			m.get(g).push(item(i, l));
		}
		for (const v of m.values()) v.sort((a, b) => a.s - b.s);
	};
	byGpu(busy, busyBy, (i, l) => ({ s: i.start_ms, e: i.end_ms, src: l.source }));
	byGpu(observed, obsBy, (i, l) => ({ s: i.start_ms, e: i.end_ms, src: l.source, reason: l.reason }));
	for (const g of obsBy.keys()) if (!busyBy.has(g)) busyBy.set(g, []);
	// an answer cut at its limit holds every interval that starts before its last one: past
	// that, the band would show unknown time that is only not loaded
	let loadedTo;
	for (const r of [busy, observed]) {
		const list = iv(r);
		if (r && r.truncated && list.length) loadedTo = Math.min(loadedTo ?? Infinity, list[list.length - 1].start_ms);
	}
	const busyItems = busyBy.get(String(S.gpu)) || [];
	// extent where this GPU is known to exist: its metrics, else its busy intervals
	let ext = null;
	const xs = (metrics.util || metrics.mem || metrics.power || {}).x;
	if (xs && xs.length) ext = [xs[0], xs[xs.length - 1]];
	for (const items of [busyItems, obsBy.get(String(S.gpu)) || []]) if (items.length) {
		const a = items[0].s, b = items.reduce((m, i) => Math.max(m, i.e), -Infinity);
		ext = ext ? [Math.min(ext[0], a), Math.max(ext[1], b)] : [a, b];
	}
	const streams = new Map();
	for (const k of iv(kernels)) {
		const s = (k.attrs && k.attrs.stream) || '?';
		if (!streams.has(s)) streams.set(s, []);
		streams.get(s).push({ s: k.start_ms, e: k.end_ms, name: (k.attrs && k.attrs.name) || 'kernel', attrs: k.attrs || {} });
	}
	const threadMap = new Map();
	for (const t of iv(threads)) {
		const l = t.labels || {};
		const id = l.tid || l.thread || '?';
		if (!threadMap.has(id)) threadMap.set(id, { tid: id, name: l.thread || l.comm || '', items: [] });
		threadMap.get(id).items.push({ s: t.start_ms, e: t.end_ms, state: (t.attrs && t.attrs.state) || 'running', attrs: t.attrs || {} });
	}
	const kernelsNone = hasGpu && to - from <= KERNEL_SPAN && !streams.size;
	const threadsNone = S.pid && to - from <= THREAD_SPAN && !threadMap.size;
	const data = {
		metrics: Object.keys(metrics).length ? metrics : null,
		gpuNote: hasGpu ? '' : 'no GPU metrics from this node: the agent found no NVIDIA driver (libnvidia-ml) here; CPU samples and thread states still come',
		busy: hasGpu && (busyItems.length || ext) ? busyItems : null, busyExtent: ext,
		busyAll: hasGpu ? [...busyBy.entries()].sort((a, b) => +a[0] - +b[0]) : [],
		observedAll: obsBy, loadedTo,
		gpuLabel: hasGpu ? `GPU ${S.gpu}` : '',
		streams: [...streams.entries()].sort((a, b) => (+a[0] - +b[0]) || (a[0] < b[0] ? -1 : 1))
			.map(([s, items]) => ({ label: `stream ${s}`, items: items.sort((a, b) => a.s - b.s) })),
		kernelsTruncated: !!(kernels && kernels.truncated),
		kernelsNote: hasGpu && to - from > KERNEL_SPAN ? `zoom to ${fmtDur(KERNEL_SPAN)} or less to see each kernel`
			: kernelsNone ? 'no kernel traces here: they come from CUPTI inside the CUDA process; start it with CUDA_INJECTION64_PATH=<gpuscope>/libgpuscope_cupti.so' : '',
		threadsNote: S.pid && to - from > THREAD_SPAN ? `zoom to ${fmtDur(THREAD_SPAN)} or less to see each thread's states`
			: threadsNone ? `no thread states of ${picker.name(S.pid)} here: the agent records them for GPU processes, --pid PID, or every process with --all-processes (make run does)` : '',
		threads: [...threadMap.values()].sort((a, b) => +a.tid - +b.tid).slice(0, 128)
			.map((t) => ({ label: `${t.tid} ${t.name}`, items: t.items.sort((a, b) => a.s - b.s) })),
		threadsTruncated: !!(threads && threads.truncated) || threadMap.size > 128,
		procLabel: procLabel(),
	};
	const gpuData = (data.metrics && Object.keys(data.metrics).some((k) => k !== 'cpu')) || busyItems.length ||
		data.streams.length || (to - from > KERNEL_SPAN && ext);
	const empty = !cpuTotal && !gpuData && !data.threads.length;
	tlNote.classList.toggle('hidden', !empty);
	// what wastes GPU time here: the node's workloads (and the selector) over the view; findings
	// need GPU time, so a view without GPU data (a CPU-only node) asks nothing
	if (empty || !hasGpu || !(gpuData || ext || obsBy.size)) findings.clear();
	else findings.load({ from, to, selector: S.sel ? withMatcher(S.sel, 'node', S.node) : `{${nodeMatcher()}}` });
	if (empty) {
		const n = app.nodes.find((x) => x.node === S.node) || {};
		const inside = n.last_ms && n.last_ms >= from && (n.first_ms || n.last_ms) <= to;
		tlNote.replaceChildren(el('div', { class: 'empty-title' }, inside ? `Nothing from ${S.node} in this range matches` : `No data from ${S.node} in this range`),
			el('div', {}, n.last_ms ? `Its data spans ${fmtRange(n.first_ms || n.last_ms, n.last_ms, true)}. ` : '',
				inside ? 'Pick another process or GPU, or widen the range.' : 'Pick another range or node, or jump to the latest data.'),
			inside ? null : el('button', { class: 'btn primary', onclick: () => jumpLatest() }, 'Jump to the latest data'));
	}
	timeline.setData(data);
	if (!empty && !app.timings.firstPaint) {
		// first meaningful paint: the first timeline drawn with data (bench/ui reads it)
		await new Promise((r) => requestAnimationFrame(r));
		app.timings.firstPaint = performance.now();
		performance.mark('gpuscope:timeline-painted');
	}
	app.loads.timeline++;
	app.timings.timeline = performance.now() - t0;
	tlRoot.dataset.loads = String(app.loads.timeline);
}

function procLabel() {
	const p = app.procs.find((x) => x.pid === S.pid);
	// what it runs beside its name: python3 (train.py)
	const what = p && p.program && p.program !== p.comm ? ` (${p.program})` : '';
	return p ? `CPU: threads of ${p.pid} ${p.comm}${what}` : S.pid ? `CPU: threads of process ${S.pid}` : 'CPU threads';
}

// ---- flame graph data ---------------------------------------------------------------------
let flAbort = null;
// why a kind may have no samples at all, before the generic advice
const KIND_WHY = {
	offcpu_ns: 'off-CPU stacks are recorded for the processes whose thread states the agent follows (GPU processes, --pid PID, or --all-processes); ',
	gpu_kernel_ns: 'GPU kernel time comes from CUPTI inside the CUDA process: start it with CUDA_INJECTION64_PATH set to the libgpuscope_cupti.so of your gpuscope build (`make run` prints its absolute path); ',
	cuda_sync_ns: 'CUDA sync time comes from the agent\'s uprobes on libcuda in processes that use the GPU; ',
};

function flameSelector() {
	const s = S.sel ? withMatcher(S.sel, 'node', S.node) : `{${nodeMatcher()}}`;
	return S.fl === 'proc' && S.pid ? withMatcher(s, 'pid', S.pid) : s;
}

async function loadFlame() {
	if (!app.ready) return;
	if (flAbort) flAbort.abort();
	const ac = (flAbort = new AbortController());
	const t0 = performance.now();
	const b = S.bfrom !== undefined ? [S.bfrom, S.bto] : [S.from, S.to];
	const selectorStr = flameSelector();
	const diff = S.afrom !== undefined;
	const p = { from: b[0], to: b[1], selector: selectorStr, kind: S.kind, gpu_idle: S.idle && S.gpu !== undefined ? S.gpu : undefined,
		group_by: S.grp || undefined, view: pyView() ? 'python' : undefined };
	pyBox.checked = pyView();
	let r;
	try {
		r = diff ? await api.get('diff', { ...p, from: S.afrom, to: S.ato, from2: b[0], to2: b[1], selector2: selectorStr }, { signal: ac.signal })
			: await api.get('flamegraph', p, { signal: ac.signal });
		selector.setError('');
	} catch (e) {
		if (e.name === 'AbortError') return;
		if (e.kind === 'bad') {
			selector.setError(e.message);
			return;
		}
		return failed(e);
	}
	if (ac.signal.aborted) return;
	const root = r.root || r;
	const unit = r.unit || (S.kind === 'cpu' ? 'samples' : 'ns');
	const total = diff ? (root.value || 0) + (root.value2 || 0) : root.value || 0;
	const kindName = State.KINDS.find(([k]) => k === S.kind)[1];
	const rng = (a, z) => `${fmtRange(a, z)} (${fmtDur(z - a)})`;
	flameInfo.replaceChildren(...[
		el('span', { class: 'chip' }, kindName),
		diff ? el('span', { class: 'chip a' }, 'A ', rng(S.afrom, S.ato)) : null,
		el('span', { class: 'chip' + (diff ? ' b' : '') }, diff ? 'B ' : '', S.bfrom !== undefined ? rng(b[0], b[1]) : `whole view · ${rng(b[0], b[1])}`),
		el('span', { class: 'chip mono' }, selectorStr),
		S.grp ? el('span', { class: 'chip' }, `grouped by ${S.grp}`) : null,
		S.idle && S.gpu !== undefined ? el('span', { class: 'chip idle' + (r.gpu_sources && r.gpu_sources.estimate && r.gpu_sources.estimate.estimated_share > 0 ? ' estimated' : ''), id: 'idle-sources',
			title: ((r.gpu_sources && r.gpu_sources.estimate && r.gpu_sources.estimate.summary) || '') + '\nbusy/idle is decided where a source observed the GPU: CUPTI kernels (windows), GPM or NVML counters at 0 or 100 %; a duty-cycle window\'s idle samples also stand for the undecided time nearest to it (up to 120 s away); what no source decided and no window stands for is unknown, and no sample of it is kept' },
			`GPU ${S.gpu} idle only${sourcesText(r.gpu_sources)}`) : null,
		r.traced ? el('span', { class: 'chip', id: 'traced', title: 'GPU kernels are recorded only inside CUPTI trace windows (the budget, triggers, captures): this flame graph covers that share of the range' },
			`kernels traced in ${(100 * r.traced.fraction).toFixed(r.traced.fraction < 0.1 ? 2 : 1)}% of the range · ${r.traced.windows} window${r.traced.windows === 1 ? '' : 's'}${r.traced.truncated ? '+' : ''}`) : null,
		el('span', { class: 'chip' }, diff ? `A ${fmtValue(root.value || 0, unit)} · B ${fmtValue(root.value2 || 0, unit)}` : fmtValue(total, unit)),
		diff ? el('span', { class: 'legend-diff' }, el('i', { class: 'up' }), 'more in B', el('i', { class: 'down' }), 'less in B') : null,
	].filter(Boolean));
	if (!total) {
		flame.setTree({ name: 'all', value: 0, children: [] }, { unit, kind: S.kind });
		flameEmpty.replaceChildren(el('div', { class: 'empty-title' }, `No ${kindName} samples here`),
			el('div', {}, diff && S.bfrom === undefined ? 'Now drag on the timeline to select range B to compare with A.'
				: S.idle && r.gpu_sources && r.gpu_sources.estimate && r.gpu_sources.estimate.unknown >= 1 ? `No source observed GPU ${S.gpu} in this range (no trace window, no GPM or NVML reading): whether it was idle is unknown. Widen the range or pick another GPU.`
				: 'Nothing matches this range and selector: ' + (S.idle ? 'the GPU may never have been idle in it (untick "only while the GPU was idle"); ' : '') +
				(S.kind === 'gpu_kernel_ns' && !app.gpus.length ? `this node has no GPU (the agent's NVML found none on ${S.node}), so no kernel ran here; on a GPU node, ` : '') + (KIND_WHY[S.kind] || '') + 'widen the range, try another sample kind' + (S.fl === 'proc' ? ', the whole node' : '') + ', or clear the selector.'));
		flameEmpty.classList.remove('hidden');
		topBody.replaceChildren();
		matchLbl.classList.add('hidden');	// no stale share of the previous graph
	} else {
		flameEmpty.classList.add('hidden');
		flame.setTree(root, { unit, kind: S.kind, diff, focus: S.focus });
		renderTop(root, unit, diff);
		doSearch();
	}
	app.loads.flame++;
	app.timings.flame = performance.now() - t0;
	flameBox.dataset.loads = String(app.loads.flame);
}

// " · decided by nvml 80%, kernels 3% · estimated 62% (11 windows) · unknown 20%" from a GPU-idle
// answer's gpu_sources: which source decided busy/idle, how much of the answer the trace
// windows' samples stand for in time no source decided, and what stays unknown
function sourcesText(g) {
	if (!g) return '';
	const pct = (f) => `${(100 * f).toFixed(f > 0 && f < 0.01 ? 2 : 0)}%`;
	const by = Object.entries(g.by_source || {}).sort((a, b) => b[1] - a[1]).map(([k, f]) => `${k} ${pct(f)}`);
	const e = g.estimate;
	const est = e && e.estimated_share > 0 ? ` · estimated ${pct(e.estimated_share)} (${e.windows} window${e.windows === 1 ? '' : 's'}, ${pct(e.traced)} traced)` : '';
	const unknown = e ? e.unknown : Math.max(0, 1 - g.observed);
	return (by.length ? ` · decided by ${by.join(', ')}` : ' · no source observed it') + est + ` · unknown ${pct(unknown)}`;
}

function renderTop(root, unit, diff) {
	const tot = root.value || 1, tot2 = root.value2 || 1;
	const rows = topFunctions(root, diff).sort((a, b) => (diff ? b.total2 / tot2 - a.total2 / tot2 : b.self - a.self || b.total - a.total)).slice(0, 60);
	const bar = (x, cls = '') => el('td', { class: 'num ' + cls }, el('div', { class: 'bar', style: `width:${Math.min(100, x * 100)}%` }), el('span', {}, fmtPct(x)));
	topBody.replaceChildren(...rows.map((f) => el('tr', { title: `${f.name}\nself ${fmtValue(f.self, unit)}, total ${fmtValue(f.total, unit)}`, onclick: () => {
		search.value = '^' + f.name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '$';
		doSearch();
	} }, el('td', { class: 'fn' }, f.name),
	diff ? bar(f.total / tot, 'a') : bar(f.self / tot),
	diff ? bar(f.total2 / tot2, 'b') : bar(f.total / tot))));
	topTable.querySelector('thead tr').replaceChildren(el('th', {}, 'Function'),
		el('th', { class: 'num' }, diff ? 'Total A' : 'Self'), el('th', { class: 'num' }, diff ? 'Total B' : 'Total'));
}

function doSearch() {
	S.q = search.value;
	commit();
	const m = flame.search(S.q);
	matchLbl.classList.toggle('hidden', !m);
	if (m) matchLbl.textContent = m.share2 !== null ? `matched: A ${fmtPct(m.share)} · B ${fmtPct(m.share2)}` : `matched: ${fmtPct(m.share)}`;
}
search.addEventListener('input', debounce(doSearch, 120));

window.addEventListener('keydown', (e) => {
	if (e.target.tagName === 'INPUT') return;
	if (e.key === '-') zoom(2);
	else if (e.key === '+' || e.key === '=') zoom(0.5);
	else if (e.key === 'z') zoomToBrush();
	else if (e.key === 'Escape') {
		timeline.setBrush(null);
		S.bfrom = S.bto = undefined;
		commit();
		loadFlame();
	}
});
window.addEventListener('popstate', () => location.reload());

if (S.view === 'efficiency') {
	app.efficiency = showEfficiency($('#app'), S);
} else {
	syncControls();
	boot();
}
