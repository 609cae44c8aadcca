/* SPDX-License-Identifier: Apache-2.0 */
/* The probe-firing functions of tests/cupti/fake_lib.c (libgpuscope_cupti_fake.so). */
#ifndef GPUSCOPE_CUPTI_FAKE_LIB_H
#define GPUSCOPE_CUPTI_FAKE_LIB_H

#include <stdint.h>

struct gpuscope_cupti_rec;

int fake_attached(void);
void fake_launch(uint32_t cid, uint32_t cid2);
void fake_buffer(const struct gpuscope_cupti_rec *recs, uint32_t n);
void fake_name(uint32_t idx, const char *name);
void fake_clock(uint64_t cupti_ns, uint64_t mono_ns);
void fake_drops(uint64_t cupti, uint64_t lib);
void fake_status(uint32_t what, uint64_t a, uint64_t b);
int fake_window(void);

#endif
