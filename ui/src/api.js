// SPDX-License-Identifier: Apache-2.0
// The server's HTTP API (docs/design.md, "Server HTTP API"): same origin, JSON, times sent as
// fractional Unix seconds. Errors are ApiError with kind 'unreachable', 'auth', 'notfound' or 'bad'.

export class ApiError extends Error {
	constructor(kind, message, status = 0) {
		super(message);
		this.kind = kind;
		this.status = status;
	}
}

let token = null;
try {
	token = localStorage.getItem('gpuscope.token');
} catch (e) {
	/* storage may be disabled */
}
export const setToken = (t) => {
	token = t || null;
	try {
		if (t) localStorage.setItem('gpuscope.token', t);
		else localStorage.removeItem('gpuscope.token');
	} catch (e) {
		/* ignore */
	}
};

export const stats = { requests: 0, bytes: 0 };
const secs = (ms) => (ms / 1000).toFixed(3);

export function url(path, params = {}) {
	const q = new URLSearchParams();
	for (const [k, v] of Object.entries(params)) {
		if (v === undefined || v === null || v === '') continue;
		q.set(k, (k === 'from' || k === 'to' || k === 'from2' || k === 'to2') ? secs(v) : String(v));
	}
	const qs = q.toString();
	return `/api/v1/${path}${qs ? '?' + qs : ''}`;
}

export async function get(path, params = {}, { signal, method } = {}) {
	let r;
	stats.requests++;
	const headers = token ? { Authorization: `Bearer ${token}` } : {};
	try {
		r = await fetch(url(path, params), { signal, headers, method: method || 'GET' });
	} catch (e) {
		if (e.name === 'AbortError') throw e;
		throw new ApiError('unreachable', `the server did not answer (${e.message})`);
	}
	const text = await r.text();
	stats.bytes += text.length;
	if (!r.ok) {
		let msg = text;
		try {
			msg = JSON.parse(text).error || text;
		} catch (e) {
			/* not JSON */
		}
		const kind = r.status === 401 || r.status === 403 ? 'auth' : r.status === 404 ? 'notfound'
			: r.status >= 500 ? 'server' : 'bad';
		throw new ApiError(kind, `${path}: ${msg || r.statusText} (HTTP ${r.status})`, r.status);
	}
	try {
		return JSON.parse(text);
	} catch (e) {
		throw new ApiError('server', `${path}: the answer is not JSON`);
	}
}

// A POST with its parameters in the query string (the capture requests), answered like get().
export const post = (path, params = {}, opts = {}) => get(path, params, { ...opts, method: 'POST' });
