/* SPDX-License-Identifier: Apache-2.0 */
/* The known values cupti_replay fires and test_cupti_usdt expects (times in CUPTI ns). */
#ifndef GPUSCOPE_CUPTI_SCENARIO_H
#define GPUSCOPE_CUPTI_SCENARIO_H

#define SC_C0		 1000000000000ull	/* CUPTI clock at the clock pair */
#define SC_MS		 1000000ull
#define SC_NAME_MATMUL	 "_Z9matmul_k1PfS_i"	/* matmul_k1(float*, float*, int) */
#define SC_NAME_RELU	 "_Z6relu_kPf"		/* relu_k(float*) */
#define SC_NAME_GRAPH	 "graph_kernel"		/* not mangled: kept as is */
#define SC_MANY		 100			/* kernels of the chunked, reversed buffer */
#define SC_MANY_CID0	 1000
#define SC_LATE_CID	 300			/* a record that comes before its launch */
#define SC_CUPTI_DROPS	 5
#define SC_LIB_DROPS	 2

#endif
