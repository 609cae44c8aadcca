/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU efficiency's hourly in-memory rollup: the thread that rolls hours up once and again when
 * late data marks them dirty, the read that joins rolled hours with raw edges, and the lifetime.
 */
#include "server/efficiency/eff_int.h"

/* ---- rollup ------------------------------------------------------------------------------- */

static uint64_t floor_h(uint64_t t)
{
	return t / HOUR_NS * HOUR_NS;
}

static uint64_t ceil_h(uint64_t t)
{
	return (t + HOUR_NS - 1) / HOUR_NS * HOUR_NS;
}

static int first_data(void *ctx, const char *node, uint64_t first, uint64_t last)
{
	uint64_t *min = ctx;

	(void)node;
	(void)last;
	if (first && first < *min)
		*min = first;
	return 0;
}

/* The hour slot of t (rmu held); NULL outside [r_start, r_wm + 1h) or on ENOMEM. */
static struct hour_roll *hour_slot(struct efficiency *e, uint64_t t)
{
	size_t i;

	if (!e->r_start || t < e->r_start)
		return NULL;
	i = (size_t)((t - e->r_start) / HOUR_NS);
	if (eff_grow_to((void **)&e->hours, &e->nhours, i, sizeof(*e->hours)))
		return NULL;
	return &e->hours[i];
}

/*
 * Rolls up the hours of [h0, h1) from stored records in one pass (one read of the records: the
 * store's interval scan is bounded below only, so hour by hour would reread what follows).
 */
static int roll_range(struct efficiency *e, uint64_t h0, uint64_t h1)
{
	size_t nh = (size_t)((h1 - h0) / HOUR_NS), *cnt = calloc(nh + 1, sizeof(size_t));
	struct hour_ent **per = calloc(nh + 1, sizeof(*per));
	struct acc a = { .by_hour = true };
	int err = cnt && per ? 0 : -ENOMEM;

	if (!err)
		err = eff_compute_raw(e, h0, h1, -1, &a, NULL, NULL);
	for (size_t i = 0; i < a.n && !err; i++)
		cnt[a.hour[i] - h0 / HOUR_NS]++;
	for (size_t k = 0; k < nh && !err; k++) {
		per[k] = malloc((cnt[k] ? cnt[k] : 1) * sizeof(**per));
		if (!per[k])
			err = -ENOMEM;
		cnt[k] = 0;
	}
	for (size_t i = 0; i < a.n && !err; i++) {
		size_t k = a.hour[i] - h0 / HOUR_NS;

		per[k][cnt[k]++] = a.v[i];
	}
	if (!err) {
		pthread_mutex_lock(&e->rmu);
		for (size_t k = 0; k < nh && !err; k++) {
			struct hour_roll *slot = hour_slot(e, h0 + k * HOUR_NS);

			if (!slot) {
				err = -ENOMEM;
				break;
			}
			free(slot->v);
			slot->v = per[k];
			slot->n = cnt[k];
			slot->done = true;
			per[k] = NULL;
		}
		pthread_mutex_unlock(&e->rmu);
	}
	for (size_t k = 0; per && k < nh; k++)
		free(per[k]);
	free(per);
	free(cnt);
	eff_acc_done(&a);
	return err;
}

static void *rollup_main(void *arg)
{
	struct efficiency *e = arg;

	pthread_mutex_lock(&e->rmu);
	while (!e->stopping) {
		uint64_t now = wall_ns(), target = floor_h(now - e->cfg.settle_ns), h = 0, h1 = 0;
		struct timespec ts;
		bool work = false;

		if (!e->r_start) {
			uint64_t min = UINT64_MAX;

			pthread_mutex_unlock(&e->rmu);
			e->st->ops->nodes(e->st, first_data, &min);
			pthread_mutex_lock(&e->rmu);
			if (min != UINT64_MAX && min < now)
				e->r_start = e->r_wm = floor_h(min);
		}
		if (e->r_start) {
			/* Late data first (newest hours matter most), then the next hour. */
			for (size_t i = e->r_wm > e->r_start ? (e->r_wm - e->r_start) / HOUR_NS : 0;
			     i-- > 0 && !work;) {
				if (e->hours[i].dirty) {
					e->hours[i].dirty = false;
					h = e->r_start + i * HOUR_NS;
					h1 = h + HOUR_NS;
					work = true;
				}
			}
			if (!work && e->r_wm < target) {
				/* up to a day at a time while catching up */
				h = e->r_wm;
				h1 = target - h > ROLL_MAX_NS ? h + ROLL_MAX_NS : target;
				work = true;
			}
		}
		if (work) {
			int err;

			pthread_mutex_unlock(&e->rmu);
			err = roll_range(e, h, h1);
			pthread_mutex_lock(&e->rmu);
			if (err) {
				log_warn("efficiency rollup from %llu: %s, retrying",
					 (unsigned long long)(h / NSEC_PER_SEC), strerror(-err));
			} else if (h == e->r_wm) {
				e->r_wm = h1;
				continue;
			} else {
				continue;
			}
		}
		now = wall_ns() + 5 * NSEC_PER_SEC;
		ts.tv_sec = (time_t)(now / NSEC_PER_SEC);
		ts.tv_nsec = (long)(now % NSEC_PER_SEC);
		if (!e->stopping)	/* a stop signalled while rmu was dropped above */
			pthread_cond_timedwait(&e->rcond, &e->rmu, &ts);
	}
	pthread_mutex_unlock(&e->rmu);
	return NULL;
}

