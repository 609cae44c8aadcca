// SPDX-License-Identifier: Apache-2.0
// End-to-end test of the web UI in a real browser (Debian's chromium driven by playwright-core)
// against a real gpuscope-server loaded by tests/tools/ui_fixture with the e2e dataset.
// Expected flame graphs are computed here from the dataset's rules (ui_fixture.c, load_e2e).
// Usage: node tests/e2e/ui_e2e.mjs --url URL --empty-url URL --t0 SECONDS --out DIR [--server-pid PID]
import { chromium } from '../../ui/node_modules/playwright-core/index.mjs';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const arg = (n, d) => {
	const i = process.argv.indexOf(n);
	return i > 0 ? process.argv[i + 1] : d;
};
const URL0 = arg('--url'), EMPTY = arg('--empty-url'), T0 = +arg('--t0') * 1000, OUT = arg('--out', '.output/e2e');
const SERVER_PID = +arg('--server-pid', 0);
mkdirSync(OUT, { recursive: true });

// ---- the dataset's rules (keep in step with tests/tools/ui_fixture.c) ----------------------
const busy0 = (o) => o < 20000 || (o >= 30000 && o < 50000);
function cpuSamples() {
	const s = [];
	for (let k = 0; k < 6000; k++) {
		const o = k * 10;
		if (busy0(o)) s.push({ t: T0 + o + 5, comm: 'train', stack: ['main', 'train_step', k % 5 < 3 ? 'model_forward' : 'model_backward'] });
		else s.push({ t: T0 + o + 5, comm: 'train', stack: ['main', 'DataLoader.next', k % 4 < 3 ? 'decode_jpeg' : 'read_file'] });
		if (k % 10 === 5) s.push({ t: T0 + o, comm: 'logger', stack: ['main', 'log_flush', 'write'] });
	}
	return s;
}
const SAMPLES = cpuSamples();
// frame name -> share of the total, for samples of node-a in [from, to) (ms, as the UI sends them)
function expected(from, to, { idle = false, comm = null } = {}) {
	const f = Math.round(from), z = Math.round(to), tot = new Map();
	let n = 0;
	for (const s of SAMPLES) {
		if (s.t < f || s.t >= z || (comm && s.comm !== comm) || (idle && busy0(s.t - T0))) continue;
		n++;
		for (const fr of new Set(s.stack)) tot.set(fr, (tot.get(fr) || 0) + 1);
	}
	return { n, shares: new Map([...tot].map(([k, v]) => [k, v / n])) };
}

// ---- harness ----------------------------------------------------------------------------
let failures = 0, passes = 0;
const errors = [];
function check(cond, what) {
	if (cond) {
		passes++;
		console.log(`  ok   ${what}`);
	} else {
		failures++;
		console.log(`  FAIL ${what}`);
	}
}
function near(a, b, tol = 0.0005) {
	return Math.abs(a - b) <= tol;
}

const userDir = mkdtempSync(join(tmpdir(), 'gpuscope-chromium-'));
const ctx = await chromium.launchPersistentContext(userDir, {
	executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1440, height: 1000 },
	args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
		'--disable-component-update', '--disable-sync'],
});
const page = ctx.pages()[0] || (await ctx.newPage());
page.on('console', (m) => {
	if (m.type() === 'error' || m.type() === 'warning') errors.push(`console ${m.type()}: ${m.text()}`);
});
page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
page.on('response', (r) => {
	if (r.status() >= 400) errors.push(`HTTP ${r.status()} ${r.url()}`);
});

const loads = (what) => page.evaluate((w) => window.__gpuscope && window.__gpuscope.loads[w], what);
async function waitLoad(what, after) {
	await page.waitForFunction(([w, a]) => window.__gpuscope && window.__gpuscope.loads[w] > a, [what, after], { timeout: 20000 });
	await page.waitForTimeout(150);
}
const frames = () => page.evaluate(() => window.__gpuscope.flame.frames(60));
const rootValue = () => page.evaluate(() => window.__gpuscope.flame.value[0] || 0);
async function checkFlame(exp, what) {
	const fr = await frames();
	const byName = new Map();
	for (const f of fr) if (!byName.has(f.name)) byName.set(f.name, f.share);
	check((await rootValue()) === exp.n, `${what}: ${exp.n} samples (got ${await rootValue()})`);
	const want = [...exp.shares].filter(([k]) => k !== 'main').sort((a, b) => b[1] - a[1]);
	const got = fr.filter((f) => f.depth > 0 && f.name !== 'main').map((f) => f.name);
	check(JSON.stringify(got.slice(0, 3)) === JSON.stringify(want.slice(0, 3).map((w) => w[0])),
		`${what}: widest frames ${got.slice(0, 3).join(', ')} (want ${want.slice(0, 3).map((w) => w[0]).join(', ')})`);
	for (const [name, share] of want)
		check(near(byName.get(name) || 0, share), `${what}: ${name} ${((byName.get(name) || 0) * 100).toFixed(2)}% (want ${(share * 100).toFixed(2)}%)`);
	const extra = fr.filter((f) => f.depth > 0 && !exp.shares.has(f.name));
	check(!extra.length, `${what}: no unexpected frames${extra.length ? ' (' + extra.map((f) => f.name).join(',') + ')' : ''}`);
}
const shot = (name) => page.screenshot({ path: join(OUT, `${name}.png`), fullPage: true });

