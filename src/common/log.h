/* SPDX-License-Identifier: Apache-2.0 */
/* One logging family for every binary: level check inside the macro, messages to stderr. */
#ifndef GPUSCOPE_LOG_H
#define GPUSCOPE_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

extern int gpuscope_log_level;	/* default LOG_INFO; -v raises it to LOG_DEBUG */

void gpuscope_log(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...)                                                                           \
	do {                                                                                       \
		if ((lvl) <= gpuscope_log_level)                                                   \
			gpuscope_log((lvl), __VA_ARGS__);                                          \
	} while (0)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_at(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

#endif
