// SPDX-License-Identifier: Apache-2.0
// What the page tests share (efficiency_e2e.mjs, findings_e2e.mjs): their arguments, checks
// counted as they print, and a real browser (Debian's chromium through playwright-core) whose
// console errors, page errors and failed requests are collected in `errors`.
import { chromium } from '../../ui/node_modules/playwright-core/index.mjs';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/* The value after the command-line flag n, else d. */
export const arg = (n, d) => {
	const i = process.argv.indexOf(n);
	return i > 0 ? process.argv[i + 1] : d;
};

export const errors = [];
let failures = 0;

export function check(cond, what) {
	console.log(`  ${cond ? 'ok  ' : 'FAIL'} ${what}`);
	if (!cond) failures++;
}

/* A test that threw: counted as one failure. */
export function failed(e) {
	console.log(`  FAIL ${e.stack || e}`);
	failures++;
}

/* A fresh headless browser profile and its page, width 1440 and the given height. */
export async function openPage(height) {
	const ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'gpuscope-chromium-')), {
		executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1440, height },
		args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
			'--disable-component-update', '--disable-sync'],
	});
	const page = ctx.pages()[0] || (await ctx.newPage());
	page.on('console', (m) => {
		if (m.type() === 'error') errors.push(`console: ${m.text()}`);
	});
	page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
	page.on('response', (r) => {
		if (r.status() >= 400) errors.push(`HTTP ${r.status()} ${r.url()}`);
	});
	return { ctx, page };
}

/* Closes the browser, says how the checks went and exits 1 when one failed. */
export async function finish(ctx) {
	await ctx.close();
	console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
	process.exit(failures ? 1 : 0);
}
