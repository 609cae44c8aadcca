// SPDX-License-Identifier: Apache-2.0
/* pm_sampling (see pm_sampling.h): the kernels, the GPU side, the busy/idle pattern. */
#include "pm_sampling.h"

/* ---- the kernels: PTX, compiled by the driver at load --------------------------------------- */
/* spin: every block spins on %globaltimer for dur ns; block 0 thread 0 stores its start and end
 * (GPU ns) to out[0..1] when out != 0. empty: nothing (the launch-bound loop). work: a fixed
 * dependent FMA chain of n steps per thread (the compute-bound cost check). */
const char ptx[] = ".version 7.0\n"
			  ".target sm_75\n"
			  ".address_size 64\n"
			  "\n"
			  ".visible .entry spin(.param .u64 spin_dur, .param .u64 spin_out)\n"
			  "{\n"
			  "\t.reg .pred %p<3>;\n"
			  "\t.reg .b32 %r<4>;\n"
			  "\t.reg .b64 %rd<7>;\n"
			  "\tld.param.u64 %rd1, [spin_dur];\n"
			  "\tld.param.u64 %rd2, [spin_out];\n"
			  "\tmov.u64 %rd3, %globaltimer;\n"
			  "\tadd.u64 %rd4, %rd3, %rd1;\n"
			  "$L_spin:\n"
			  "\tmov.u64 %rd5, %globaltimer;\n"
			  "\tsetp.lt.u64 %p1, %rd5, %rd4;\n"
			  "\t@%p1 bra $L_spin;\n"
			  "\tmov.u32 %r1, %tid.x;\n"
			  "\tmov.u32 %r2, %ctaid.x;\n"
			  "\tor.b32 %r3, %r1, %r2;\n"
			  "\tsetp.ne.u32 %p2, %r3, 0;\n"
			  "\t@%p2 bra $L_spin_done;\n"
			  "\tsetp.eq.u64 %p2, %rd2, 0;\n"
			  "\t@%p2 bra $L_spin_done;\n"
			  "\tcvta.to.global.u64 %rd6, %rd2;\n"
			  "\tst.global.u64 [%rd6], %rd3;\n"
			  "\tst.global.u64 [%rd6+8], %rd5;\n"
			  "$L_spin_done:\n"
			  "\tret;\n"
			  "}\n"
			  "\n"
			  ".visible .entry empty()\n"
			  "{\n"
			  "\tret;\n"
			  "}\n"
			  "\n"
			  ".visible .entry work(.param .u32 work_n, .param .u64 work_out)\n"
			  "{\n"
			  "\t.reg .pred %p<3>;\n"
			  "\t.reg .b32 %r<4>;\n"
			  "\t.reg .f32 %f<4>;\n"
			  "\t.reg .b64 %rd<3>;\n"
			  "\tld.param.u32 %r1, [work_n];\n"
			  "\tld.param.u64 %rd1, [work_out];\n"
			  "\tmov.u32 %r2, %tid.x;\n"
			  "\tcvt.rn.f32.u32 %f1, %r2;\n"
			  "\tmov.f32 %f2, 0f3F7FBE77;\n"
			  "\tmov.f32 %f3, 0f3A83126F;\n"
			  "\tmov.u32 %r3, 0;\n"
			  "$L_work:\n"
			  "\tfma.rn.f32 %f1, %f1, %f2, %f3;\n"
			  "\tadd.u32 %r3, %r3, 1;\n"
			  "\tsetp.lt.u32 %p1, %r3, %r1;\n"
			  "\t@%p1 bra $L_work;\n"
			  "\tsetp.neu.f32 %p2, %f1, 0f4640E400;\n"
			  "\t@%p2 bra $L_work_done;\n"
			  "\tcvta.to.global.u64 %rd2, %rd1;\n"
			  "\tst.global.f32 [%rd2], %f1;\n"
			  "$L_work_done:\n"
			  "\tret;\n"
			  "}\n";


/* ---- the GPU side ------------------------------------------------------------------------------- */
struct gpu gpu;

void gpu_open(void)
{
	CUmodule mod;

	phase = "CUDA setup";
	CK(p_cuDeviceGet(&gpu.dev, opt.device));
	CK(p_cuDeviceGetName(gpu.name, sizeof(gpu.name), gpu.dev));
	CK(p_cuDeviceGetAttribute(&gpu.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, gpu.dev));
	CK(p_cuDevicePrimaryCtxRetain(&gpu.ctx, gpu.dev));
	CK(p_cuCtxSetCurrent(gpu.ctx));
	phase = "loading the PTX kernels";
	CK(p_cuModuleLoadData(&mod, ptx));
	CK(p_cuModuleGetFunction(&gpu.spin, mod, "spin"));
	CK(p_cuModuleGetFunction(&gpu.empty, mod, "empty"));
	CK(p_cuModuleGetFunction(&gpu.work, mod, "work"));
	CK(p_cuMemAlloc(&gpu.marks, MAX_STRETCHES * 2 * sizeof(uint64_t)));
	CK(p_cuMemAlloc(&gpu.sink, 64));
	CK(p_cuMemsetD8(gpu.marks, 0, MAX_STRETCHES * 2 * sizeof(uint64_t)));
	CK(p_cuCtxSynchronize());
}

static void launch_spin(uint64_t dur_ns, CUdeviceptr out)
{
	void *args[] = {&dur_ns, &out};

	CK(p_cuLaunchKernel(gpu.spin, gpu.sms * 2, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
}

/* The launch-bound loop: wall ns of opt.launches empty kernels and one synchronize. */
uint64_t launch_loop(void)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	int i;

	for (i = 0; i < opt.launches; i++)
		CK(p_cuLaunchKernel(gpu.empty, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
	CK(p_cuCtxSynchronize());
	return now_ns(CLOCK_MONOTONIC) - t0;
}

/* The compute-bound check: wall ns of one fixed FMA kernel over every SM. */
uint64_t work_kernel(void)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	void *args[] = {&opt.work_iters, &gpu.sink};

	CK(p_cuLaunchKernel(gpu.work, gpu.sms * 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CK(p_cuCtxSynchronize());
	return now_ns(CLOCK_MONOTONIC) - t0;
}

/* ---- the busy/idle pattern ---------------------------------------------------------------------- */

void run_pattern(struct run *r)
{
	uint64_t marks[MAX_STRETCHES * 2];
	int gi, k;

	phase = "the busy/idle pattern";
	r->n = 0;
	for (gi = 0; gi < opt.n_groups; gi++) {
		for (k = 0; k < opt.groups[gi].count && r->n < MAX_STRETCHES; k++) {
			struct stretch *s = &r->st[r->n];

			s->group = gi;
			s->h0 = now_ns(CLOCK_REALTIME);
			launch_spin(opt.groups[gi].busy_ns, gpu.marks + (CUdeviceptr)r->n * 16);
			CK(p_cuCtxSynchronize());
			s->h1 = now_ns(CLOCK_REALTIME);
			r->n++;
			sleep_ns(opt.groups[gi].idle_ns);
		}
	}
	CK(p_cuMemcpyDtoH(marks, gpu.marks, (size_t)r->n * 16));
	for (k = 0; k < r->n; k++) {
		r->st[k].g0 = marks[2 * k];
		r->st[k].g1 = marks[2 * k + 1];
	}
}

