// SPDX-License-Identifier: Apache-2.0
// Development aid only (never used by tests): serves .output/ui and answers the UI's API calls
// from an in-memory copy of the e2e dataset (tests/tools/ui_fixture.c) so the UI can be worked
// on before or without a server. Usage: node ui/dev/mock.mjs [PORT] [T0_SECONDS]
import http from 'node:http';
import { readFileSync, existsSync } from 'node:fs';
import { join, dirname, extname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '.output', 'ui');
const port = +(process.argv[2] || 8090);
const T0 = +(process.argv[3] || Math.floor(Date.now() / 1000) - 120) * 1000;
const busy0 = (o) => o < 20000 || (o >= 30000 && o < 50000);
const samples = [], intervals = [], series = new Map(), stacks = [];
const st = (...f) => (stacks.push(f), stacks.length - 1);
const S = { fwd: st('model_forward', 'train_step', 'main'), bwd: st('model_backward', 'train_step', 'main'),
	dec: st('decode_jpeg', 'DataLoader.next', 'main'), read: st('read_file', 'DataLoader.next', 'main'),
	log: st('write', 'log_flush', 'main'), futex: st('futex_wait', 'queue_get', 'train_step', 'main'),
	mm: st('matmul', 'serve', 'main') };
const L = (node, pid, tid, comm) => ({ node, pid, tid, comm, thread: comm });
for (let k = 0; k < 6000; k++) {
	const o = k * 10;
	if (busy0(o)) samples.push({ t: T0 + o + 5, l: L('node-a', '100', '100', 'train'), s: k % 5 < 3 ? S.fwd : S.bwd, v: 1 });
	else samples.push({ t: T0 + o + 5, l: L('node-a', '100', '101', 'train'), s: k % 4 < 3 ? S.dec : S.read, v: 1 });
	if (k % 10 === 5) samples.push({ t: T0 + o, l: L('node-a', '200', '200', 'logger'), s: S.log, v: 1 });
	samples.push({ t: T0 + o + 5, l: L('node-b', '300', '300', 'infer'), s: S.mm, v: 1 });
	for (const g of ['0', '1']) {
		const b = g === '1' ? o < 40000 : busy0(o), n = ((k * 7919 + +g * 31) % 100) / 100;
		const add = (name, v) => {
			const key = name + g;
			if (!series.has(key)) series.set(key, { name, labels: { node: 'node-a', gpu: g }, pts: [] });
			series.get(key).pts.push([T0 + o, v]);
		};
		add('gpu_utilization', b ? 100 : 0);
		add('gpu_sm_active', b ? 0.8 + 0.1 * n : 0);
		add('gpu_tensor_active', b ? 0.45 + 0.2 * n : 0);
		add('gpu_memory_used_bytes', (g === '1' ? 30 : 52) * 2 ** 30 + (o / 60000) * 8 * 2 ** 30);
		add('gpu_memory_total_bytes', 141 * 2 ** 30);
		add('gpu_power_watts', b ? 520 + 120 * n : 85 + 10 * n);
	}
}
for (let c = 0; c < 600; c++) {
	const o = c * 100, s = T0 + o;
	if (!busy0(o)) continue;
	intervals.push({ kind: 'gpu_kernel', labels: { node: 'node-a', gpu: '0', pid: '100' }, start_ms: s, end_ms: s + 70, attrs: { name: 'ampere_sgemm_128x64_tn', stream: '7' } });
	intervals.push({ kind: 'gpu_kernel', labels: { node: 'node-a', gpu: '0', pid: '100' }, start_ms: s + 70, end_ms: s + 100, attrs: { name: 'vectorized_elementwise_kernel<4, AddFunctor>', stream: '13' } });
	intervals.push({ kind: 'thread_state', labels: L('node-a', '100', '100', 'train'), start_ms: s, end_ms: s + 90, attrs: { state: 'running' } });
	intervals.push({ kind: 'thread_state', labels: L('node-a', '100', '100', 'train'), start_ms: s + 90, end_ms: s + 100, attrs: { state: 'runnable' } });
}
for (const [a, z] of [[0, 20000], [30000, 50000]]) intervals.push({ kind: 'gpu_busy', labels: { node: 'node-a', gpu: '0' }, start_ms: T0 + a, end_ms: T0 + z, attrs: {} });
intervals.push({ kind: 'gpu_busy', labels: { node: 'node-a', gpu: '1' }, start_ms: T0, end_ms: T0 + 40000, attrs: {} });
// which source decided busy/idle (as tests/tools/ui_fixture.c): GPU 1 ends unknown after a budget window
for (const [g, source, reason, a, z] of [['0', 'kernels', 'capture', 0, 35000], ['0', 'gpm', '', 35000, 50000], ['0', 'nvml', '', 50000, 60000],
	['1', 'nvml', '', 0, 40000], ['1', 'gpm', '', 40000, 44000], ['1', 'kernels', 'budget', 44000, 47000]])
	intervals.push({ kind: 'gpu_observed', labels: { node: 'node-a', gpu: g, source, ...(reason ? { reason } : {}) }, start_ms: T0 + a, end_ms: T0 + z, attrs: {} });
for (const [a, z] of [[20000, 30000], [50000, 60000]]) {
	intervals.push({ kind: 'thread_state', labels: L('node-a', '100', '100', 'train'), start_ms: T0 + a, end_ms: T0 + z, attrs: { state: 'blocked', reason: 'futex', stack_id: String(S.futex) } });
	for (let t = a; t < z; t += 200) intervals.push({ kind: 'thread_state', labels: L('node-a', '100', '101', 'dataloader'), start_ms: T0 + t, end_ms: T0 + t + 190, attrs: { state: 'running' } });
}
intervals.sort((a, b) => a.start_ms - b.start_ms);

