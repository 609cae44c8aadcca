/* SPDX-License-Identifier: Apache-2.0 */
/* The logging sink: "<prog> <level>: message" on stderr. */
#include <stdarg.h>
#include <stdio.h>
#include <errno.h>
#include "common/log.h"

int gpuscope_log_level = LOG_INFO;

void gpuscope_log(enum log_level lvl, const char *fmt, ...)
{
	static const char *names[] = { "error", "warning", "info", "debug" };
	extern char *program_invocation_short_name;
	int saved = errno;
	va_list ap;

	fprintf(stderr, "%s %s: ", program_invocation_short_name, names[lvl]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	errno = saved;
}
