/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's HTTP client (src/agent/http_client.h) against a peer on loopback that answers
 * canned replies and keeps each request's head: headers a request carries, the token file's
 * last good token kept while it is unreadable, statuses and transport failures as -errno with
 * one line of why, answer bounds, streaming and cancel, URL escaping.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "agent/http_client.h"
#include "test.h"

/* ---- the peer: one connection at a time, one answer per request, then close -------------- */
struct peer {
	int fd, port;
	pthread_t th;
	const char *reply;		/* the whole answer, written after the request's body */
	char head[8192];		/* the last request's head and body */
	int requests;
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	int c;

	while ((c = accept(p->fd, NULL, NULL)) >= 0) {
		char buf[8192];
		size_t n = 0;
		ssize_t r;
		char *end = NULL, *cl;

		while (n < sizeof(buf) - 1 && (r = read(c, buf + n, sizeof(buf) - 1 - n)) > 0) {
			n += (size_t)r;
			buf[n] = 0;
			end = strstr(buf, "\r\n\r\n");
			if (!end)
				continue;
			cl = strcasestr(buf, "Content-Length: ");
			if (!cl || cl > end || n >= (size_t)(end + 4 - buf) + strtoul(cl + 16, NULL, 10))
				break;
		}
		snprintf(p->head, sizeof(p->head), "%s", buf);
		p->requests++;
		if (write(c, p->reply, strlen(p->reply)) < 0)
			perror("peer write");
		close(c);
	}
	return NULL;
}

static bool peer_start(struct peer *p)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (p->fd < 0 || bind(p->fd, (struct sockaddr *)&a, sizeof(a)) || listen(p->fd, 8) ||
	    getsockname(p->fd, (struct sockaddr *)&a, &len))
		return false;
	p->port = ntohs(a.sin_port);
	return !pthread_create(&p->th, NULL, peer_main, p);
}

static void peer_stop(struct peer *p)
{
	shutdown(p->fd, SHUT_RDWR);
	close(p->fd);
	pthread_join(p->th, NULL);
}

static struct http_link *link_to(int port, const char *token_file)
{
	char url[64];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d//", port);
	return http_link__new(&(struct http_link_opts){ .name = "test", .base_url = url,
							.token_file = token_file,
							.timeout_ns = 5000000000ull });
}

static bool write_file(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");

	return f && fputs(s, f) >= 0 && !fclose(f);
}

/* A POST carries its headers and body, and the token; an unreadable token file keeps the last. */
static bool test_http_client_post_and_token(void)
{
	char tok[] = "/tmp/gpuscope-httpc-tokXXXXXX";
	struct peer p = { .reply = "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n" };
	struct http_link *l = NULL;
	struct http_conn *c = NULL;
	struct http_answer a = { 0 };
	struct http_req req = { .method = "POST", .path = "/api/v1/ingest", .body = "abc",
				.body_len = 3, .content_type = "application/x-protobuf",
				.content_encoding = "zstd" };
	int fd = mkstemp(tok);
	bool ok = ASSERT_TRUE(fd >= 0 && peer_start(&p), "peer");

	if (fd >= 0)
		close(fd);
	ok = ok && ASSERT_TRUE(write_file(tok, "first-token\n"), "token file");
	l = ok ? link_to(p.port, tok) : NULL;
	c = l ? http_conn__new(l) : NULL;
	ok = ok && ASSERT_TRUE(c, "link and connection") &&
	     ASSERT_EQ(strncmp(http_link__base(l), "http://127.0.0.1:", 17), 0, "base") &&
	     ASSERT_TRUE(http_link__base(l)[strlen(http_link__base(l)) - 1] != '/',
			 "trailing '/' dropped") &&
	     ASSERT_EQ(http_conn__request(c, &req, &a), 0, "request") &&
	     ASSERT_EQ(a.status, 204, "status") &&
	     ASSERT_TRUE(strstr(p.head, "POST /api/v1/ingest HTTP/1.1\r\n") == p.head, "path") &&
	     ASSERT_TRUE(strstr(p.head, "Content-Type: application/x-protobuf\r\n"), "type") &&
	     ASSERT_TRUE(strstr(p.head, "Content-Encoding: zstd\r\n"), "encoding") &&
	     ASSERT_TRUE(strstr(p.head, "Authorization: Bearer first-token\r\n"), "token") &&
	     ASSERT_TRUE(strstr(p.head, "User-Agent: gpuscope-agent\r\n"), "user agent") &&
	     ASSERT_TRUE(!strstr(p.head, "Expect:"), "no 100-continue") &&
	     ASSERT_TRUE(strstr(p.head, "\r\n\r\nabc"), "body");
	http_answer__done(&a);
	/* rotated: the new one; then unreadable: the last good one */
	ok = ok && ASSERT_TRUE(write_file(tok, "second-token"), "rotate") &&
	     ASSERT_EQ(http_conn__request(c, &req, &a), 0, "after the rotation") &&
	     ASSERT_TRUE(strstr(p.head, "Authorization: Bearer second-token\r\n"), "rotated token");
	http_answer__done(&a);
	unlink(tok);
	ok = ok && ASSERT_EQ(http_conn__request(c, &req, &a), 0, "token file gone") &&
	     ASSERT_TRUE(strstr(p.head, "Authorization: Bearer second-token\r\n"),
			 "the last good token kept");
	http_answer__done(&a);
	http_conn__free(c);
	http_link__free(l);
	peer_stop(&p);
	return ok;
}