function parseSel(s) {
	const m = [];
	for (const x of (s || '').replace(/^\{|\}$/g, '').matchAll(/(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g)) m.push(x.slice(1));
	return (l) => m.every(([n, op, v]) => {
		const a = l[n] || '';
		if (op === '=') return a === v;
		if (op === '!=') return a !== v;
		const r = new RegExp(`^(?:${v})$`).test(a);
		return op === '=~' ? r : !r;
	});
}
const tms = (s) => +s * 1000;
function tree(q, from, to) {
	const sel = parseSel(q.get('selector')), kind = q.get('kind') || 'cpu';
	let keep = () => true;
	if (q.get('gpu_idle')) {
		const busy = intervals.filter((i) => i.kind === 'gpu_busy' && i.labels.gpu === q.get('gpu_idle'));
		keep = (s) => !busy.some((b) => b.labels.node === s.l.node && s.t >= b.start_ms && s.t < b.end_ms);
	}
	const root = { name: 'all', value: 0, self: 0, children: [] };
	for (const s of samples) {
		if (kind !== 'cpu' || s.t < from || s.t >= to || !sel(s.l) || !keep(s)) continue;
		root.value += s.v;
		let n = root;
		for (const f of stacks[s.s].slice().reverse()) {
			let c = n.children.find((x) => x.name === f);
			if (!c) n.children.push((c = { name: f, value: 0, self: 0, children: [] }));
			c.value += s.v;
			n = c;
		}
		n.self += s.v;
	}
	return root;
}
function merge(a, b) {
	const r = { name: a ? a.name : b.name, value: a ? a.value : 0, value2: b ? b.value : 0, children: [] };
	const names = new Set([...(a ? a.children : []), ...(b ? b.children : [])].map((c) => c.name));
	for (const n of names) r.children.push(merge(a && a.children.find((c) => c.name === n), b && b.children.find((c) => c.name === n)));
	return r;
}
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml' };
http.createServer((req, res) => {
	const u = new URL(req.url, 'http://x'), q = u.searchParams, p = u.pathname;
	const json = (o, code = 200) => {
		res.writeHead(code, { 'Content-Type': 'application/json' });
		res.end(JSON.stringify(o));
	};
	const from = q.has('from') ? tms(q.get('from')) : 0, to = q.has('to') ? tms(q.get('to')) : 9e15;
	const all = [...samples.map((s) => s.l), ...intervals.map((i) => i.labels), ...[...series.values()].map((s) => s.labels)];
	if (p === '/api/v1/nodes') return json({ nodes: [{ node: 'node-a', first_ms: T0, last_ms: T0 + 60000 }, { node: 'node-b', first_ms: T0, last_ms: T0 + 60000 }] });
	if (p === '/api/v1/labels') return json({ labels: [...new Set(all.flatMap(Object.keys))].sort() });
	let m = p.match(/^\/api\/v1\/label\/(\w+)\/values$/);
	if (m) {
		const sel = parseSel(q.get('selector'));
		return json({ values: [...new Set(all.filter(sel).map((l) => l[m[1]]).filter(Boolean))].sort() });
	}
	if (p === '/api/v1/series') {
		const sel = parseSel(q.get('selector')), n = +(q.get('buckets') || 500);
		const out = [];
		for (const s of series.values()) {
			if (s.name !== q.get('name') || !sel(s.labels)) continue;
			const pts = s.pts.filter(([t]) => t >= from && t < to);
			if (pts.length <= n) {
				out.push({ labels: s.labels, points: pts.map(([t, v]) => [t, v, v, v]) });
				continue;
			}
			const w = (to - from) / n, b = [];
			for (const [t, v] of pts) {
				const i = Math.floor((t - from) / w);
				if (!b[i]) b[i] = [from + i * w, v, 0, v, 0];
				b[i][1] = Math.min(b[i][1], v);
				b[i][3] = Math.max(b[i][3], v);
				b[i][2] += v;
				b[i][4]++;
			}
			out.push({ labels: s.labels, points: b.filter(Boolean).map((x) => [x[0], x[1], x[2] / x[4], x[3]]) });
		}
		return json({ series: out });
	}
	if (p === '/api/v1/intervals') {
		const sel = parseSel(q.get('selector')), lim = +(q.get('limit') || 10000);
		const r = intervals.filter((i) => i.kind === q.get('kind') && i.end_ms > from && i.start_ms < to && sel(i.labels));
		return json({ intervals: r.slice(0, lim), truncated: r.length > lim });
	}
	if (p === '/api/v1/flamegraph') {
		const r = tree(q, from, to);
		return json({ unit: 'samples', total: r.value, root: r });
	}
	if (p === '/api/v1/diff') return json({ unit: 'samples', root: merge(tree(q, from, to), tree(q, tms(q.get('from2')), tms(q.get('to2')))) });
	m = p.match(/^\/api\/v1\/stack\/(\d+)$/);
	if (m) return json({ frames: (stacks[+m[1]] || []).map((f) => ({ function: f, module: 'train' })) });
	if (p.startsWith('/api/')) return json({ error: 'not found' }, 404);
	const f = join(root, p === '/' ? 'index.html' : p.slice(1));
	if (!existsSync(f)) return json({ error: 'not found' }, 404);
	res.writeHead(200, { 'Content-Type': types[extname(f)] || 'application/octet-stream' });
	res.end(readFileSync(f));
}).listen(port, '127.0.0.1', () => console.log(`mock on http://127.0.0.1:${port} T0=${T0 / 1000}`));
