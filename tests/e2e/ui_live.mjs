// SPDX-License-Identifier: Apache-2.0
// The web UI against a live agent (tests/integration/test_first_hour.py runs it): the process
// picker finds the workload among every process of this machine, picking it makes the flame
// graph its own and puts pid= in the URL, the CPU samples chart has its samples and can be
// brushed, group-by puts processes at the root, and the URL reproduces the view.
// Usage: node tests/e2e/ui_live.mjs --url URL --node NODE --pid PID --comm COMM --out DIR
import { chromium } from '../../ui/node_modules/playwright-core/index.mjs';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const arg = (n, d) => {
	const i = process.argv.indexOf(n);
	return i > 0 ? process.argv[i + 1] : d;
};
const URL0 = arg('--url'), NODE = arg('--node'), PID = arg('--pid'), COMM = arg('--comm'), OUT = arg('--out', '.output/e2e-live');
mkdirSync(OUT, { recursive: true });
let failures = 0, passes = 0;
const errors = [];
function check(cond, what) {
	cond ? passes++ : failures++;
	console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}`);
}

const userDir = mkdtempSync(join(tmpdir(), 'gpuscope-chromium-'));
const ctx = await chromium.launchPersistentContext(userDir, {
	executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1440, height: 1000 },
	args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const page = ctx.pages()[0] || (await ctx.newPage());
page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
page.on('console', (m) => {
	if (m.type() === 'error') errors.push(`console: ${m.text()}`);
});
const loads = (w) => page.evaluate((x) => window.__gpuscope.loads[x], w);
async function waitLoad(w, after) {
	await page.waitForFunction(([x, a]) => window.__gpuscope && window.__gpuscope.loads[x] > a, [w, after], { timeout: 30000 });
	await page.waitForTimeout(200);
}
const rootValue = () => page.evaluate(() => window.__gpuscope.flame.value[0] || 0);
const depth1 = () => page.evaluate(() => window.__gpuscope.flame.frames(200).filter((f) => f.depth === 1).map((f) => f.name));

try {
	const now = Date.now();
	await page.goto(`${URL0}/?node=${encodeURIComponent(NODE)}&from=${now - 120e3}&to=${now}`);
	await waitLoad('flame', 0);
	await page.waitForFunction(() => window.__gpuscope.loads.timeline > 0, null, { timeout: 30000 });
	await page.click('#proc');
	await page.waitForSelector('#proc-list .picker-item', { timeout: 10000 });
	const n = await page.$$eval('#proc-list .picker-item', (xs) => xs.length);
	await page.fill('#proc-search', COMM);
	const hit = await page.$$eval('#proc-list .picker-item', (xs) => xs.map((x) => x.dataset.pid));
	check(n >= 3 && hit.includes(PID), `picker: ${n} processes of this machine; searching '${COMM}' finds pid ${PID} (${hit.join(',')})`);
	// by what it runs: its command line's arguments (the program and cmdline labels)
	await page.fill('#proc-search', `${COMM} 900`);
	const byArgs = await page.$$eval('#proc-list .picker-item', (xs) => xs.map((x) => x.dataset.pid));
	check(byArgs.includes(PID), `picker: searching its command line '${COMM} 900' finds pid ${PID} (${byArgs.join(',')})`);
	await page.fill('#proc-search', COMM);
	let n0 = await loads('flame');
	await page.click(`#proc-list .picker-item[data-pid="${PID}"]`);
	await waitLoad('flame', n0);
	const u = new URL(page.url()).searchParams;
	const whole = await page.evaluate(() => window.__gpuscope.state);
	check(u.get('pid') === PID && u.get('fl') === 'proc' && (await rootValue()) > 0, `picked: pid=${u.get('pid')} fl=${u.get('fl')} in the URL, flame graph of ${await rootValue()} samples`);
	const sel = await page.textContent('.flame-info');
	check(sel.includes(`pid="${PID}"`), 'the flame graph\'s selector names the process');
	const cpu = await page.evaluate(() => {
		const p = window.__gpuscope.timeline.plots.find((x) => x.def.id === 'cpu');
		return p ? { node: p.cols.node.filter((v) => v > 0).length, proc: p.cols.proc.filter((v) => v > 0).length } : null;
	});
	check(cpu && cpu.node > 0 && cpu.proc > 0, `samples chart: buckets with samples, node ${cpu && cpu.node}, process ${cpu && cpu.proc}`);
	// brush the last minute on the samples chart, up to 3 s before the page opened (the agent
	// may have been up for only a few seconds more than that)
	n0 = await loads('flame');
	const b = await page.evaluate(([a, z]) => {
		const tl = window.__gpuscope.timeline, r = document.querySelector('.panel[data-panel="cpu"]').getBoundingClientRect();
		const rr = tl.root.getBoundingClientRect();
		return { x0: rr.left + tl.xOf(a), x1: rr.left + tl.xOf(z), y: r.top + r.height / 2 };
	}, [now - 60e3, now - 3e3]);
	await page.mouse.move(b.x0, b.y);
	await page.mouse.down();
	await page.mouse.move(b.x1, b.y, { steps: 6 });
	await page.mouse.up();
	await waitLoad('flame', n0);
	const st = await page.evaluate(() => window.__gpuscope.state);
	check(st.bfrom > now - 62e3 && st.bto < now && (await rootValue()) > 0, `brush on the samples chart: ${((st.bto - st.bfrom) / 1000).toFixed(1)} s, ${await rootValue()} samples`);
	n0 = await loads('flame');
	await page.click('#scope [data-scope=""]');
	await waitLoad('flame', n0);
	n0 = await loads('flame');
	await page.selectOption('#groupby', 'pid,comm');
	await waitLoad('flame', n0);
	const groups = await depth1();
	check(groups.includes(`${PID} ${COMM}`) && groups.length >= 2, `group by process at the root of the whole node: ${groups.length} processes, '${PID} ${COMM}' among them`);
	await page.screenshot({ path: join(OUT, 'live.png'), fullPage: true });
	// the URL reproduces the view
	const shared = page.url(), v = await rootValue();
	const p2 = await ctx.newPage();
	await p2.goto(shared);
	await p2.waitForFunction(() => window.__gpuscope && window.__gpuscope.loads.flame > 0, null, { timeout: 30000 });
	await p2.waitForTimeout(300);
	const s2 = await p2.evaluate(() => ({ pid: window.__gpuscope.state.pid, grp: window.__gpuscope.state.grp, v: window.__gpuscope.flame.value[0] }));
	check(s2.pid === PID && s2.grp === 'pid,comm' && s2.v === v, `the URL reproduces pid, group-by and the flame graph (${s2.v} vs ${v} samples)`);
	void whole;
	// kernel time says how much of the range CUPTI windows covered (none here: no CUDA process)
	n0 = await loads('flame');
	await page.click('#kinds [data-kind="gpu_kernel_ns"]');
	await waitLoad('flame', n0);
	const traced = await page.textContent('#traced').catch(() => '');
	check(/kernels traced in [0-9.]+% of the range · \d+ windows?/.test(traced), `kernel flame graph: the traced share of the range (${traced})`);
	// Capture: the node's agent answers through the server (here: no CUDA tracing on this node,
	// said so); the trace downloads as Chrome JSON (this agent records no intervals: may be empty)
	await page.click('#capture');
	await page.waitForSelector('#capture-link', { timeout: 60000 });
	const note = await page.textContent('#capture-note');
	const tr = await page.evaluate(async () => {
		const r = await fetch(document.querySelector('#capture-link').getAttribute('href'));
		const j = r.ok ? await r.json() : null;
		return { status: r.status, events: j && Array.isArray(j.traceEvents) ? j.traceEvents.length : -1 };
	});
	check(/Capture of .* done/.test(note) && tr.status === 200 && tr.events >= 0,
		`Capture button: the agent answered (${note.slice(0, 160)}), trace of ${tr.events} events (HTTP ${tr.status})`);
} catch (e) {
	failures++;
	console.log(`FAIL exception: ${e.stack || e}`);
	await page.screenshot({ path: join(OUT, 'live-failure.png'), fullPage: true }).catch(() => {});
}
check(!errors.length, `no page errors${errors.length ? ': ' + errors.join('; ') : ''}`);
await ctx.close();
rmSync(userDir, { recursive: true, force: true });
console.log(`${passes} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);
