/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test and benchmark tool for gpuscope-server. `batchgen encode` turns a small text script into
 * a protobuf Batch (through src/common/batch.h, like the agent) for the integration tests;
 * `batchgen load` runs N simulated agents that POST realistic batches (16 CPUs at 99 Hz, a few
 * thousand distinct stacks) for bench/ingest and bench/query.
 *
 * Script lines (labels "k=v,k=v" or "-", %XX escapes in values; frames "outer;...;inner" or "-",
 * a frame "name@0xADDR" at that address, "@0xADDR" one without a name, "k:name" a kernel one,
 * "name!module" in that module, e.g. "tokenize![python]" a Python frame, "name!module!file:line"
 * with its source line):
 *   node NAME
 *   period NS       (the CPU sampling period the batch reports)
 *   stack FRAMES    (adds a stack without a sample: the next index, for an interval's stack_id)
 *   sample T_NS KIND VALUE LABELS FRAMES
 *   metric NAME LABELS T_NS VALUE
 *   interval KIND LABELS START_NS END_NS ATTRS
 *   write PATH      (writes the batch so far to PATH and starts a new one, same node)
 */
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sys/random.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/batch.h"
#include "common/compress.h"
#include "common/util.h"
#include "gpuscope/v1/batch.pb-c.h"

#define MAXL 64
#define MAXF 1024

/* Decodes %XX escapes in place (a label value with a space is written "NVIDIA%20H200"). */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		unsigned v;

		if (*s == '%' && s[1] && s[2] && sscanf(s + 1, "%2x", &v) == 1) {
			*o++ = (char)v;
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

static int parse_labels(char *s, struct label *out, size_t *n)
{
	*n = 0;
	if (!strcmp(s, "-"))
		return 0;
	for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
		char *eq = strchr(tok, '=');

		if (!eq || *n == MAXL)
			return -EINVAL;
		*eq = 0;
		unescape(eq + 1);
		out[(*n)++] = (struct label){ tok, eq + 1 };
	}
	return 0;
}

/* Frames "outer;mid;inner" -> locations innermost first. */
static size_t parse_frames(char *s, struct location *out)
{
	char *names[MAXF];
	size_t n = 0;

	if (!strcmp(s, "-"))
		return 0;
	for (char *tok = strtok(s, ";"); tok && n < MAXF; tok = strtok(NULL, ";"))
		names[n++] = tok;
	for (size_t i = 0; i < n; i++) {
		char *name = names[n - 1 - i], *at = strchr(name, '@');

		out[i] = (struct location){ .function = name, .module = "/bin/app",
					    .address = hash64(name, strlen(name), 0) & 0xffffff };
		if (at) {
			*at = 0;
			out[i].address = strtoull(at + 1, NULL, 16);
		}
		if (strchr(name, '!')) {	/* "name!module" or "name!module!file:line" */
			char *src, *colon;

			out[i].module = strchr(name, '!') + 1;
			*strchr(name, '!') = 0;
			src = strchr(out[i].module, '!');
			if (src) {
				*src++ = 0;
				colon = strrchr(src, ':');
				if (colon) {
					*colon = 0;
					out[i].line = (uint32_t)strtoul(colon + 1, NULL, 10);
				}
				out[i].file = src;
			}
		}
		if (!strncmp(name, "k:", 2)) {
			out[i].function = name + 2;
			out[i].module = "[kernel.kallsyms]";
			out[i].kernel = true;
		}
	}
	return n;
}

/* The body as the agent would send it with Content-Encoding enc ("zstd", "gzip", "none"). */
static int pack_body(const char *enc, const uint8_t *in, size_t len, uint8_t **out,
		     size_t *out_len)
{
	int c = compression_parse(enc);

	return c < 0 ? c : compress_buf((enum compression)c, in, len, out, out_len);
}

static int cmd_encode(const char *enc)
{
	struct batch *b = NULL;
	char line[65536];
	uint8_t *buf = NULL, *z = NULL;
	size_t len, zlen;
	int lineno = 0, err = 0;

	while (fgets(line, sizeof(line), stdin)) {
		char *f[8] = { 0 }, *save = NULL;
		struct label labels[MAXL], attrs[MAXL];
		static struct location frames[MAXF];
		size_t nl = 0, na = 0, nf, nw = 0;

		lineno++;
		for (char *t = strtok_r(line, " \t\n", &save); t && nw < 8;
		     t = strtok_r(NULL, " \t\n", &save))
			f[nw++] = t;
		if (!nw || f[0][0] == '#')
			continue;
		if (!strcmp(f[0], "node") && nw == 2) {
			batch__free(b);
			b = batch__new(f[1]);
			if (b)	/* scripts may hold what a broken agent would send */
				batch__allow_any_time(b);
			continue;
		}
		if (!b && (b = batch__new("test-node")))
			batch__allow_any_time(b);
		if (!strcmp(f[0], "period") && nw == 2) {
			if (b)
				batch__set_period(b, strtoull(f[1], NULL, 10));
			continue;
		}
		if (!strcmp(f[0], "write") && nw == 2) {
			FILE *out = fopen(f[1], "wb");

			err = batch__encode(b, &buf, &len);
			if (!err)
				err = pack_body(enc, buf, len, &z, &zlen);
			if (!err && (!out || fwrite(z, 1, zlen, out) != zlen))
				err = -EIO;
			if (out)
				fclose(out);
			free(buf);
			free(z);
			buf = z = NULL;
			batch__reset(b);
			if (err)
				goto bad;
			continue;
		}
		if (!strcmp(f[0], "stack") && nw == 2) {
			int64_t st = batch__stack(b, frames, parse_frames(f[1], frames));

			err = st < 0 ? (int)st : 0;
		} else if (!strcmp(f[0], "sample") && nw == 6) {
			int kind = sample_kind_parse(f[2]);
			int64_t st;

			if (kind < 0 || parse_labels(f[4], labels, &nl)) {
				err = -EINVAL;
				goto bad;
			}
			nf = parse_frames(f[5], frames);
			st = batch__stack(b, frames, nf);
			err = st < 0 ? (int)st :
				       batch__sample(b, strtoull(f[1], NULL, 10), labels, nl, st,
						     (enum sample_kind)kind, strtoll(f[3], NULL, 10));
		} else if (!strcmp(f[0], "metric") && nw == 5) {
			if (parse_labels(f[2], labels, &nl)) {
				err = -EINVAL;
				goto bad;
			}
			err = batch__metric(b, f[1], labels, nl, strtoull(f[3], NULL, 10),
					    strtod(f[4], NULL));
		} else if (!strcmp(f[0], "interval") && nw == 6) {
			if (parse_labels(f[2], labels, &nl) || parse_labels(f[5], attrs, &na)) {
				err = -EINVAL;
				goto bad;
			}
			int64_t stack = -1;

			/* stack_id=N (a batch stack index) becomes Interval.stack */
			for (size_t k = 0; k < na; k++)
				if (!strcmp(attrs[k].name, "stack_id")) {
					stack = strtoll(attrs[k].value, NULL, 10);
					attrs[k--] = attrs[--na];
				}
			err = batch__interval(b, f[1], labels, nl, strtoull(f[3], NULL, 10),
					      strtoull(f[4], NULL, 10), stack, attrs, na);
		} else {
			err = -EINVAL;
		}
bad:
		if (err) {
			fprintf(stderr, "batchgen: line %d: %s\n", lineno, strerror(-err));
			goto out;
		}
	}
	if (!b)
		b = batch__new("test-node");
	err = batch__encode(b, &buf, &len);
	if (!err)
		err = pack_body(enc, buf, len, &z, &zlen);
	if (!err && fwrite(z, 1, zlen, stdout) != zlen)
		err = -EIO;
out:
	free(buf);
	free(z);
	batch__free(b);
	return err ? 1 : 0;
}

/* ---- load: simulated agents ---------------------------------------------------------------- */

struct load_opts {
	const char *url, *token, *enc;
	const char *node;			/* every agent the same node, consecutive spans */
	int agents, cpus, hz, nstacks, threads;
	uint64_t batch_ns, start_ns, span_ns;	/* simulated time per batch, start, total per agent */
	uint64_t pace_ns;			/* wall time between an agent's pushes; 0: flat out */
	double seconds;				/* wall-clock limit */
};

struct agent_sim {
	const struct load_opts *o;
	int id;
	uint64_t seed;
	uint64_t samples, batches, bytes, failures;
	double busy_s;
	double lat_s[1024];			/* per-request latency, the first 1024 */
	size_t nlat;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static size_t sink(void *p, size_t sz, size_t n, void *ctx)
{
	(void)p;
	(void)ctx;
	return sz * n;
}

/* A fixed pool of stacks per agent: depth 8..40 over ~600 function names, shared prefixes. */
static char names[600][48];

static void init_names(void)
{
	for (int i = 0; i < 600; i++)
		snprintf(names[i], sizeof(names[i]), "%s_function_%d",
			 i % 3 ? "module::Class::method" : "torch::autograd::op", i);
}

static int64_t *make_stacks(struct batch *b, const struct load_opts *o, uint64_t *seed)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	int64_t *ids = malloc((size_t)o->nstacks * sizeof(*ids));
	struct location fr[48];

	pthread_once(&once, init_names);
	if (!ids)
		return NULL;
	for (int s = 0; s < o->nstacks; s++) {
		uint64_t r = rnd(seed);
		int depth = 8 + (int)(r % 33);

		for (int d = 0; d < depth; d++) {
			/* Outer frames come from few names (shared prefixes), inner from many. */
			int span = d < depth - 6 ? 20 + d * 4 : 600;
			int idx = (int)((d * 37 + (d < depth - 6 ? (int)((r >> 8) % 3) : (int)(rnd(seed) % 600))) %
					span);
			int pos = depth - 1 - d;	/* innermost first */

			fr[pos] = (struct location){ .function = names[idx % 600],
						     .module = idx % 5 ? "/usr/bin/python3.11" :
									 "/usr/lib/libtorch_cpu.so",
						     .address = 0x1000 + (uint64_t)idx * 64,
						     .build_id = "6f2c1e0d9a" };
		}
		ids[s] = batch__stack(b, fr, (size_t)depth);
		if (ids[s] < 0) {
			free(ids);
			return NULL;
		}
	}
	return ids;
}

static void *agent_main(void *arg)
{
	struct agent_sim *a = arg;
	const struct load_opts *o = a->o;
	char node[32], auth[512];
	struct curl_slist *hdr = NULL;
	CURL *curl = curl_easy_init();
	uint64_t t = o->start_ns + (o->node ? (uint64_t)a->id * o->span_ns : 0);
	uint64_t end = t + o->span_ns, deadline = mono_ns() + (uint64_t)(o->seconds * 1e9);
	uint64_t pace0 = mono_ns() + (o->pace_ns ? (uint64_t)a->id * 7919 * NSEC_PER_MSEC % o->pace_ns : 0);
	char hdr_enc[64];

	if (o->node)
		snprintf(node, sizeof(node), "%s", o->node);
	else
		snprintf(node, sizeof(node), "bench-%d", a->id);
	hdr = curl_slist_append(hdr, "Content-Type: application/x-protobuf");
	hdr = curl_slist_append(hdr, "Expect:");	/* no 100-continue round trip */
	if (strcmp(o->enc, "none")) {
		snprintf(hdr_enc, sizeof(hdr_enc), "Content-Encoding: %s", o->enc);
		hdr = curl_slist_append(hdr, hdr_enc);
	}
	if (o->token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->token);
		hdr = curl_slist_append(hdr, auth);
	}
	curl_easy_setopt(curl, CURLOPT_URL, o->url);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT, 120L);
	/*
	 * The agent's batch is built once through batch.h (stack pool, one label set per thread),
	 * then each batch only gets new sample columns and a new batch id, packed with
	 * protobuf-c: the client stays cheap so that the server is what is measured.
	 */
	{
		struct batch *b = batch__new(node);
		uint64_t seed = 1234 + (uint64_t)a->id, period = NSEC_PER_SEC / (uint64_t)o->hz;
		size_t per = (size_t)(o->batch_ns / period) + 1;
		int64_t *stacks = b ? make_stacks(b, o, &seed) : NULL;
		Gpuscope__V1__Batch *m = NULL;
		int64_t **saved_t = NULL;
		uint32_t **saved_s = NULL, *scol = NULL;
		int64_t *tcol = NULL;
		uint8_t *buf = NULL;
		char err[128];
		size_t len = 0;

		for (int cpu = 0; stacks && cpu < o->cpus; cpu++) {
			char tid[16], cpus[16];
			struct label l[] = { { "pid", "4242" }, { "comm", "python3" },
					     { "tid", tid }, { "cpu", cpus } };

			snprintf(tid, sizeof(tid), "%d", 4242 + cpu);
			snprintf(cpus, sizeof(cpus), "%d", cpu);
			batch__sample(b, t, l, 4, stacks[0], SAMPLE_CPU, 1);
		}
		batch__set_period(b, period);
		if (stacks && !batch__encode(b, &buf, &len))
			m = batch_decode(buf, len, err, sizeof(err));
		free(buf);
		free(stacks);
		batch__free(b);
		if (m) {
			saved_t = calloc(m->n_samples, sizeof(*saved_t));
			saved_s = calloc(m->n_samples, sizeof(*saved_s));
			tcol = malloc(m->n_samples * per * sizeof(*tcol));
			scol = malloc(m->n_samples * per * sizeof(*scol));
		}
		while (m && saved_t && saved_s && tcol && scol && mono_ns() < deadline && t < end) {
			uint8_t *z = NULL;
			size_t zlen = 0, n = 0;
			uint64_t t0;
			long code = 0;

			/* Unique across runs too: a reused id is (rightly) ignored by the server. */
			if (getrandom(&m->batch_id, sizeof(m->batch_id), 0) != sizeof(m->batch_id))
				m->batch_id = wall_ns() ^ ((uint64_t)a->id << 56) ^ a->batches;
			m->batch_id |= 1;
			for (size_t g = 0; g < m->n_samples; g++) {
				Gpuscope__V1__SampleGroup *sg = m->samples[g];
				uint64_t prev = 0;
				size_t k = 0;

				if (!saved_t[g]) {
					saved_t[g] = sg->time_delta_ns;
					saved_s[g] = sg->stack;
				}
				sg->time_delta_ns = tcol + g * per;
				sg->stack = scol + g * per;
				for (uint64_t ts = t + g * 1000; ts < t + o->batch_ns && k < per;
				     ts += period, k++) {
					/* Skewed: a few hot stacks, a long tail; jittered times. */
					uint64_t r = rnd(&a->seed), tj = ts + (r >> 40) % 200000;
					uint32_t st = (uint32_t)((r % 100 < 60) ?
						r % (uint64_t)(o->nstacks / 50 + 1) :
						r % (uint64_t)o->nstacks);

					sg->time_delta_ns[k] = (int64_t)(tj - prev);
					prev = tj;
					sg->stack[k] = st % m->n_stacks;
				}
				sg->n_time_delta_ns = sg->n_stack = k;
				n += k;
			}
			len = gpuscope__v1__batch__get_packed_size(m);
			buf = malloc(len);
			if (!buf)
				break;
			gpuscope__v1__batch__pack(m, buf);
			if (pack_body(o->enc, buf, len, &z, &zlen)) {
				free(buf);
				break;
			}
			free(buf);
			if (o->pace_ns) {
				/* A real agent's cadence: one push per interval, agents spread. */
				uint64_t due = pace0 + a->batches * o->pace_ns, now = mono_ns();

				if (due >= deadline) {
					free(z);
					break;
				}
				if (due > now) {
					struct timespec ts = { (time_t)((due - now) / NSEC_PER_SEC),
							       (long)((due - now) % NSEC_PER_SEC) };

					nanosleep(&ts, NULL);
				}
			}
			t0 = mono_ns();
			curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (const char *)z);
			curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)zlen);
			if (curl_easy_perform(curl) == CURLE_OK)
				curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
			a->busy_s += (double)(mono_ns() - t0) / 1e9;
			if (a->nlat < sizeof(a->lat_s) / sizeof(a->lat_s[0]))
				a->lat_s[a->nlat++] = (double)(mono_ns() - t0) / 1e9;
			free(z);
			if (code != 204) {
				a->failures++;
				fprintf(stderr, "batchgen: agent %d: HTTP %ld\n", a->id, code);
				break;
			}
			a->samples += n;
			a->batches++;
			a->bytes += zlen;
			t += o->batch_ns;
		}
		for (size_t g = 0; m && saved_t && saved_s && g < m->n_samples; g++) {
			if (saved_t[g]) {
				m->samples[g]->time_delta_ns = saved_t[g];
				m->samples[g]->stack = saved_s[g];
				m->samples[g]->n_time_delta_ns = m->samples[g]->n_stack = 1;
			}
		}
		batch_decode_free(m);
		free(saved_t);
		free(saved_s);
		free(tcol);
		free(scol);
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(curl);
	return NULL;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

