// SPDX-License-Identifier: Apache-2.0
// End-to-end test of the findings panel (ui/src/findings.js) in a real browser (Debian's
// chromium, playwright-core) against a real gpuscope-server holding a fixture with findings
// (tests/integration/test_findings_e2e.py): on the Efficiency page and on the timeline, each
// finding's title, dollars, GPU time, confidence (estimated marked), summary, recommendation
// and evidence links as the server's /api/v1/insights answer has them; the fixture's expected
// findings; a click on an evidence link opening the view with the link's range, selector and
// GPU; a healthy workload's "no finding".
// Usage: node tests/e2e/findings_e2e.mjs --url URL --from MS --to MS --expect JSON --healthy SEL --out DIR
import { arg, check, errors, failed, finish, openPage } from './browser.mjs';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const URL0 = arg('--url'), FROM = +arg('--from'), TO = +arg('--to'), OUT = arg('--out', '.output/e2e');
// [[kind, workload, confidence], ...]: the findings the fixture must give, in rank order
const EXPECT = JSON.parse(arg('--expect', '[]'));
const HEALTHY = arg('--healthy', '');
mkdirSync(OUT, { recursive: true });

const { ctx, page } = await openPage(1000);

// The panel as drawn: per finding its texts and evidence links.
const drawn = () => page.$$eval('#findings-card .finding', (fs) => fs.map((f) => ({
	id: f.dataset.id,
	kind: f.dataset.kind,
	title: f.querySelector('.f-title').textContent,
	dollars: f.querySelector('.f-dollars').textContent,
	secs: f.querySelector('.f-secs').textContent,
	conf: f.querySelector('.conf').textContent,
	confKind: f.querySelector('.conf').dataset.conf,
	hatched: getComputedStyle(f.querySelector('.conf')).backgroundImage.includes('repeating-linear-gradient'),
	summary: f.querySelector('.f-summary').textContent,
	rec: f.querySelector('.f-rec').textContent,
	ev: [...f.querySelectorAll('.f-evidence li')].map((li) => ({
		label: (li.querySelector('.ev-link') || li.firstChild).textContent,
		href: li.querySelector('.ev-link') && li.querySelector('.ev-link').getAttribute('href'),
		api: li.querySelector('.ev-api') && li.querySelector('.ev-api').getAttribute('href'),
	})),
})));

const pct = (v) => `${(100 * v).toFixed(v > 0 && v < 0.01 ? 1 : 0)}%`;
const linkOf = (ui) => (ui.startsWith('?') ? '/' + ui : ui.startsWith('/?') ? ui : ui);

// Every finding of the answer drawn as the answer says, in its order.
function compare(where, ans, got) {
	const fs = ans.findings;
	check(got.length === fs.length, `${where}: ${got.length} findings drawn, the answer has ${fs.length}`);
	fs.forEach((f, i) => {
		const g = got[i] || {};
		const est = f.confidence === 'estimated' || f.estimated_share > 0;
		const wantConf = est ? `≈ estimated ${pct(f.estimated_share || 0)}` : f.confidence === 'low' ? 'low confidence' : 'measured';
		const wantD = typeof f.dollars_at_stake === 'number' ? `$${f.dollars_at_stake.toFixed(2)} at stake` : 'no price';
		check(g.id === f.id && g.title === f.title && g.dollars === wantD && g.summary === f.summary &&
			g.rec === `Fix: ${f.recommendation}` && g.secs.endsWith(`${pct(f.share_of_held || 0)} of held`),
		`${where} #${i + 1} ${f.id}: "${g.title}", ${g.dollars}, ${g.secs}`);
		check(g.conf === wantConf && g.hatched === est, `${where} #${i + 1}: confidence "${g.conf}" (want "${wantConf}")${est ? ', hatched' : ''}`);
		const evOk = (f.evidence || []).length === g.ev.length && f.evidence.every((e, k) =>
			g.ev[k].label === e.label && g.ev[k].href === linkOf(e.ui) && g.ev[k].api === e.api);
		check(evOk, `${where} #${i + 1}: ${g.ev.length} evidence links, each the answer's ui and api`);
	});
}

