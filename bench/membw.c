/* membw.c - `sekv-membw`: this machine's memory bandwidth, the ceiling for
 * decode (every weight is read once per token).
 *
 * copy: T threads each memcpy their share of a 1 GiB float buffer into a
 * second one; bytes read + bytes written per pass (STREAM convention).
 * read: T threads sum their share of the 1 GiB buffer (read-only pass).
 * Buffers are touched by their threads before timing; best of 5 passes.
 * Prints `copy_gb_s X` and `read_gb_s X` (GB = 1e9 bytes).
 */
#include "engine/base/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MEMBW_BYTES ((size_t)1 << 30)
#define MEMBW_REPS 5
#define MEMBW_MAX_THREADS 256

enum membw_op { OP_TOUCH, OP_COPY, OP_READ };

struct membw_job {
	enum membw_op op;
	float *src;        /* [n] this thread's share */
	float *dst;        /* [n] */
	size_t n;          /* floats */
	uint64_t sum;      /* OP_READ result, keeps the loads alive */
};

static void *membw_worker(void *arg)
{
	struct membw_job *j = arg;

	switch (j->op) {
	case OP_TOUCH:
		for (size_t i = 0; i < j->n; i++) {
			j->src[i] = (float)(i & 1023);
			j->dst[i] = 0.0f;
		}
		break;
	case OP_COPY:
		memcpy(j->dst, j->src, j->n * sizeof(float));
		break;
	case OP_READ: {
		/* Eight independent integer chains so the loop is bound by loads,
		 * not by add latency; the bits are summed, not the floats. */
		const uint64_t *p = (const uint64_t *)j->src;
		size_t n = j->n * sizeof(float) / sizeof(uint64_t);
		uint64_t s[8] = { 0 };
		size_t i = 0;

		for (; i + 8 <= n; i += 8)
			for (int k = 0; k < 8; k++)
				s[k] += p[i + k];
		for (; i < n; i++)
			s[0] += p[i];
		j->sum = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
		break;
	}
	}
	return NULL;
}

/* Runs op on all threads; returns the wall seconds or -1 on a thread error. */
static double membw_run(struct membw_job *jobs, int n_threads, enum membw_op op)
{
	pthread_t tid[MEMBW_MAX_THREADS];
	double t0 = clk_now();
	int started = 0, rc = 0;

	for (int i = 0; i < n_threads; i++)
		jobs[i].op = op;
	for (; started < n_threads; started++) {
		if ((rc = pthread_create(&tid[started], NULL, membw_worker, &jobs[started])))
			break;
	}
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	if (rc) {
		fprintf(stderr, "sekv-membw: pthread_create: %s\n", strerror(rc));
		return -1.0;
	}
	return clk_now() - t0;
}

int main(int argc, char **argv)
{
	long n_cpu = sysconf(_SC_NPROCESSORS_ONLN);
	int n_threads = n_cpu > 0 ? (int)n_cpu : 1;
	struct membw_job jobs[MEMBW_MAX_THREADS];
	size_t n_float = MEMBW_BYTES / sizeof(float);
	float *src = NULL, *dst = NULL;
	double best_copy = 1e30, best_read = 1e30;
	uint64_t sum = 0;
	int ret = 1;

	for (int i = 1; i < argc; i++) {
		char *end;
		long v;

		if (!strcmp(argv[i], "-t") && i + 1 < argc) {
			errno = 0;
			v = strtol(argv[++i], &end, 10);
			if (errno || *end || end == argv[i] || v < 1 || v > MEMBW_MAX_THREADS) {
				fprintf(stderr, "sekv-membw: option: -t: '%s' is not in [1, %d]\n",
					argv[i], MEMBW_MAX_THREADS);
				return 1;
			}
			n_threads = (int)v;
		} else {
			fprintf(stderr, "usage: sekv-membw [-t THREADS]\n");
			return !strcmp(argv[i], "-h") ? 0 : 1;
		}
	}
	if (n_threads > MEMBW_MAX_THREADS)
		n_threads = MEMBW_MAX_THREADS;
	if (posix_memalign((void **)&src, 4096, MEMBW_BYTES) ||
	    posix_memalign((void **)&dst, 4096, MEMBW_BYTES)) {
		fprintf(stderr, "sekv-membw: buffers: 2 GiB: out of memory\n");
		goto out;
	}
	/* Shares are whole 64-float chunks, the last thread takes the rest. */
	size_t share = n_float / n_threads / 64 * 64;
	for (int i = 0; i < n_threads; i++) {
		size_t off = (size_t)i * share;

		jobs[i] = (struct membw_job){
			.src = src + off, .dst = dst + off,
			.n = i == n_threads - 1 ? n_float - off : share,
		};
	}
	if (membw_run(jobs, n_threads, OP_TOUCH) < 0)
		goto out;
	for (int r = 0; r < MEMBW_REPS; r++) {
		double tc = membw_run(jobs, n_threads, OP_COPY);
		double tr = membw_run(jobs, n_threads, OP_READ);

		if (tc < 0 || tr < 0)
			goto out;
		best_copy = tc < best_copy ? tc : best_copy;
		best_read = tr < best_read ? tr : best_read;
		for (int i = 0; i < n_threads; i++)
			sum += jobs[i].sum;
	}
	printf("copy_gb_s %.2f\n", 2.0 * MEMBW_BYTES / best_copy / 1e9);
	printf("read_gb_s %.2f\n", (double)MEMBW_BYTES / best_read / 1e9);
	/* The sum is printed to stderr only so the read loop cannot be dropped. */
	fprintf(stderr, "sekv-membw: %d threads, checksum %llu\n", n_threads,
		(unsigned long long)sum);
	ret = 0;
out:
	free(src);
	free(dst);
	return ret;
}