static void mark_dirty(struct efficiency *e, uint64_t t0, uint64_t t1)
{
	if (!e->r_start || t1 < e->r_start)
		return;
	t0 = t0 < e->r_start ? e->r_start : t0;
	for (uint64_t h = floor_h(t0); h <= t1 && h < e->r_wm; h += HOUR_NS) {
		struct hour_roll *s = hour_slot(e, h);

		if (s && s->done)
			s->dirty = true;
	}
}

void efficiency_ingested(struct efficiency *e, const struct Gpuscope__V1__Batch *m)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	if (!e)
		return;
	for (size_t i = 0; i < m->n_intervals; i++) {
		const char *k = m->strings[m->intervals[i]->kind];

		if (strcmp(k, "gpu_busy") && strcmp(k, "gpu_observed"))
			continue;
		lo = m->intervals[i]->start_ns < lo ? m->intervals[i]->start_ns : lo;
		hi = m->intervals[i]->end_ns > hi ? m->intervals[i]->end_ns : hi;
	}
	for (size_t i = 0; i < m->n_series; i++) {
		const Gpuscope__V1__MetricSeries *s = m->series[i];
		uint64_t t = 0, a = UINT64_MAX, b = 0;

		if (strncmp(m->strings[s->name], "gpu_", 4))
			continue;
		for (size_t k = 0; k < s->n_time_delta_ns; k++) {
			t += (uint64_t)s->time_delta_ns[k];
			a = t < a ? t : a;
			b = t > b ? t : b;
		}
		if (a == UINT64_MAX)
			continue;
		a = a > HOLD_CAP_NS ? a - HOLD_CAP_NS : 0;
		lo = a < lo ? a : lo;
		hi = b + UTIL_CAP_NS > hi ? b + UTIL_CAP_NS : hi;
	}
	if (lo > hi)
		return;
	pthread_mutex_lock(&e->rmu);
	mark_dirty(e, lo, hi);
	pthread_mutex_unlock(&e->rmu);
}

void efficiency_stats(struct efficiency *e, uint64_t *ret_hours, uint64_t *ret_dirty,
		      uint64_t *ret_lag_hours)
{
	uint64_t n = 0, d = 0, target = floor_h(wall_ns() - e->cfg.settle_ns);

	pthread_mutex_lock(&e->rmu);
	for (size_t i = 0; e->r_wm > e->r_start && i < (e->r_wm - e->r_start) / HOUR_NS; i++) {
		n += e->hours[i].done;
		d += e->hours[i].dirty;
	}
	*ret_lag_hours = e->r_start && target > e->r_wm ? (target - e->r_wm) / HOUR_NS : 0;
	pthread_mutex_unlock(&e->rmu);
	*ret_hours = n;
	*ret_dirty = d;
}

/* Tallies of [from, to): whole rolled-up hours from the rollup, the rest from records. */
int eff_gather(struct efficiency *e, uint64_t from, uint64_t to, struct acc *out,
	       uint64_t *ret_rolled_ns)
{
	uint64_t h1 = ceil_h(from), h2 = floor_h(to), raw_from = from;
	int err = 0;

	*ret_rolled_ns = 0;
	if (h1 < h2) {
		for (uint64_t h = h1; h < h2 && !err; h += HOUR_NS) {
			struct hour_roll *s;
			bool use;

			pthread_mutex_lock(&e->rmu);
			s = h < e->r_wm ? hour_slot(e, h) : NULL;
			use = s && s->done && !s->dirty;
			for (size_t i = 0; use && i < s->n && !err; i++) {
				struct eff_tally *t = eff_acc_get(out, 0, s->v[i].gpu, s->v[i].holder);

				if (!t)
					err = -ENOMEM;
				else
					eff_tally_add(t, &s->v[i].t, 1);
			}
			pthread_mutex_unlock(&e->rmu);
			if (!use)
				continue;
			*ret_rolled_ns += HOUR_NS;
			if (raw_from < h && !err)
				err = eff_compute_raw(e, raw_from, h, -1, out, NULL, NULL);
			raw_from = h + HOUR_NS;
		}
	}
	if (!err && raw_from < to)
		err = eff_compute_raw(e, raw_from, to, -1, out, NULL, NULL);
	return err;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

struct efficiency *efficiency_new(struct store *st, const struct eff_cfg *cfg)
{
	struct efficiency *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->st = st;
	e->cfg = *cfg;
	pthread_mutex_init(&e->tmu, NULL);
	pthread_mutex_init(&e->rmu, NULL);
	pthread_cond_init(&e->rcond, NULL);
	if (!cfg->no_rollup) {
		if (pthread_create(&e->thread, NULL, rollup_main, e)) {
			efficiency_free(e);
			errno = EAGAIN;
			return NULL;
		}
		e->started = true;
	}
	return e;
}

void efficiency_free(struct efficiency *e)
{
	if (!e)
		return;
	if (e->started) {
		pthread_mutex_lock(&e->rmu);
		e->stopping = true;
		pthread_cond_signal(&e->rcond);
		pthread_mutex_unlock(&e->rmu);
		pthread_join(e->thread, NULL);
	}
	for (size_t i = 0; i < e->capg; i++) {
		free(e->gpus[i].node);
		free(e->gpus[i].gpu);
		free(e->gpus[i].uuid);
		free(e->gpus[i].model);
	}
	for (size_t i = 0; i < e->caph; i++) {
		free(e->holders[i].node);
		free(e->holders[i].pid);
		free(e->holders[i].comm);
	}
	free(e->gpus);
	free(e->holders);
	strtab_done(&e->gpu_keys);
	u64map_done(&e->holder_ids);
	for (size_t i = 0; i < e->nhours; i++)
		free(e->hours[i].v);
	free(e->hours);
	pthread_mutex_destroy(&e->tmu);
	pthread_mutex_destroy(&e->rmu);
	pthread_cond_destroy(&e->rcond);
	free(e);
}
