/* cpu_pool.c - the CPU backend's one thread pool: the calling thread is
 * worker 0; workers spin briefly between jobs (a decode step is ~130 short
 * ones), then sleep on a condition variable. Every CPU operation, SeKV's
 * included, runs its parallel parts here.
 */
#include "engine/cpu/backend_cpu_int.h"

#include "engine/base/clock.h"
#include "engine/base/err.h"

#include <sched.h>
#include <stdlib.h>

struct worker_arg {
	struct cpu *c;
	int id;
};

void cpu_chunk(int n_items, int n_parts, int part, int *i0, int *i1)
{
	int base = n_items / n_parts, rem = n_items % n_parts;
	*i0 = part * base + (part < rem ? part : rem);
	*i1 = *i0 + base + (part < rem);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* One step of a busy wait: pause first, then give the core away, so a
 * waiting thread does not starve the one it waits for when the machine
 * has fewer free cores than threads. */
static inline void cpu_backoff(unsigned spins)
{
	if (spins < 256)
		cpu_relax();
	else
		sched_yield();
}

/* Waits until gen moves past seen (or quit): spins, then sleeps. The
 * sleepers count and gen are both seq_cst, so a caller that bumps gen
 * either sees this worker counted and broadcasts, or this worker sees
 * the new gen under the mutex. */
static unsigned long worker_wait(struct cpu *c, unsigned long seen)
{
	double t0 = clk_now();
	unsigned long g;

	for (unsigned spins = 0;; spins++) {
		g = atomic_load(&c->gen);
		if (g != seen || atomic_load(&c->quit))
			return g;
		cpu_backoff(spins);
		if ((spins & 63) == 63 && clk_now() - t0 > POOL_SPIN_NS * 1e-9)
			break;
	}
	pthread_mutex_lock(&c->mu);
	atomic_fetch_add(&c->sleepers, 1);
	while ((g = atomic_load(&c->gen)) == seen && !atomic_load(&c->quit))
		pthread_cond_wait(&c->cv_go, &c->mu);
	atomic_fetch_sub(&c->sleepers, 1);
	pthread_mutex_unlock(&c->mu);
	return g;
}

static void *worker_main(void *arg)
{
	struct cpu *c = ((struct worker_arg *)arg)->c;
	int id = ((struct worker_arg *)arg)->id;
	unsigned long seen = 0;

	free(arg);
	for (;;) {
		int i0, i1;
		seen = worker_wait(c, seen);
		if (atomic_load(&c->quit))
			return NULL;
		cpu_chunk(c->n_items, c->n_threads, id, &i0, &i1);
		if (i0 < i1)
			c->fn(c->ctx, i0, i1, id);
		atomic_fetch_sub_explicit(&c->pending, 1, memory_order_release);
	}
}

/* Runs fn over [0, n_items) split into n_threads contiguous chunks. Small
 * jobs run on the calling thread alone. One caller at a time. */void cpu_parallel_for(struct cpu *c, int n_items, int min_per_thread,
		      pool_fn fn, void *ctx)
{
	int i0, i1;

	if (c->n_threads <= 1 || n_items < 2 * min_per_thread) {
		if (n_items > 0)
			fn(ctx, 0, n_items, 0);
		return;
	}
	c->fn = fn;
	c->ctx = ctx;
	c->n_items = n_items;
	atomic_store(&c->pending, c->n_threads - 1);
	atomic_fetch_add(&c->gen, 1);
	if (atomic_load(&c->sleepers) > 0) {
		pthread_mutex_lock(&c->mu);
		pthread_cond_broadcast(&c->cv_go);
		pthread_mutex_unlock(&c->mu);
	}

	cpu_chunk(n_items, c->n_threads, 0, &i0, &i1);
	if (i0 < i1)
		fn(ctx, i0, i1, 0);

	for (unsigned spins = 0; atomic_load_explicit(&c->pending, memory_order_acquire) > 0; spins++)
		cpu_backoff(spins);
}
int cpu_pool_start(struct cpu *c, char *err, size_t errlen)
{
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv_go, NULL);
	c->th = calloc((size_t)c->n_threads, sizeof *c->th);
	if (!c->th)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "backend: cpu: out of memory");
	for (int i = 1; i < c->n_threads; i++) {
		struct worker_arg *wa = malloc(sizeof *wa);
		if (wa) {
			wa->c = c;
			wa->id = i;
		}
		if (!wa || pthread_create(&c->th[c->n_started], NULL, worker_main, wa) != 0) {
			free(wa);
			return sekv_errf(err, errlen, SEKV_EIO, "backend: cpu: cannot start thread %d", i);
		}
		c->n_started++;
	}
	return 0;
}

void cpu_pool_stop(struct cpu *c)
{
	if (!c->th)
		return;
	pthread_mutex_lock(&c->mu);
	atomic_store(&c->quit, 1);
	pthread_cond_broadcast(&c->cv_go);
	pthread_mutex_unlock(&c->mu);
	for (int i = 0; i < c->n_started; i++)
		pthread_join(c->th[i], NULL);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv_go);
	free(c->th);
	c->th = NULL;
}