async function panelOn(url, match) {
	const answer = page.waitForResponse((r) => r.url().includes('/api/v1/insights') && (!match || match(r.url())), { timeout: 30000 });
	await page.goto(url);
	const ans = await (await answer).json();
	await page.waitForSelector('#findings-card[data-state="done"]', { timeout: 30000 });
	return ans;
}

try {
	console.log('findings on the Efficiency page');
	let ans = await panelOn(`${URL0}/?view=efficiency&from=${FROM}&to=${TO}`);
	let got = await drawn();
	compare('efficiency page', ans, got);
	check(JSON.stringify(ans.findings.map((f) => [f.kind, f.workload, f.confidence])) === JSON.stringify(EXPECT),
		`the fixture's findings: ${JSON.stringify(ans.findings.map((f) => [f.kind, f.workload, f.confidence]))}`);
	const sub = await page.textContent('#findings-sub');
	check(sub === `${ans.findings.length} finding${ans.findings.length === 1 ? '' : 's'} over ${ans.workloads_checked} workload${ans.workloads_checked === 1 ? '' : 's'} by namespace, costliest first`,
		`panel head: ${sub}`);
	await page.screenshot({ path: join(OUT, 'findings-efficiency.png'), fullPage: true });

	console.log('an evidence link opens its view');
	const f0 = ans.findings[0], e0 = f0 && (f0.evidence || []).find((e) => e.ui);
	if (e0) {
		await page.click(`#findings-card .finding[data-id="${f0.id}"] .ev-link >> nth=${f0.evidence.indexOf(e0)}`);
		await page.waitForFunction(() => window.__gpuscope && window.__gpuscope.loads && window.__gpuscope.loads.flame > 0, null, { timeout: 30000 });
		const want = new URLSearchParams(e0.ui.slice(e0.ui.indexOf('?') + 1));
		const st = await page.evaluate(() => ({ ...window.__gpuscope.state, search: location.search,
			idleBox: document.querySelector('#idle').checked, searchBox: document.querySelector('#search').value }));
		const have = new URLSearchParams(st.search);
		const same = [...want.keys()].every((k) => have.get(k) === want.get(k));
		check(same && st.from === +want.get('from') && st.to === +want.get('to') && (st.sel || '') === (want.get('sel') || '') &&
			(!want.get('gpu') || st.gpu === want.get('gpu')) && (!want.get('kind') || st.kind === want.get('kind')) &&
			st.idleBox === (want.get('idle') === '1') && st.searchBox === (want.get('q') || ''),
		`"${e0.label}" opened ${st.search} (the link: ${e0.ui})`);
		await page.screenshot({ path: join(OUT, 'findings-evidence.png'), fullPage: true });
	} else {
		check(false, 'the first finding has an evidence link to open');
	}

	console.log('findings on the timeline');
	const node = f0 ? f0.node : 'n1';
	ans = await panelOn(`${URL0}/?node=${node}&from=${FROM}&to=${TO}`);
	got = await drawn();
	compare(`timeline of ${node}`, ans, got);
	check(ans.selector.includes(`node="${node}"`) && ans.findings.length > 0 && ans.findings.every((f) => f.node === node),
		`the timeline's findings are the node's (${ans.selector}, ${ans.findings.length})`);
	await page.screenshot({ path: join(OUT, 'findings-timeline.png'), fullPage: true });

	if (HEALTHY) {
		console.log('a healthy workload');
		ans = await panelOn(`${URL0}/?view=efficiency&from=${FROM}&to=${TO}&sel=${encodeURIComponent(HEALTHY)}`, (u) => u.includes('selector='));
		const note = await page.textContent('#findings-note');
		check(ans.findings.length === 0 && (await drawn()).length === 0 && /^No finding/.test(note), `${HEALTHY}: "${note}"`);
	}
	check(!errors.length, `no console errors or failed requests${errors.length ? ': ' + errors.join(' | ') : ''}`);
} catch (e) {
	failed(e);
} finally {
	await finish(ctx);
}
