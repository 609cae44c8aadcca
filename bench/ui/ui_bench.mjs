// SPDX-License-Identifier: Apache-2.0
// Web UI benchmark, measured in the browser with the performance API (bench/ui/run drives it):
// first meaningful paint of the timeline for 1 h of one 8-GPU node, bytes the server ships for
// it, the server's 1 h flame graph, and a synthetic 100 000-node flame graph's render time and
// zoom frame rate. Usage: node bench/ui/ui_bench.mjs --url URL --t0 SECONDS --secs N [--runs N]
import { chromium } from '../../ui/node_modules/playwright-core/index.mjs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const arg = (n, d) => {
	const i = process.argv.indexOf(n);
	return i > 0 ? process.argv[i + 1] : d;
};
const URL0 = arg('--url'), T0 = +arg('--t0') * 1000, SECS = +arg('--secs', 3600), RUNS = +arg('--runs', 3);
const SYNTH_ONLY = process.argv.includes('--synthetic-only');	// flame graph figures only, any server
const userDir = mkdtempSync(join(tmpdir(), 'gpuscope-bench-chromium-'));
const ctx = await chromium.launchPersistentContext(userDir, {
	executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1600, height: 1000 },
	args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
		'--disable-component-update', '--disable-sync'],
});
const med = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
const res = { paint: [], timelineData: [], seriesBytes: [], intervalBytes: [], flameServer: [], flameNodes: 0,
	synthBuild: [], synthDraw: [], zoomFps: [], zoomFrameMs: [], zoomMaxFrameMs: [] };