static int cmd_load(struct load_opts *o)
{
	struct agent_sim *a = calloc((size_t)o->agents, sizeof(*a));
	pthread_t *th = calloc((size_t)o->agents, sizeof(*th));
	uint64_t t0 = mono_ns(), samples = 0, batches = 0, bytes = 0, fails = 0;
	double dt;

	if (!a || !th)
		return 1;
	curl_global_init(CURL_GLOBAL_ALL);
	for (int i = 0; i < o->agents; i++) {
		a[i] = (struct agent_sim){ .o = o, .id = i, .seed = 0x9e3779b97f4a7c15ULL + (uint64_t)i };
		pthread_create(&th[i], NULL, agent_main, &a[i]);
	}
	for (int i = 0; i < o->agents; i++) {
		pthread_join(th[i], NULL);
		samples += a[i].samples;
		batches += a[i].batches;
		bytes += a[i].bytes;
		fails += a[i].failures;
	}
	dt = (double)(mono_ns() - t0) / 1e9;
	{
		size_t nl = 0;
		double *lat = NULL, p50 = 0, p99 = 0, mx = 0;

		for (int i = 0; i < o->agents; i++)
			nl += a[i].nlat;
		lat = malloc((nl ? nl : 1) * sizeof(*lat));
		nl = 0;
		for (int i = 0; lat && i < o->agents; i++)
			for (size_t k = 0; k < a[i].nlat; k++)
				lat[nl++] = a[i].lat_s[k];
		if (lat && nl) {
			qsort(lat, nl, sizeof(*lat), cmp_double);
			p50 = lat[nl / 2];
			p99 = lat[nl * 99 / 100];
			mx = lat[nl - 1];
		}
		free(lat);
		printf("agents %d batches %llu samples %llu wire_bytes %llu seconds %.2f samples_per_s"
		       " %.0f failures %llu p50_ms %.1f p99_ms %.1f max_ms %.1f\n",
		       o->agents, (unsigned long long)batches, (unsigned long long)samples,
		       (unsigned long long)bytes, dt, (double)samples / dt, (unsigned long long)fails,
		       p50 * 1e3, p99 * 1e3, mx * 1e3);
	}
	free(a);
	free(th);
	curl_global_cleanup();
	return fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "encoding", required_argument, NULL, 'e' },
		{ "url", required_argument, NULL, 'u' },
		{ "token", required_argument, NULL, 'T' },
		{ "agents", required_argument, NULL, 'a' },
		{ "cpus", required_argument, NULL, 'c' },
		{ "hz", required_argument, NULL, 'z' },
		{ "stacks", required_argument, NULL, 's' },
		{ "seconds", required_argument, NULL, 'S' },
		{ "start", required_argument, NULL, 't' },
		{ "span", required_argument, NULL, 'p' },
		{ "batch", required_argument, NULL, 'b' },
		{ "node", required_argument, NULL, 'n' },
		{ "interval", required_argument, NULL, 'i' },
		{ 0 },
	};
	struct load_opts o = { .enc = "none", .agents = 4, .cpus = 16, .hz = 99, .nstacks = 3000,
			       .batch_ns = 10 * NSEC_PER_SEC, .seconds = 20,
			       .span_ns = UINT64_MAX / 2 };
	const char *cmd = argc > 1 ? argv[1] : "";
	int c;

	o.start_ns = wall_ns() - 3600 * NSEC_PER_SEC;
	optind = 2;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e': o.enc = optarg; break;
		case 'u': o.url = optarg; break;
		case 'T': o.token = optarg; break;
		case 'n': o.node = optarg; break;
		case 'a': o.agents = atoi(optarg); break;
		case 'c': o.cpus = atoi(optarg); break;
		case 'z': o.hz = atoi(optarg); break;
		case 's': o.nstacks = atoi(optarg); break;
		case 'S': o.seconds = atof(optarg); break;
		case 't':
			if (parse_time_ns(optarg, &o.start_ns))
				return 2;
			break;
		case 'p':
			if (parse_duration_ns(optarg, &o.span_ns))
				return 2;
			break;
		case 'b':
			if (parse_duration_ns(optarg, &o.batch_ns))
				return 2;
			break;
		case 'i':
			if (parse_duration_ns(optarg, &o.pace_ns))
				return 2;
			break;
		default:
			return 2;
		}
	}
	if (!strcmp(cmd, "encode"))
		return cmd_encode(o.enc);
	if (!strcmp(cmd, "load") && o.url && o.agents > 0 && o.cpus > 0 && o.hz > 0 &&
	    o.nstacks > 0)
		return cmd_load(&o);
	fprintf(stderr, "usage: batchgen encode [--encoding none|gzip|zstd] < script > batch\n"
			"       batchgen load --url URL/api/v1/ingest [--agents N] [--cpus 16] [--hz 99]\n"
			"                [--stacks 3000] [--seconds 20] [--start T] [--span DUR]\n"
			"                [--batch 10s] [--encoding zstd] [--token T] [--node NAME]\n"
			"                [--interval 10s]   (each agent pushes once per interval, kept-alive)\n"
			"       (--node: all agents are that node, agent i covering the i-th --span)\n");
	return 2;
}
