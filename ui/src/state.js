// SPDX-License-Identifier: Apache-2.0
// The whole view state lives in the URL's query string, so a link reproduces the view:
// node, gpu, pid; view window from/to and brushed range bfrom/bto (Unix ms); selector `sel`,
// sample `kind`, `idle` (only while the GPU was idle), search `q`, flame-graph `focus` (frame
// path joined by ';'), `fl=proc` (the flame graph of the selected process, else the whole
// node), `grp` (group the flame graph's root by these labels), the diff baseline afrom/ato;
// `view=efficiency` is the Efficiency page (grouped `by` a label); `py` 1 or 0: the Python-only
// flame graph on or off (absent: on for a Python process).

const NUM = ['from', 'to', 'bfrom', 'bto', 'afrom', 'ato'];
const STR = ['node', 'gpu', 'pid', 'sel', 'kind', 'q', 'focus', 'view', 'by', 'fl', 'grp', 'py'];
const BOOL = ['idle'];

export const KINDS = [
	['cpu', 'CPU'],
	['offcpu_ns', 'Off-CPU'],
	['gpu_kernel_ns', 'GPU kernel time'],
	['cuda_sync_ns', 'CUDA sync'],
];

export function load() {
	const p = new URLSearchParams(location.search);
	const s = { kind: 'cpu', sel: '', q: '', focus: '', idle: false };
	for (const k of NUM) if (p.has(k) && isFinite(+p.get(k))) s[k] = +p.get(k);
	for (const k of STR) if (p.has(k)) s[k] = p.get(k);
	for (const k of BOOL) s[k] = p.get(k) === '1';
	if (!KINDS.some(([k]) => k === s.kind)) s.kind = 'cpu';
	return s;
}

export function save(s, push = false) {
	const p = new URLSearchParams();
	for (const k of STR) if (s[k]) p.set(k, s[k]);
	for (const k of NUM) if (s[k] !== undefined && s[k] !== null) p.set(k, String(+s[k].toFixed(3)));
	for (const k of BOOL) if (s[k]) p.set(k, '1');
	const u = `${location.pathname}?${p.toString().replace(/%2C/g, ',')}`;
	if (u === location.pathname + location.search) return;
	if (push) history.pushState(null, '', u);
	else history.replaceState(null, '', u);
}
