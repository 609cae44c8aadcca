// SPDX-License-Identifier: Apache-2.0
// The process picker: the node's processes ranked by CPU samples in the view (from
// /api/v1/processes: pid, comm, pod, program, cmdline, samples), searchable by pid, name, program,
// command line or pod. A process that is
// not in the ranking (a pid= in the URL with no samples here) is kept and shown as such.
import { el, fmtPct } from './util.js';

export class ProcPicker {
	constructor(root, { onPick }) {
		this.onPick = onPick;
		this.items = [];
		this.total = 0;
		this.pid = '';
		this.btn = el('button', { class: 'btn picker-btn', id: 'proc', title: 'the process whose threads get CPU strips (and whose flame graph, with "this process")' }, 'none');
		this.search = el('input', { type: 'search', class: 'picker-search', id: 'proc-search', placeholder: 'search pid, name, program, command line or pod', autocomplete: 'off' });
		this.list = el('div', { class: 'picker-list', id: 'proc-list' });
		this.note = el('div', { class: 'picker-note' });
		this.pop = el('div', { class: 'picker-pop hidden' }, this.search, this.note, this.list);
		root.append(el('div', { class: 'picker' }, this.btn, this.pop));
		this.btn.addEventListener('click', () => this.toggle());
		this.search.addEventListener('input', () => this.render());
		this.search.addEventListener('keydown', (e) => {
			if (e.key === 'Escape') this.close();
			if (e.key === 'Enter') {
				const first = this.list.querySelector('.picker-item');
				if (first) first.click();
			}
		});
		document.addEventListener('mousedown', (e) => {
			if (!root.contains(e.target)) this.close();
		});
	}

	// items: [{pid, comm, pod, value}] by samples, most first; total: samples of the node
	setItems(items, total, count) {
		this.items = items;
		this.total = total;
		this.count = count;
		this.render();
		this.label();
	}

	set value(pid) {
		this.pid = pid === undefined || pid === null ? '' : String(pid);
		this.label();
		this.render();
	}

	get value() {
		return this.pid;
	}

	find(pid) {
		return this.items.find((p) => p.pid === String(pid));
	}

	name(pid) {
		const p = this.find(pid);
		return p ? `${p.pid} ${p.comm}${p.program && p.program !== p.comm ? ' ' + p.program : ''}` : pid ? `${pid}` : '';
	}

	label() {
		const p = this.find(this.pid);
		this.btn.textContent = !this.pid ? 'none' : p ? `${this.name(p.pid)}${p.pod ? ' · ' + p.pod : ''}` : `${this.pid} (no CPU samples here)`;
		this.btn.title = p ? `${p.pid} ${p.comm}: ${fmtPct(p.value / (this.total || 1))} of the node's CPU samples in this view` : this.btn.title;
	}

	toggle() {
		if (this.pop.classList.contains('hidden')) {
			this.pop.classList.remove('hidden');
			this.search.value = '';
			this.render();
			this.search.focus();
		} else {
			this.close();
		}
	}

	close() {
		this.pop.classList.add('hidden');
	}

	render() {
		const q = this.search.value.trim().toLowerCase();
		const match = (p) => !q || p.pid.includes(q) || [p.comm, p.pod, p.program, p.cmdline].some((s) => (s || '').toLowerCase().includes(q));
		const rows = this.items.filter(match).slice(0, 200);
		const kids = rows.map((p) => el('div', {
			class: 'picker-item' + (p.pid === this.pid ? ' on' : ''), 'data-pid': p.pid,
			onclick: () => {
				this.close();
				this.value = p.pid;
				this.onPick(p.pid);	// also the current one: its flame graph
			},
			title: p.cmdline || '',
		}, el('span', { class: 'pid' }, p.pid), el('span', { class: 'comm' }, p.comm || '?'),
		p.program && p.program !== p.comm ? el('span', { class: 'program' }, p.program) : null,
		p.pod ? el('span', { class: 'pod' }, p.pod) : null,
		el('span', { class: 'share' }, el('i', { style: `width:${Math.max(1, Math.round(60 * p.value / (this.items[0].value || 1)))}px` }), fmtPct(p.value / (this.total || 1)))));
		if (this.pid && !this.find(this.pid) && (!q || this.pid.includes(q)))
			kids.unshift(el('div', { class: 'picker-item on missing', 'data-pid': this.pid }, el('span', { class: 'pid' }, this.pid),
				el('span', { class: 'comm' }, 'no CPU samples in this view')));
		this.list.replaceChildren(...kids);
		this.note.textContent = !this.items.length ? 'No process has CPU samples in this view: widen the range.'
			: `${this.count || this.items.length} processes by CPU samples in this view${rows.length < this.items.filter(match).length ? ` (first ${rows.length})` : ''}`;
	}
}