try {
	// 1. page loads with no console errors; the widest frames of the whole dataset
	console.log('load');
	const t0 = Date.now();
	await page.goto(URL0 + '/');
	await waitLoad('flame', 0);
	await page.waitForFunction(() => window.__gpuscope.loads.timeline > 0);
	console.log(`  (first load ${Date.now() - t0} ms)`);
	const st = await page.evaluate(() => ({ ...window.__gpuscope.state }));
	check(st.node === 'node-a' && st.gpu === '0' && st.pid === '100', `default node/gpu/process: ${st.node}/${st.gpu}/${st.pid}`);
	check(st.from <= T0 && st.to >= T0 + 60000, 'default view covers the data');
	await checkFlame(expected(st.from, st.to), 'whole range');
	const top = await page.$$eval('#top tbody tr', (rs) => rs.slice(0, 3).map((r) => r.children[0].textContent));
	check(top[0] === 'model_forward', `top functions table starts with model_forward (${top.join(', ')})`);
	const tl = await page.evaluate(() => window.__gpuscope.timeline.rows.filter((r) => !r.head).map((r) => r.label));
	check(tl.includes('stream 7') && tl.includes('stream 13') && tl.includes('GPU 0 ◂') && tl.includes('GPU 1'), `kernel lanes and a busy band per GPU: ${tl.join(', ')}`);
	const bands = await page.evaluate(() => window.__gpuscope.timeline.rows.filter((r) => r.kind === 'busy').map((r) => r.items.length));
	check(bands.join() === '2,1', `busy intervals per GPU band: ${bands.join(',')} (want 2,1)`);
	check(['100 train', '101 dataloader', '102 pin_memory'].every((x) => tl.includes(x)), 'one CPU strip per thread of process 100');
	check((await page.$$('.panel:not([data-panel="cpu"])')).length === 3, 'three GPU metric panels');
	check((await page.$$('.panel[data-panel="cpu"]')).length === 1, 'a CPU samples panel');
	const pts = await page.evaluate(() => window.__gpuscope.timeline.plots.map((p) => p.cols.x.length));
	const plotW = await page.evaluate(() => window.__gpuscope.timeline.plotW);
	check(pts.every((n) => n > 100 && n <= Math.round(plotW)), `metric series downsampled to the plot width (${pts.join(',')} points, ${Math.round(plotW)} px)`);
	await shot('timeline');

	// 2. hover a blocked strip: state, duration and the blocking stack from /api/v1/stack/ID
	const hov = await page.evaluate((t) => {
		const tl = window.__gpuscope.timeline, r = tl.rows.find((x) => x.label === '100 train');
		const b = tl.lanes.getBoundingClientRect();
		return { x: b.left + tl.xOf(t), y: b.top + r.y + 7 };
	}, T0 + 25000);
	await page.mouse.move(hov.x, hov.y);
	await page.waitForFunction(() => [...document.querySelectorAll('.tooltip')].some((t) => !t.classList.contains('hidden') && t.textContent.includes('futex_wait')), null, { timeout: 10000 }).catch(() => {});
	const tip = await page.evaluate(() => [...document.querySelectorAll('.tooltip')].filter((t) => !t.classList.contains('hidden')).map((t) => t.textContent).join('|'));
	check(/blocked/.test(tip) && /10\.0 s/.test(tip) && /futex_wait/.test(tip) && /queue_get/.test(tip), `hover on a blocked strip shows state, duration, stack (${tip.slice(0, 120)})`);
	await page.screenshot({ path: join(OUT, 'hover.png') });
	await page.mouse.move(5, 5);

	// 2b. a kernel lane's hover names the kernel
	const kh = await page.evaluate((t) => {
		const tl = window.__gpuscope.timeline, r = tl.rows.find((x) => x.label === 'stream 7');
		const b = tl.lanes.getBoundingClientRect();
		return { x: b.left + tl.xOf(t), y: b.top + r.y + 7 };
	}, T0 + 10030);
	await page.mouse.move(kh.x, kh.y);
	await page.waitForTimeout(200);
	const ktip = await page.evaluate(() => [...document.querySelectorAll('.tooltip')].filter((t) => !t.classList.contains('hidden')).map((t) => t.textContent).join('|'));
	check(ktip.includes('ampere_sgemm_128x64_tn'), `hover on a kernel lane names the kernel (${ktip.slice(0, 60)})`);
	await page.mouse.move(5, 5);

	// 3. brushing a range (real mouse drag on the timeline) gives that range's shares
	console.log('brush');
	let n0 = await loads('flame');
	const box = await page.evaluate(([a, b]) => {
		const tl = window.__gpuscope.timeline, r = tl.root.getBoundingClientRect();
		return { x0: r.left + tl.xOf(a), x1: r.left + tl.xOf(b), y: r.top + 120 };
	}, [T0 + 21000, T0 + 29000]);
	await page.mouse.move(box.x0, box.y);
	await page.mouse.down();
	await page.mouse.move((box.x0 + box.x1) / 2, box.y, { steps: 4 });
	await page.mouse.move(box.x1, box.y, { steps: 4 });
	await page.mouse.up();
	await waitLoad('flame', n0);
	const br = await page.evaluate(() => [window.__gpuscope.state.bfrom, window.__gpuscope.state.bto]);
	check(Math.abs(br[0] - (T0 + 21000)) < 200 && Math.abs(br[1] - (T0 + 29000)) < 200, `brush set to ~[21 s, 29 s) (${((br[0] - T0) / 1000).toFixed(2)}, ${((br[1] - T0) / 1000).toFixed(2)})`);
	await checkFlame(expected(br[0], br[1]), 'brushed idle window');
	check(new URL(page.url()).searchParams.has('bfrom'), 'the brush is in the URL');
	await shot('brushed');

	// 4. the URL holds the whole state: a fresh page on it shows the same flame graph
	const shared = page.url();
	const p2 = await ctx.newPage();
	p2.on('pageerror', (e) => errors.push(`page error (shared): ${e.message}`));
	await p2.goto(shared);
	await p2.waitForFunction(() => window.__gpuscope && window.__gpuscope.loads.flame > 0, null, { timeout: 20000 });
	const v2 = await p2.evaluate(() => window.__gpuscope.flame.value[0]);
	check(v2 === expected(br[0], br[1]).n, `shared URL reproduces the flame graph (${v2} samples)`);
	await p2.close();

	// 4b. zooming in refetches the metrics at full resolution (raw 10 ms points)
	{
		const p3 = await ctx.newPage();
		await p3.goto(`${URL0}/?node=node-a&gpu=0&pid=100&from=${T0}&to=${T0 + 60000}&bfrom=${T0 + 5000}&bto=${T0 + 6000}`);
		await p3.waitForFunction(() => window.__gpuscope && window.__gpuscope.loads.timeline > 0, null, { timeout: 20000 });
		const n3 = await p3.evaluate(() => window.__gpuscope.loads.timeline);
		await p3.click('#zoomsel');
		await p3.waitForFunction((n) => window.__gpuscope.loads.timeline > n, n3, { timeout: 20000 });
		const xs = await p3.evaluate(() => Array.from(window.__gpuscope.timeline.plots[0].cols.x));
		const steps = new Set(xs.slice(1).map((x, i) => Math.round(x - xs[i])));
		check(xs.length > 90 && xs.length < 130 && steps.size === 1 && steps.has(10), `zoomed to ~1 s: raw 10 ms points (${xs.length} points, steps ${[...steps].join(',')} ms)`);
		await p3.close();
	}

	// 5. GPU-idle toggle over the whole view
	console.log('gpu idle');
	n0 = await loads('flame');
	await page.keyboard.press('Escape');	// clear the brush: whole view
	await waitLoad('flame', n0);
	n0 = await loads('flame');
	await page.click('#idle');
	await waitLoad('flame', n0);
	await checkFlame(expected(st.from, st.to, { idle: true }), 'only while GPU 0 was idle');
	check(new URL(page.url()).searchParams.get('idle') === '1', 'the toggle is in the URL');
	await shot('gpu-idle');
	n0 = await loads('flame');
	await page.click('#idle');
	await waitLoad('flame', n0);

	// 5b. the Python-only toggle: off for this (native) fixture's process by default, in the
	// URL and the request when ticked (the fixture's frames have no Python frame: same graph)
	check(!(await page.isChecked('#pyonly')), 'Python only: off by default for a native process');
	n0 = await loads('flame');
	const pyReq = page.waitForRequest((r) => r.url().includes('/api/v1/flamegraph') && r.url().includes('view=python'));
	await page.click('#pyonly');
	await pyReq;
	await waitLoad('flame', n0);
	check(new URL(page.url()).searchParams.get('py') === '1', 'Python only: in the URL (py=1)');
	await checkFlame(expected(st.from, st.to), 'Python only leaves stacks without Python frames as they are');
	n0 = await loads('flame');
	await page.click('#pyonly');
	await waitLoad('flame', n0);
	check(new URL(page.url()).searchParams.get('py') === '0', 'Python only: off again (py=0)');

	// 6. search with match share
	await page.fill('#search', 'DataLoader');
	await page.waitForTimeout(400);
	const m = await page.textContent('#match');
	const e6 = expected(st.from, st.to);
	check(m.includes((e6.shares.get('DataLoader.next') * 100).toFixed(1) + '%'), `search match share: ${m}`);
	await page.fill('#search', '');
	await page.waitForTimeout(300);

	// 7. the selector filters, typed with completion: {co -> comm=, then a value
	console.log('selector');
	await page.click('.sel-input');
	await page.keyboard.type('{co');
	await page.waitForSelector('.sel-list:not(.hidden) .sel-item', { timeout: 10000 });
	const names = await page.$$eval('.sel-item', (xs) => xs.map((x) => x.textContent));
	check(names.includes('comm'), `label completion offers comm (${names.join(',')})`);
	await page.keyboard.press('Tab');
	await page.waitForFunction(() => [...document.querySelectorAll('.sel-item')].some((x) => x.textContent === 'logger'), null, { timeout: 10000 });
	const vals = await page.$$eval('.sel-item', (xs) => xs.map((x) => x.textContent));
	check(vals.includes('logger') && vals.includes('train'), `value completion offers comm values (${vals.join(',')})`);
	await page.keyboard.type('logg');
	await page.waitForTimeout(300);
	n0 = await loads('flame');
	await page.keyboard.press('Enter');	// picks "logger"
	await page.keyboard.press('Enter');	// applies
	await waitLoad('flame', n0);
	const selv = await page.inputValue('.sel-input');
	check(selv === '{comm="logger"}', `selector typed with completion: ${selv}`);
	await checkFlame(expected(st.from, st.to, { comm: 'logger' }), 'selector comm="logger"');
	await shot('selector');
	n0 = await loads('flame');
	await page.click('.sel-clear');
	await waitLoad('flame', n0);

	// 8. kind switch: off-CPU
	n0 = await loads('flame');
	await page.click('#kinds [data-kind="offcpu_ns"]');
	await waitLoad('flame', n0);
	const off = await frames();
	const offNames = off.filter((f) => f.depth === 1).map((f) => f.name);
	// blocked: main 60 s (futex 20 s + nanosleep 40 s), pin_memory_loop 54 s, of 114 s
	check(offNames.join() === 'main,pin_memory_loop', `off-CPU roots: ${offNames.join(', ')}`);
	check(near(off.find((f) => f.name === 'main').share, 60 / 114, 0.002), 'off-CPU: main 52.6% of blocked time');
	check(near(off.find((f) => f.name === 'pin_memory_loop').share, 54 / 114, 0.002), 'off-CPU: pin_memory_loop 47.4% of blocked time');
	n0 = await loads('flame');
	await page.click('#kinds [data-kind="cpu"]');
	await waitLoad('flame', n0);

	// 9. diff: A = a busy window, B = an idle window
	console.log('diff');
	await page.goto(`${URL0}/?node=node-a&gpu=0&pid=100&from=${T0 - 1000}&to=${T0 + 61000}&bfrom=${T0 + 2000}&bto=${T0 + 18000}`);
	await waitLoad('flame', 0);
	n0 = await loads('flame');
	await page.click('#cmp');
	await waitLoad('flame', n0);
	n0 = await loads('flame');
	const bx = await page.evaluate(([a, b]) => {
		const tl = window.__gpuscope.timeline, r = tl.root.getBoundingClientRect();
		return { x0: r.left + tl.xOf(a), x1: r.left + tl.xOf(b), y: r.top + 120 };
	}, [T0 + 51000, T0 + 59000]);
	await page.mouse.move(bx.x0, bx.y);
	await page.mouse.down();
	await page.mouse.move(bx.x1, bx.y, { steps: 6 });
	await page.mouse.up();
	await waitLoad('flame', n0);
	const d = await page.evaluate(() => {
		const f = window.__gpuscope.flame, out = {};
		for (let i = 0; i < f.n; i++) out[f.names[f.name[i]]] = f.delta ? f.delta[i] : null;
		return { diff: f.diff, out };
	});
	check(d.diff && d.out.decode_jpeg > 0.5 && d.out.model_forward < -0.5, `diff: decode_jpeg grew (${(d.out.decode_jpeg * 100).toFixed(1)} pts), model_forward shrank (${(d.out.model_forward * 100).toFixed(1)} pts)`);
	await shot('diff');

	// 10. a CPU-only node: no GPU panels, its own flame graph
	console.log('cpu-only node');
	n0 = await loads('flame');
	await page.goto(`${URL0}/?node=node-b`);
	await waitLoad('flame', 0);
	check((await page.$$('.panel:not([data-panel="cpu"])')).length === 0, 'node-b: no GPU panels');
	check((await page.$$('.panel[data-panel="cpu"]')).length === 1, 'node-b: its CPU samples panel');
	{
		// empty states say why: no GPU, no kernel traces, no thread states
		const notes = await page.evaluate(() => window.__gpuscope.timeline.rows.filter((r) => r.head).map((r) => `${r.head}: ${r.note || ''}`).join(' | '));
		check(/no GPU metrics from this node/.test(notes), `node-b: the timeline says why there is no GPU (${notes.slice(0, 160)})`);
		check(/--all-processes/.test(notes), 'node-b: the empty thread strips say how to get them (--all-processes)');
		n0 = await loads('flame');
		await page.click('#kinds [data-kind="gpu_kernel_ns"]');
		await waitLoad('flame', n0);
		const why = await page.textContent('#flame-empty');
		check(await page.isVisible('#flame-empty') && why.includes('CUDA_INJECTION64_PATH'), `node-b: the empty GPU-kernel view names CUDA_INJECTION64_PATH (${why.slice(0, 80)})`);
		n0 = await loads('flame');
		await page.click('#kinds [data-kind="offcpu_ns"]');
		await waitLoad('flame', n0);
		check((await page.textContent('#flame-empty')).includes('--all-processes'), 'node-b: the empty off-CPU view says which processes are followed');
		n0 = await loads('flame');
		await page.click('#kinds [data-kind="gpu_kernel_ns"]');
		await waitLoad('flame', n0);
		const gk = await page.textContent('#flame-empty');
		check(gk.includes('this node has no GPU') && !gk.includes('<gpuscope>'), `node-b: the empty GPU-kernel view says the node has no GPU, no placeholder path: ${gk}`);
		n0 = await loads('flame');
		await page.click('#kinds [data-kind="cpu"]');
		await waitLoad('flame', n0);
	}
	const fb = await frames();
	check(fb.find((f) => f.name === 'matmul') && near(fb.find((f) => f.name === 'matmul').share, 1), 'node-b: matmul is 100%');
	check(await page.isDisabled('#idle'), 'node-b: GPU-idle toggle disabled');

	// 11. a range with no data says so and offers the way back
	await page.goto(`${URL0}/?node=node-a&from=${T0 - 7200e3}&to=${T0 - 3600e3}`);
	await waitLoad('flame', 0);
	await page.waitForFunction(() => window.__gpuscope.loads.timeline > 0);
	check(await page.isVisible('#tl-empty'), 'empty range: timeline says there is no data');
	check(await page.isVisible('#flame-empty'), 'empty range: flame graph says there is no data');
	await shot('empty-range');
	await page.click('#tl-empty button');
	await waitLoad('timeline', 1);
	check(!(await page.isVisible('#tl-empty')), '"Jump to the latest data" brings the data back');

	// 11b. the first hour: process picker, samples chart and brush, flame graph of the process,
	// group-by, URL round trip with pid=, dates on multi-day ranges, no stale search share
	console.log('first hour');
	await page.goto(`${URL0}/?node=node-a&gpu=0&from=${T0 - 1000}&to=${T0 + 61000}`);
	await waitLoad('flame', 0);
	await page.waitForFunction(() => window.__gpuscope.loads.timeline > 0);
	const all = expected(T0 - 1000, T0 + 61000);
	await page.click('#proc');
	await page.waitForSelector('#proc-list .picker-item', { timeout: 10000 });
	const rows = await page.$$eval('#proc-list .picker-item', (xs) => xs.map((x) => x.textContent));
	check(rows.length === 2 && rows[0].startsWith('100train') && rows[1].startsWith('200logger') && /90\.9%/.test(rows[0]),
		`picker: processes ranked by CPU samples with their names and shares (${rows.join(' | ')})`);
	await page.fill('#proc-search', 'logg');
	const rows2 = await page.$$eval('#proc-list .picker-item', (xs) => xs.map((x) => x.dataset.pid));
	check(rows2.join() === '200', `picker: search by name (${rows2.join()})`);
	n0 = await loads('flame');
	await page.click('#proc-list .picker-item[data-pid="200"]');
	await waitLoad('flame', n0);
	await page.waitForTimeout(300);
	const u1 = new URL(page.url()).searchParams;
	check(u1.get('pid') === '200' && u1.get('fl') === 'proc', `picking a process: pid=200, fl=proc in the URL (${u1})`);
	await checkFlame(expected(T0 - 1000, T0 + 61000, { comm: 'logger' }), 'the flame graph follows the picked process');
	n0 = await loads('flame');
	await page.click('#scope [data-scope=""]');
	await waitLoad('flame', n0);
	check((await rootValue()) === all.n, `"Whole node" brings every process back (${await rootValue()})`);
	// the samples chart: the node's samples per second add up to the view's samples; brushing it
	const cpu = await page.evaluate(() => {
		const p = window.__gpuscope.timeline.plots.find((x) => x.def.id === 'cpu');
		const x = p.cols.x, step = x.length > 1 ? x[1] - x[0] : 0;
		return { sum: p.cols.node.reduce((a, b) => a + b, 0) * step / 1000, proc: p.cols.proc.reduce((a, b) => a + (b || 0), 0) * step / 1000 };
	});
	check(Math.abs(cpu.sum - all.n) < 0.5 && Math.abs(cpu.proc - 600) < 0.5, `samples chart: ${cpu.sum.toFixed(1)} samples of the node (want ${all.n}), ${cpu.proc.toFixed(1)} of the process (want 600)`);
	n0 = await loads('flame');
	const cb = await page.evaluate(([a, b]) => {
		const tl = window.__gpuscope.timeline, r = document.querySelector('.panel[data-panel="cpu"]').getBoundingClientRect();
		const rr = tl.root.getBoundingClientRect();
		return { x0: rr.left + tl.xOf(a), x1: rr.left + tl.xOf(b), y: r.top + r.height / 2 };
	}, [T0 + 31000, T0 + 39000]);
	await page.mouse.move(cb.x0, cb.y);
	await page.mouse.down();
	await page.mouse.move(cb.x1, cb.y, { steps: 6 });
	await page.mouse.up();
	await waitLoad('flame', n0);
	const br2 = await page.evaluate(() => [window.__gpuscope.state.bfrom, window.__gpuscope.state.bto]);
	check(Math.abs(br2[0] - (T0 + 31000)) < 300 && Math.abs(br2[1] - (T0 + 39000)) < 300, `brush on the samples chart: ~[31 s, 39 s) (${((br2[0] - T0) / 1000).toFixed(2)}, ${((br2[1] - T0) / 1000).toFixed(2)})`);
	await checkFlame(expected(br2[0], br2[1]), 'brushed on the samples chart');
	await shot('first-hour');
	// group the root by process
	n0 = await loads('flame');
	await page.selectOption('#groupby', 'pid,comm');
	await waitLoad('flame', n0);
	const g1 = await frames();
	const groups = g1.filter((f) => f.depth === 1).map((f) => f.name).sort();
	check(groups.join() === '100 train,200 logger', `group by process: the root's children are processes (${groups.join(', ')})`);
	check(new URL(page.url()).searchParams.get('grp') === 'pid,comm', 'group-by is in the URL');
	n0 = await loads('flame');
	await page.selectOption('#groupby', 'thread');
	await waitLoad('flame', n0);
	const g2 = (await frames()).filter((f) => f.depth === 1).map((f) => f.name).sort();
	check(g2.join() === 'logger,train', `group by thread (${g2.join(', ')})`);
	n0 = await loads('flame');
	await page.selectOption('#groupby', '');
	await waitLoad('flame', n0);
	// URL round trip with pid=: a pid without samples here stays, a followed process reloads as such
	await page.goto(`${URL0}/?node=node-a&gpu=0&pid=4242&from=${T0 - 1000}&to=${T0 + 61000}`);
	await waitLoad('flame', 0);
	await page.waitForTimeout(500);
	check((await page.evaluate(() => window.__gpuscope.state.pid)) === '4242' && new URL(page.url()).searchParams.get('pid') === '4242',
		'pid= of the URL is kept though it has no samples here');
	check((await page.textContent('#proc')).includes('4242 (no CPU samples here)'), `the picker says so (${await page.textContent('#proc')})`);
	await page.goto(`${URL0}/?node=node-a&gpu=0&pid=200&fl=proc&grp=comm&from=${T0 - 1000}&to=${T0 + 61000}`);
	await waitLoad('flame', 0);
	check((await rootValue()) === 600 && (await frames()).filter((f) => f.depth === 1).map((f) => f.name).join() === 'logger',
		'URL with pid=200&fl=proc&grp=comm: the process\'s flame graph, grouped');
	// dates on a multi-day range
	await page.goto(`${URL0}/?node=node-a&gpu=0&from=${T0 - 2 * 86400e3}&to=${T0 + 61000}`);
	await waitLoad('flame', 0);
	const title = await page.evaluate(() => document.querySelector('#tl-card .sec-sub').textContent);
	const chips = await page.textContent('.flame-info');
	check((title.match(/\d{4}-\d\d-\d\d/g) || []).length === 2 && (chips.match(/\d{4}-\d\d-\d\d/g) || []).length >= 2,
		`a multi-day range shows dates (${title}; ${chips.slice(0, 90)})`);
	// no stale search share: the share follows the graph of the new kind
	await page.goto(`${URL0}/?node=node-a&gpu=0&from=${T0 - 1000}&to=${T0 + 61000}`);
	await waitLoad('flame', 0);
	await page.fill('#search', 'decode_jpeg');
	await page.waitForTimeout(400);
	const m1 = await page.textContent('#match');
	n0 = await loads('flame');
	await page.click('#kinds [data-kind="cuda_sync_ns"]');
	await waitLoad('flame', n0);
	const m2 = await page.evaluate(() => {
		const e = document.querySelector('#match'), r = window.__gpuscope.flame.search('decode_jpeg');
		return { hidden: e.classList.contains('hidden'), text: e.textContent, share: r ? r.share : null };
	});
	check(m2.hidden ? !m2.share : !m2.text.includes(m1.replace('matched: ', '')) || m2.share > 0,
		`search share after switching kind is the new graph's (${m1} -> ${m2.hidden ? 'hidden' : m2.text})`);
	await page.fill('#search', '');
	await page.waitForTimeout(300);

	// 11c. which source decided each busy/idle range (ui_fixture.c: GPU 1 NVML [0,40) s, GPM
	// [40,44), a budget window [44,47), nothing after; GPU 0 a capture window [0,35), GPM
	// [35,50), NVML [50,60)), read from the band's pixels and its hover
	console.log('busy/idle sources');
	await page.goto(`${URL0}/?node=node-a&gpu=1&pid=100&from=${T0 - 1000}&to=${T0 + 61000}`);
	await waitLoad('flame', 0);
	await page.waitForFunction(() => window.__gpuscope.loads.timeline > 0);
	const C = { busy: '#40c057', kernels: '#f08c8c', gpm: '#ffb366', nvml: '#ffe066', window: '#5f3dc4', hatchBg: '#f1f3f5' };
	const colours = (gpu, t, w = 4) => page.evaluate(([g, t, w]) => {
		const tl = window.__gpuscope.timeline, r = tl.rows.find((x) => x.kind === 'busy' && x.gpu === g);
		const dpr = window.devicePixelRatio || 1, x = Math.round(tl.xOf(t) * dpr), y = Math.round((r.y + 7) * dpr);
		const cp = document.createElement('canvas');	// a copy: reading the lanes back repeatedly warns
		cp.width = tl.lanes.width;
		cp.height = tl.lanes.height;
		const g2 = cp.getContext('2d', { willReadFrequently: true });
		g2.drawImage(tl.lanes, 0, 0);
		const d = g2.getImageData(x - w * dpr, y - 3 * dpr, 2 * w * dpr + 1, 6 * dpr + 1).data;
		const set = new Set();
		for (let i = 0; i < d.length; i += 4) set.add('#' + [d[i], d[i + 1], d[i + 2]].map((v) => v.toString(16).padStart(2, '0')).join(''));
		return [...set];
	}, [gpu, t, w]);
	const only = (set, c) => set.length === 1 && set[0] === c;
	let px = await colours('GPU 1', T0 + 20000);
	check(only(px, C.busy), `GPU 1 at 20 s: busy (${px.join(' ')})`);
	px = await colours('GPU 1', T0 + 42000);
	check(only(px, C.gpm), `GPU 1 at 42 s: idle decided by GPM (${px.join(' ')})`);
	px = await colours('GPU 1', T0 + 45500);
	check(only(px, C.kernels), `GPU 1 at 45.5 s: idle inside the budget window (${px.join(' ')})`);
	px = await colours('GPU 1', T0 + 44000, 1);
	const nearC = (a, b) => [1, 3, 5].every((i) => Math.abs(parseInt(a.slice(i, i + 2), 16) - parseInt(b.slice(i, i + 2), 16)) < 16);
	check(px.some((c) => nearC(c, C.window)), `GPU 1 at 44 s: the duty-cycle window's outline (${px.join(' ')})`);
	px = await colours('GPU 1', T0 + 53000);
	const grey = (c) => {
		const [r, g, b] = [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
		return r < 0xd0 && Math.max(r, g, b) - Math.min(r, g, b) < 24;
	};
	check(px.includes(C.hatchBg) && px.some(grey) && !px.some((c) => Object.values(C).slice(0, 5).includes(c)),
		`GPU 1 at 53 s: unknown, hatched (${px.join(' ')})`);
	px = await colours('GPU 0', T0 + 25000);
	check(only(px, C.kernels), `GPU 0 at 25 s: idle decided by the capture window (${px.join(' ')})`);
	px = await colours('GPU 0', T0 + 55000);
	check(only(px, C.nvml), `GPU 0 at 55 s: idle decided by NVML (${px.join(' ')})`);
	const legend = await page.evaluate(() => window.__gpuscope.timeline.rows.find((r) => r.head === 'GPU busy / idle').legend.map((l) => l[0]).join(', '));
	check(/idle: kernels/.test(legend) && /idle: GPM/.test(legend) && /idle: NVML/.test(legend) && /duty-cycle/.test(legend) && /unknown/.test(legend),
		`the band has a legend (${legend})`);
	const bandTipAt = async (gpu, t) => {
		const p = await page.evaluate(([g, t]) => {
			const tl = window.__gpuscope.timeline, r = tl.rows.find((x) => x.kind === 'busy' && x.gpu === g);
			const b = tl.lanes.getBoundingClientRect();
			return { x: b.left + tl.xOf(t), y: b.top + r.y + 7 };
		}, [gpu, t]);
		await page.mouse.move(p.x, p.y);
		await page.waitForTimeout(200);
		const text = await page.evaluate(() => [...document.querySelectorAll('.tooltip')].filter((t) => !t.classList.contains('hidden')).map((t) => t.textContent).join('|'));
		await page.mouse.move(5, 5);
		return text;
	};
	let tip2 = await bandTipAt('GPU 1', T0 + 53000);
	check(/GPU 1: unknown/.test(tip2) && /no source observed it/.test(tip2) && /duty-cycle window (5\.9\d|6\.0\d?) s away \(budget\)/.test(tip2),
		`hover on unknown time: no source, estimated from the window 6 s away (${tip2.slice(0, 200)})`);
	tip2 = await bandTipAt('GPU 1', T0 + 42000);
	check(/GPU 1 idle/.test(tip2) && /decided byGPM/.test(tip2), `hover on GPM idle time names GPM (${tip2.slice(0, 120)})`);
	tip2 = await bandTipAt('GPU 1', T0 + 45500);
	check(/GPU 1 idle/.test(tip2) && /decided bykernels/.test(tip2) && /windowbudget \(duty cycle\)/.test(tip2), `hover in the budget window names it (${tip2.slice(0, 160)})`);
	tip2 = await bandTipAt('GPU 1', T0 + 20000);
	check(/GPU 1 busy/.test(tip2) && /decided byNVML/.test(tip2), `hover on busy time names its source (${tip2.slice(0, 120)})`);
	await page.locator('#tl-card').screenshot({ path: join(OUT, 'band-sources.png') });
	// the GPU-idle flame graph of GPU 1: the window's samples stand for [47,61) s, estimated
	n0 = await loads('flame');
	await page.click('#idle');
	await waitLoad('flame', n0);
	const chip = await page.evaluate(() => {
		const c = document.querySelector('#idle-sources');
		return c && { text: c.textContent, cls: c.className, title: c.title };
	});
	// decided idle: GPM [40,44) 440 samples; the window [44,47) 330, each standing for 5 more
	// (undecided: 1 s before the data, [47,61) s: 15 s for its 3 s) = 2420, 1650 estimated (68%)
	check(chip && /estimated/.test(chip.cls) && / · estimated 68% \(1 window, 5% traced\)/.test(chip.text) && /68\.2 % of this answer is estimated/.test(chip.title),
		`GPU-idle chip says the answer is estimated (${chip && chip.text}; ${chip && chip.title.split('\n')[0]})`);
	const est = await rootValue();
	check(Math.abs(est - 2420) <= 1, `GPU 1's idle flame graph estimates 2420 samples (got ${est})`);
	// the veil over what that flame graph leaves out: busy time, and unknown time no window
	// stands for (here none: all of it is within 120 s of the window)
	const veiled = (ts) => page.evaluate((ts) => {
		const tl = window.__gpuscope.timeline, dpr = window.devicePixelRatio || 1;
		if (tl.mask.classList.contains('hidden')) return ts.map(() => false);
		const cp = document.createElement('canvas');	// one readback of a copy (see colours())
		cp.width = tl.mask.width;
		cp.height = tl.mask.height;
		const g = cp.getContext('2d', { willReadFrequently: true });
		g.drawImage(tl.mask, 0, 0);
		return ts.map((t) => g.getImageData(Math.round(tl.xOf(t) * dpr), Math.round(40 * dpr), 1, 1).data[3] > 0);
	}, ts);
	let v = await veiled([T0 + 20000, T0 + 42000, T0 + 45500, T0 + 53000]);
	check(v.join() === 'true,false,false,false', `GPU 1 idle: busy veiled; GPM idle, the window and the unknown time it stands for not (${v.join()})`);
	// a wider view: time more than 120 s from the window is left out, veiled and counted unknown
	await page.goto(`${URL0}/?node=node-a&gpu=1&pid=100&idle=1&from=${T0 - 300000}&to=${T0 + 61000}`);
	await waitLoad('flame', 0);
	await page.waitForFunction(() => window.__gpuscope.loads.timeline > 0);
	await page.waitForTimeout(200);
	v = await veiled([T0 - 200000, T0 - 30000, T0 + 53000]);
	check(v.join() === 'true,false,false', `361 s view: 200 s before the data veiled (244 s from the window), 30 s before not (${v.join()})`);
	const chip2 = await page.textContent('#idle-sources');
	const est2 = await rootValue();
	// undecided: [-300, 0) s and [47, 61) s; the window [44, 47) reaches back to -76 s: it stands
	// for 90 s (weight 31: 440 + 330 x 31 = 10670), 224 s of 361 unknown (62 %)
	check(/ · unknown 62%$/.test(chip2) && Math.abs(est2 - 10670) <= 1, `361 s view: ${est2} samples (want 10670), ${chip2}`);

	// 12. no agent yet (an empty server)
	if (EMPTY) {
		await page.goto(EMPTY + '/');
		await page.waitForSelector('#banner.info', { timeout: 10000 });
		check((await page.textContent('#banner')).includes('No agent has sent data'), 'empty server: "no agent yet" banner');
		await shot('no-agent');
	}

	// 13. server unreachable
	if (SERVER_PID) {
		await page.goto(URL0 + '/');
		await waitLoad('flame', 0);
		const before = errors.length;
		process.kill(SERVER_PID, 'SIGTERM');
		await new Promise((r) => setTimeout(r, 500));
		await page.click('header button[title="reload"]');
		await page.waitForSelector('#banner.error', { timeout: 10000 });
		check((await page.textContent('#banner')).includes('unreachable'), 'server gone: "unreachable" banner');
		errors.splice(before);	// the failed fetches of this step are expected
		await shot('unreachable');
	}
} catch (e) {
	failures++;
	console.log(`  FAIL exception: ${e.stack || e}`);
	await shot('failure').catch(() => {});
}
check(!errors.length, `no console errors, page errors or failed requests${errors.length ? ':\n    ' + errors.join('\n    ') : ''}`);
await ctx.close();
rmSync(userDir, { recursive: true, force: true });
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