for (let run = 0; run < RUNS; run++) {
	const page = await ctx.newPage();
	if (SYNTH_ONLY) {
		await page.goto(`${URL0}/`);
		await page.waitForFunction(() => window.__gpuscope);
		await page.evaluate(() => document.querySelector('#flame-card').classList.remove('hidden'));
	} else {
	// 1. timeline first paint for the whole hour, cold page
	const bytes = { series: 0, intervals: 0 };
	page.on('response', async (r) => {
		const u = r.url();
		if (!u.includes('/api/v1/series') && !u.includes('/api/v1/intervals')) return;
		try {
			const b = (await r.body()).length;
			if (u.includes('/series')) bytes.series += b;
			else bytes.intervals += b;
		} catch (e) {
			/* aborted */
		}
	});
	await page.goto(`${URL0}/?node=bench-node&gpu=0&pid=1000&from=${T0}&to=${T0 + SECS * 1000}`);
	await page.waitForFunction(() => window.__gpuscope && window.__gpuscope.timings.firstPaint && window.__gpuscope.loads.flame > 0, null, { timeout: 120000 });
	await page.waitForTimeout(300);
	const t = await page.evaluate(() => ({ ...window.__gpuscope.timings, n: window.__gpuscope.flame.n,
		reqs: performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/'))
			.map((e) => [decodeURIComponent(e.name.replace(/^.*\/api\/v1\//, '')).slice(0, 70), Math.round(e.startTime), Math.round(e.duration)]) }));
	if (run === RUNS - 1) res.requests = t.reqs;
	res.paint.push(t.firstPaint);
	res.timelineData.push(t.timeline);
	res.flameServer.push(t.flame);
	res.flameNodes = t.n;
	res.seriesBytes.push(bytes.series);
	res.intervalBytes.push(bytes.intervals);

	// 1b. a 5 min window of the same node: kernel lanes and CPU strips included
	{
		const p5 = await ctx.newPage();
		const mid = T0 + (SECS * 1000) / 2;
		await p5.goto(`${URL0}/?node=bench-node&gpu=0&pid=1000&from=${mid}&to=${mid + 300e3}`);
		await p5.waitForFunction(() => window.__gpuscope && window.__gpuscope.timings.firstPaint, null, { timeout: 120000 });
		const t5 = await p5.evaluate(() => ({ ...window.__gpuscope.timings,
			lanes: window.__gpuscope.timeline.rows.filter((r) => !r.head).length }));
		res.paint5m = res.paint5m || [];
		res.paint5m.push(t5.firstPaint);
		res.lanes5m = t5.lanes;
		await p5.close();
	}
	}

	// 2. synthetic 100 000-node flame graph: build + first draw, then animated zoom frames
	const s = await page.evaluate(async () => {
		let seed = 42;
		const rnd = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
		let count = 1;
		const root = { name: 'all', value: 0, self: 0, children: [] };
		const q = [[root, 0]];
		while (count < 100000) {
			const [n, d] = q[Math.floor(rnd() * q.length)];
			if (d > 40) continue;
			const c = { name: `fn_${Math.floor(rnd() * 5000)}_${d}`, value: 0, self: 1 + Math.floor(rnd() * 1000), children: [] };
			n.children.push(c);
			q.push([c, d + 1]);
			count++;
		}
		const sum = (n) => (n.value = n.self + n.children.reduce((a, c) => a + sum(c), 0));
		sum(root);
		const f = window.__gpuscope.flame;
		const t0 = performance.now();
		f.setTree(root, { unit: 'samples', kind: 'cpu' });
		const build = performance.now() - t0;
		const draw = f.lastRenderMs;
		// zoom into a frame of about a tenth of the width, two levels down, and count frames
		let target = 1;
		for (let i = 1; i < f.n; i++) if (f.depth[i] === 2 && f.value[i] > f.value[0] * 0.05) { target = i; break; }
		const frames = [], costs = [];
		let stop = false;
		const tick = (ts) => {
			frames.push(ts);
			costs.push(f.lastRenderMs);
			if (!stop) requestAnimationFrame(tick);
		};
		requestAnimationFrame(tick);
		await f.zoomTo(target);
		await f.zoomTo(0);
		stop = true;
		const dt = frames[frames.length - 1] - frames[0];
		return { n: f.n, build, draw, fps: ((frames.length - 1) * 1000) / dt, frameMs: costs.reduce((a, b) => a + b, 0) / costs.length,
			maxFrameMs: Math.max(...costs) };
	});
	res.synthNodes = s.n;
	res.synthBuild.push(s.build);
	res.synthDraw.push(s.draw);
	res.zoomFps.push(s.fps);
	res.zoomFrameMs.push(s.frameMs);
	res.zoomMaxFrameMs.push(s.maxFrameMs);
	await page.close();
}
await ctx.close();
rmSync(userDir, { recursive: true, force: true });
const f1 = (x) => x.toFixed(1);
console.log(JSON.stringify({ ...res, requests: undefined }));
if (!SYNTH_ONLY) {
console.log(`timeline first meaningful paint (1 h, 8-GPU node): median ${f1(med(res.paint))} ms of ${res.paint.map(f1).join(', ')} (target 1500 ms: ratio ${(med(res.paint) / 1500).toFixed(2)})`);
console.log(`  of which timeline queries: median ${f1(med(res.timelineData))} ms; series JSON ${(med(res.seriesBytes) / 1024).toFixed(0)} KiB, intervals JSON ${(med(res.intervalBytes) / 1024).toFixed(0)} KiB`);
console.log('  API requests of the last cold load [what, start ms, duration ms]:');
for (const r of res.requests || []) console.log(`    ${r[1].toString().padStart(6)} ${r[2].toString().padStart(6)}  ${r[0]}`);
console.log(`timeline first meaningful paint, 5 min window with kernel lanes and ${res.lanes5m} lanes/strips: median ${f1(med(res.paint5m))} ms`);
console.log(`server 1 h CPU flame graph (${res.flameNodes} nodes): query + render median ${f1(med(res.flameServer))} ms`);
}
console.log(`synthetic flame graph (${res.synthNodes} nodes): setTree ${f1(med(res.synthBuild))} ms + draw ${f1(med(res.synthDraw))} ms (target 500 ms total: ratio ${((med(res.synthBuild) + med(res.synthDraw)) / 500).toFixed(2)})`);
console.log(`zoom animation: ${f1(med(res.zoomFps))} fps (target 60: ratio ${(med(res.zoomFps) / 60).toFixed(2)}), draw per frame mean ${f1(med(res.zoomFrameMs))} ms, max ${f1(med(res.zoomMaxFrameMs))} ms`);