struct stream {
	size_t bytes;
	bool stop_at_once;
	int cancels;
};

static bool on_data(void *arg, const char *d, size_t n)
{
	struct stream *s = arg;

	(void)d;
	s->bytes += n;
	return !s->stop_at_once;
}

/* Statuses, answer bounds, streaming; failures as -errno with their reason. */
static bool test_http_client_answers(void)
{
	struct peer p = { .reply = "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 24\r\n\r\n"
				   "batch too large\nsplit it" };
	struct http_link *l;
	struct http_conn *c;
	struct http_answer a;
	struct stream st = { 0 };
	bool ok = ASSERT_TRUE(peer_start(&p), "peer");

	l = link_to(p.port, NULL);
	c = l ? http_conn__new(l) : NULL;
	ok = ok && ASSERT_TRUE(c, "connection") &&
	     ASSERT_EQ(http_conn__request(c, &(struct http_req){ .path = "/x" }, &a), 0,
		       "an answer, whatever its status") &&
	     ASSERT_EQ(a.status, 413, "status") &&
	     ASSERT_STREQ(a.why, "HTTP 413: batch too large", "why: the answer's first line") &&
	     ASSERT_EQ(a.len, 24, "body kept") && ASSERT_TRUE(!strstr(p.head, "Authorization"),
							      "no token file: no header");
	http_answer__done(&a);
	ok = ok && ASSERT_EQ(http_conn__request(c, &(struct http_req){ .path = "/x",
								     .max_body = 10 }, &a),
			     -EMSGSIZE, "longer than max_body");
	http_answer__done(&a);
	ok = ok && ASSERT_EQ(http_conn__request(c, &(struct http_req){ .path = "/x", .max_body = 10,
								     .keep_head = true }, &a),
			     0, "keep_head") &&
	     ASSERT_EQ(a.len, 10, "its head") && ASSERT_STREQ(a.body, "batch too ", "head");
	http_answer__done(&a);
	/* streaming goes to on_data for 2xx only: a 413's body is kept for the message */
	ok = ok && ASSERT_EQ(http_conn__request(c, &(struct http_req){ .path = "/x",
				.on_data = on_data, .arg = &st }, &a), 0, "not streamed") &&
	     ASSERT_EQ(st.bytes, 0, "on_data not called") && ASSERT_EQ(a.len, 24, "kept");
	http_answer__done(&a);
	p.reply = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
	ok = ok && ASSERT_EQ(http_conn__request(c, &(struct http_req){ .path = "/x",
				.on_data = on_data, .arg = &st }, &a), 0, "streamed") &&
	     ASSERT_EQ(st.bytes, 5, "on_data got it") && ASSERT_EQ(a.len, 0, "not kept");
	http_answer__done(&a);
	st.stop_at_once = true;
	ok = ok && ASSERT_EQ(http_conn__request(c, &(struct http_req){ .path = "/x",
				.on_data = on_data, .arg = &st }, &a), -ECANCELED, "on_data said stop");
	http_answer__done(&a);
	{	/* each request counted by what became of it */
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);

		http_client_metrics(f);
		fclose(f);
		ok = ok && ASSERT_TRUE(strstr(text, "{link=\"test\",result=\"http_4xx\"} 3\n"),
				       "three 413s") &&
		     ASSERT_TRUE(strstr(text, "{link=\"test\",result=\"ok\"} 1\n"), "one 200") &&
		     ASSERT_TRUE(strstr(text, "{link=\"test\",result=\"too_long\"} 1\n"),
				 "one too long") &&
		     ASSERT_TRUE(strstr(text, "{link=\"test\",result=\"cancelled\"} 1\n"),
				 "one cancelled");
		free(text);
	}
	http_conn__free(c);
	http_link__free(l);
	peer_stop(&p);
	/* nothing listens there any more */
	l = link_to(p.port, NULL);
	c = l ? http_conn__new(l) : NULL;
	ok = ok && ASSERT_TRUE(c, "connection") &&
	     ASSERT_EQ(http_conn__request(c, &(struct http_req){ .path = "/x" }, &a),
		       -ECONNREFUSED, "refused") &&
	     ASSERT_EQ(a.status, 0, "no status") && ASSERT_TRUE(a.why[0], "a reason");
	http_answer__done(&a);
	http_conn__free(c);
	http_link__free(l);
	return ok;
}

static bool test_http_client_link_and_escape(void)
{
	char *e = http_escape("a b/ü~-._?&=");
	bool ok;

	errno = 0;
	ok = ASSERT_TRUE(!http_link__new(&(struct http_link_opts){ .base_url = "ftp://x" }) &&
			 errno == EINVAL, "not http(s): EINVAL") &&
	     ASSERT_TRUE(!http_link__new(&(struct http_link_opts){ 0 }) && errno == EINVAL,
			 "no URL: EINVAL") &&
	     ASSERT_STREQ(e, "a%20b%2F%C3%BC~-._%3F%26%3D", "escaped");
	free(e);
	return ok;
}

TEST_MAIN(T(test_http_client_post_and_token), T(test_http_client_answers),
	  T(test_http_client_link_and_escape))
