// SPDX-License-Identifier: Apache-2.0
/*
 * libtorch_cpu.so stand-in for the backward-stack test (no GPU, no PyTorch): the two autograd
 * symbols the agent cares about under their real (Itanium-mangled) names, doing what they do
 * around a CUDA backward pass.
 * - torch::autograd::Engine::execute(...) is called by the Python thread (ctypes, as
 *   loss.backward() reaches it through libtorch_python), hands the graph to the engine's device
 *   thread, and waits until it is done.
 * - torch::autograd::Engine::thread_main(...) is that device thread's loop: it launches the
 *   "backward kernels" through the libcupti stand-in's fake_cupti_launch(), from C, so its stack
 *   has no Python frame, as autograd's threads have none; each node also spends ~0.3 ms of CPU
 *   and sleeps 0.2 ms (on- and off-CPU samples inside the call), and the thread waits for its
 *   next task in ReadyQueue::pop (off-CPU between calls: idle, for no call).
 * Meanwhile a plain thread of the same process (a data loader's, say) launches its own kernel:
 * it must stay under its own stack, not the backward call's.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define NOINLINE __attribute__((noinline))

typedef uint32_t (*launch_fn)(const char *name, uint32_t device, uint32_t stream, uint64_t dur_ns);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_t worker, side;
static bool started;
static uint64_t posted, worker_done, side_done;	/* graph tasks: asked, finished */
static struct {
	const char *kernel, *side_kernel;
	uint32_t n;
	uint64_t dur_ns;
} task;

static launch_fn launcher(void)
{
	static launch_fn fn;

	if (!fn)
		fn = (launch_fn)dlsym(RTLD_DEFAULT, "fake_cupti_launch");
	return fn;
}

/* torch::autograd::Engine::evaluate_function(...): one node of the graph, its kernel */
NOINLINE static void evaluate_function(const char *kernel, uint64_t dur_ns)
	__asm__("_ZN5torch8autograd6Engine17evaluate_functionERSt10shared_ptrINS0_9GraphTaskEE"
		"PNS0_4NodeERNS0_11InputBufferERKS3_INS0_10ReadyQueueEE");
NOINLINE static void evaluate_function(const char *kernel, uint64_t dur_ns)
{
	struct timespec t0, t;

	/* the node's CPU side: ~0.3 ms of work, so the CPU sampler sees the device thread */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 300000);
	launcher()(kernel, 0, 21, dur_ns);
	/* and blocks a moment inside the node (a copy, a lock): off-CPU for the backward call */
	nanosleep(&(struct timespec){ .tv_nsec = 200000 }, NULL);
	__asm__ volatile("" ::: "memory");
}

/* The next graph task after *seen: waits for engine_execute() to post one. As
 * torch::autograd::ReadyQueue::pop(): the device thread idle between backward calls. */
NOINLINE static void next_task(uint64_t *seen) __asm__("_ZN5torch8autograd10ReadyQueue3popEv");
NOINLINE static void next_task(uint64_t *seen)
{
	pthread_mutex_lock(&mu);
	while (posted == *seen)
		pthread_cond_wait(&cv, &mu);
	*seen = posted;
	pthread_mutex_unlock(&mu);
}

/* Tells engine_execute() that this thread finished task seen. */
static void task_done(uint64_t seen, uint64_t *done)
{
	pthread_mutex_lock(&mu);
	*done = seen;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* torch::autograd::Engine::thread_main(std::shared_ptr<GraphTask> const&) */
NOINLINE void *thread_main(void *arg)
	__asm__("_ZN5torch8autograd6Engine11thread_mainERKSt10shared_ptrINS0_9GraphTaskEE");
NOINLINE void *thread_main(void *arg)
{
	for (uint64_t seen = 0;;) {
		next_task(&seen);
		for (uint32_t i = 0; i < task.n; i++)
			evaluate_function(task.kernel, task.dur_ns);
		task_done(seen, &worker_done);
	}
	return arg;
}

/* Another thread of the process that launches while a backward runs: not autograd's. */
NOINLINE static void *side_loop(void *arg)
{
	for (uint64_t seen = 0;;) {
		next_task(&seen);
		if (task.side_kernel)
			launcher()(task.side_kernel, 0, 22, task.dur_ns / 8);
		task_done(seen, &side_done);
	}
	return arg;
}

/*
 * torch::autograd::Engine::execute(roots, inputs, keep_graph, create_graph, accumulate_grad,
 * outputs): here n launches of kernel by the device thread, one of side_kernel (may be NULL,
 * an eighth as long)
 * by the other thread. Returns 0, -1 when the libcupti stand-in is not loaded.
 */
EXPORT int engine_execute(const char *kernel, uint32_t n, uint64_t dur_ns, const char *side_kernel)
	__asm__("_ZN5torch8autograd6Engine7executeERKSt6vectorINS0_4EdgeESaIS3_EE"
		"RKS2_IN2at6TensorESaIS9_EEbbbS7_");
EXPORT int engine_execute(const char *kernel, uint32_t n, uint64_t dur_ns, const char *side_kernel)
{
	uint64_t me;

	if (!launcher())
		return -1;
	pthread_mutex_lock(&mu);
	if (!started) {
		started = pthread_create(&worker, NULL, thread_main, NULL) == 0 &&
			  pthread_create(&side, NULL, side_loop, NULL) == 0;
		if (!started) {
			pthread_mutex_unlock(&mu);
			return -1;
		}
	}
	task.kernel = kernel;
	task.side_kernel = side_kernel;
	task.n = n;
	task.dur_ns = dur_ns;
	me = ++posted;
	pthread_cond_broadcast(&cv);
	while (worker_done != me || side_done != me)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return 0;
}
