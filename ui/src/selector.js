// SPDX-License-Identifier: Apache-2.0
// The label selector box: `{comm="python", node=~"gpu-.*"}` with completion of label names
// (/api/v1/labels) after `{` or `,`, and of values (/api/v1/label/NAME/values) after an
// operator. Enter applies; Escape closes the list; arrows move in it.
import { el, quote } from './util.js';

export class SelectorBox {
	constructor(root, { labels, values, onApply }) {
		this.labels = labels;
		this.values = values;
		this.onApply = onApply;
		this.input = el('input', { class: 'sel-input', type: 'text', spellcheck: 'false', autocomplete: 'off',
			placeholder: '{comm="python", pod=~"train-.*"}   label selector: type { for label names' });
		this.list = el('div', { class: 'sel-list hidden' });
		this.err = el('div', { class: 'sel-err hidden' });
		this.clear = el('button', { class: 'btn ghost sel-clear', title: 'clear the selector' }, '×');
		root.append(el('div', { class: 'sel-wrap' }, this.input, this.clear, this.list), this.err);
		this.items = [];
		this.active = 0;
		this.seq = 0;
		this.input.addEventListener('input', () => this.complete());
		this.input.addEventListener('focus', () => this.complete());
		this.input.addEventListener('click', () => this.complete());
		this.input.addEventListener('blur', () => setTimeout(() => this.close(), 150));
		this.input.addEventListener('keydown', (e) => this.key(e));
		this.clear.addEventListener('click', () => {
			this.input.value = '';
			this.apply();
		});
	}

	set value(v) {
		this.input.value = v || '';
	}
	get value() {
		return this.input.value.trim();
	}

	setError(msg) {
		this.err.textContent = msg || '';
		this.err.classList.toggle('hidden', !msg);
		this.input.classList.toggle('bad', !!msg);
	}

	apply() {
		this.close();
		let v = this.value;
		if (v && !v.startsWith('{')) v = `{${v}}`;
		if (v.startsWith('{') && !v.endsWith('}')) v += '}';
		this.input.value = v;
		this.onApply(v);
	}

	// What is being typed at the cursor: a label name, or the value of `name op`.
	context() {
		const s = this.input.value.slice(0, this.input.selectionStart);
		let m = s.match(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"?([^",}]*)$/);
		if (m) return { type: 'value', name: m[1], op: m[2], prefix: m[3], start: s.length - m[3].length - (s.endsWith('"' + m[3]) ? 1 : 0) };
		m = s.match(/(^|[{,]\s*)([a-zA-Z_0-9]*)$/);
		if (m) return { type: 'name', prefix: m[2], start: s.length - m[2].length };
		return null;
	}

	async complete() {
		const ctx = this.context();
		const seq = ++this.seq;
		if (!ctx) return this.close();
		let options = [];
		try {
			if (ctx.type === 'name') options = (await this.labels()).filter((n) => n.startsWith(ctx.prefix));
			else options = (await this.values(ctx.name)).filter((v) => v.toLowerCase().includes(ctx.prefix.toLowerCase()));
		} catch (e) {
			options = [];
		}
		if (seq !== this.seq) return;
		this.ctx = ctx;
		this.items = options.slice(0, 50);
		this.active = 0;
		this.render();
	}

	render() {
		if (!this.items.length || document.activeElement !== this.input) return this.close();
		this.list.replaceChildren(
			el('div', { class: 'sel-hint' }, this.ctx.type === 'name' ? 'label' : `values of ${this.ctx.name}`),
			...this.items.map((v, i) => el('div', { class: 'sel-item' + (i === this.active ? ' active' : ''),
				onmousedown: (e) => {
					e.preventDefault();
					this.pick(i);
				} }, v)));
		this.list.classList.remove('hidden');
	}

	close() {
		this.list.classList.add('hidden');
		this.items = [];
	}

	pick(i) {
		const v = this.items[i], ctx = this.ctx;
		const s = this.input.value, cur = this.input.selectionStart;
		let before = s.slice(0, ctx.start), after = s.slice(cur);
		let ins;
		if (ctx.type === 'name') {
			if (!before.includes('{')) before = '{' + before;
			ins = `${v}=`;
		} else {
			after = after.replace(/^[^,}]*/, '');
			ins = quote(v);
		}
		let nv = before + ins + after;
		if (nv.startsWith('{') && !nv.includes('}')) nv += '}';
		this.input.value = nv;
		const pos = before.length + ins.length;
		this.input.setSelectionRange(pos, pos);
		this.close();
		if (ctx.type === 'name') this.complete();
	}

	key(e) {
		const open = !this.list.classList.contains('hidden') && this.items.length;
		if (e.key === 'ArrowDown' && open) {
			this.active = (this.active + 1) % this.items.length;
			this.render();
		} else if (e.key === 'ArrowUp' && open) {
			this.active = (this.active + this.items.length - 1) % this.items.length;
			this.render();
		} else if ((e.key === 'Tab' || (e.key === 'Enter' && this.ctx && this.ctx.type === 'name')) && open) {
			this.pick(this.active);
		} else if (e.key === 'Enter') {
			if (open && this.ctx.type === 'value' && this.items[this.active] && this.ctx.prefix !== this.items[this.active]) {
				this.pick(this.active);
			} else this.apply();
		} else if (e.key === 'Escape') {
			this.close();
			return;
		} else return;
		e.preventDefault();
	}
}
