/* ui_demo.c - dev tool, not part of the product build: runs the real chat
 * screen (ui/) against a synthetic engine, to look at the layout and try
 * the keys (e.g. in tmux). Answers are canned word streams; every token
 * carries a frame with a fixed fake span list and SeKV statistics (zoom
 * counts and zoom records) that move from step to step. A question containing "fail" returns an error,
 * "long" streams a long answer.
 *
 * Build:  cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -I. -o /tmp/ui_demo
 *           tools/ui_demo.c ui/[a-z]*.c engine/base/err.c engine/base/utf8.c \
 *           engine/base/clock.c engine/base/fmt.c -lncursesw
 * Run:    /tmp/ui_demo [--delay MS] [--layers N] [--heads N] [--full]
 *                      [--budget MIB] [--crash]
 *         (--crash: a question containing "crash" calls abort(), to check
 *          that the terminal is restored.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"
#include "engine/base/err.h"
#include "engine/model/model.h"
#include "engine/sekv/sekv.h"
#include "ui/ui.h"

#define N_TOK_DOC 120000
#define MAX_LAYER 64
#define MAX_HEAD 64
#define N_FAKE 12
#define N_SPAN 4000 /* fake span list: ids 0..N_SPAN-1 */

static const char fake_doc[] =
	"Chapter 4. The treaty was signed in Vienna on 3 May 1815 by the "
	"delegates of five powers, after eleven weeks of talks. Its article 7 "
	"fixed the border along the river Inn and gave the salt works at "
	"Hallein back to the archbishopric. Naïve readers often miss that the "
	"annex — not the treaty — set the tolls: 4 kreuzer per cart, 1 per "
	"pedestrian. The Japanese envoy's note (東京の公文書館) calls it "
	"\"a peace of accountants\". Appendix B lists the 312 signatories with "
	"their seals; the last page is torn. In 1816 a second protocol moved "
	"the customs house to Passau and halved the tolls for grain. ";

static const struct { int span, start, len; } fake_span[N_FAKE] = {
	{14, 180, 40}, {88, 2200, 120}, {301, 9050, 64}, {415, 15120, 32},
	{777, 30100, 200}, {1042, 44640, 48}, {1337, 52000, 96}, {2048, 67000, 60},
	{2500, 81000, 140}, {3001, 93500, 36}, {3500, 104000, 80}, {3999, 118400, 52},
};

static const char *answer_words[] = {
	"The ", "treaty ", "was ", "signed ", "in ", "Vienna ", "on ", "3 ", "May ",
	"1815 ", "(chapter ", "4); ", "article ", "7 ", "fixed ", "the ", "border ",
	"along ", "the ", "Inn. ", "The ", "tolls ", "\xe2\x80\x94 ", "4 ", "kreuzer ",
	"per ", "cart ", "\xe2\x80\x94 ", "were ", "set ", "in ", "the ", "annex, ",
	"not ", "the ", "treaty ", "itself. ", "\xe6\x9d\xb1\xe4\xba\xac ", "archive ",
	"note ", "agrees ", "\xf0\x9f", "\x93\x9c", " ", "(naïve ", "café ",
	"readers ", "miss ", "it).\n\n", "In ", "1816 ", "a ", "second ", "protocol ",
	"halved ", "the ", "grain ", "tolls. ",
};
#define N_WORDS ((int)(sizeof answer_words / sizeof answer_words[0]))

struct demo {
	int delay_ms, n_layer, n_head, full, crash;
	size_t budget;
	int32_t layer_id[MAX_LAYER];
	int zoom_count[MAX_LAYER * MAX_HEAD];
	struct sekv_zoom zoom[MAX_LAYER * MAX_HEAD * 3];
	struct sekv_stats stats;
	struct sekv_span span[N_SPAN];
};

static unsigned hash(unsigned x)
{
	x ^= x >> 16;
	x *= 0x7feb352d;
	x ^= x >> 15;
	x *= 0x846ca68b;
	x ^= x >> 16;
	return x;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Fills counts and the zoom list for step t: each (layer, head) zooms 0..3
 * of the fake spans, favouring a few "relevant" ones. */
static int fake_step(struct demo *d, int t)
{
	int n = 0;

	for (int l = 0; l < d->n_layer; l++)
		for (int h = 0; h < d->n_head; h++) {
			unsigned r = hash((unsigned)(t * 7919 + l * 131 + h));
			int c = (int)(r % 4) - (l == 0 ? 1 : 0);
			c = c < 0 ? 0 : c;
			d->zoom_count[l * d->n_head + h] = c;
			for (int k = 0; k < c; k++) {
				unsigned q = hash(r + (unsigned)k * 17u);
				int s = (q % 3 == 0) ? (int)(q % N_FAKE) : (int)((t / 8 + k) % 4) + 4;
				struct sekv_zoom *z = &d->zoom[n++];
				z->span = fake_span[s].span;
				z->layer = l;
				z->head = h;
				z->steps = 1;
				z->alpha = 0.5f + (float)(q % 50) / 100.0f;
			}
		}
	return n;
}

static int demo_ask(void *ud, struct ui_chat *ui, const char *q, char *err, size_t errlen)
{
	struct demo *d = ud;
	int n_tok = strstr(q, "long") ? 6 * N_WORDS : N_WORDS;
	double t0;

	if (strstr(q, "fail"))
		return sekv_errf(err, errlen, SEKV_EIO, "decode: demo: asked to fail");
	if (d->crash && strstr(q, "crash"))
		abort();
	t0 = clk_now();
	for (int t = 0; t < n_tok; t++) {
		struct ui_frame f;
		double dt;

		sleep_ms(d->delay_ms);
		dt = clk_now() - t0;
		memset(&f, 0, sizeof f);
		f.piece = answer_words[t % N_WORDS];
		f.piece_len = (int)strlen(f.piece);
		f.n_gen = t + 1;
		f.tps = dt > 0 ? (t + 1) / dt : 0.0;
		f.n_layer = d->n_layer;
		f.n_head = d->n_head;
		f.layer_id = d->layer_id;
		if (!d->full) {
			d->stats.n_zoom = fake_step(d, t);
			d->stats.zoom_count = d->zoom_count;
			d->stats.zoom = d->zoom;
			d->stats.budget_bytes = d->budget;
			f.stats = &d->stats;
			f.n_span = N_SPAN;
			f.span = d->span;
		}
		f.n_tok_doc = N_TOK_DOC;
		f.full_kv_bytes = model_kv_bytes(N_TOK_DOC, d->n_layer, 1, 256);
		f.resident_bytes = d->full ? f.full_kv_bytes
					   : (size_t)(14.5 * 1048576) + (size_t)(d->stats.n_zoom * 48 * 1024);
		f.peak_resident_bytes = (size_t)(21.3 * 1048576);
		if (f.peak_resident_bytes < f.resident_bytes)
			f.peak_resident_bytes = f.resident_bytes;
		f.host_bytes = d->full ? 0 : (size_t)(310.4 * 1048576);
		f.mode = d->full ? "full" : "sekv";
		if (ui_chat_on_token(ui, &f))
			return SEKV_EINTR;
	}
	return 0;
}

static void demo_span_text(void *ud, int32_t start, int32_t len, char *buf, size_t cap)
{
	size_t n = sizeof fake_doc - 1, off = ((size_t)start * 7) % (n - 40), want = (size_t)len * 4;

	(void)ud;
	if (cap == 0)
		return;
	/* Start on a character boundary of the fake text. */
	while (off > 0 && ((unsigned char)fake_doc[off] & 0xc0) == 0x80)
		off--;
	if (want > n - off)
		want = n - off;
	if (want > cap - 1)
		want = cap - 1;
	memcpy(buf, fake_doc + off, want);
	buf[want] = '\0';
}

int main(int argc, char **argv)
{
	static struct demo d = {.delay_ms = 40, .n_layer = 3, .n_head = 4};
	struct ui_chat_ops ops = {.ud = &d, .ask = demo_ask, .span_text = demo_span_text};
	struct ui_doc_info info = {
		.title = "Congress of Vienna — final acts and annexes (1815).pdf",
		.doc_id = 7, .n_tok = N_TOK_DOC, .model_name = "gemma-3-270m-q4_k_m",
		.resume_s = 0.42,
	};
	char err[256] = "";
	int rc;

	d.budget = (size_t)(20 * 1048576);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--delay") && i + 1 < argc)
			d.delay_ms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
			d.n_layer = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--heads") && i + 1 < argc)
			d.n_head = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--budget") && i + 1 < argc)
			d.budget = (size_t)(atof(argv[++i]) * 1048576);
		else if (!strcmp(argv[i], "--full"))
			d.full = 1;
		else if (!strcmp(argv[i], "--crash"))
			d.crash = 1;
		else {
			fprintf(stderr, "usage: ui_demo [--delay MS] [--layers N] [--heads N] "
				"[--budget MIB] [--full] [--crash]\n");
			return 2;
		}
	}
	if (d.n_layer < 1 || d.n_layer > MAX_LAYER || d.n_head < 1 || d.n_head > MAX_HEAD) {
		fprintf(stderr, "ui_demo: layers and heads must be 1..64\n");
		return 2;
	}
	for (int l = 0; l < d.n_layer; l++)
		d.layer_id[l] = d.n_layer <= 8 ? 6 * l + 5 : l;
	for (int i = 0; i < N_SPAN; i++)
		d.span[i] = (struct sekv_span){i * (N_TOK_DOC / N_SPAN), N_TOK_DOC / N_SPAN, 0};
	for (int i = 0; i < N_FAKE; i++)
		d.span[fake_span[i].span] = (struct sekv_span){fake_span[i].start, fake_span[i].len, 0};
	rc = ui_chat_run(&ops, &info, err, sizeof err);
	if (rc) {
		fprintf(stderr, "ui_demo: %s\n", err);
		return 1;
	}
	printf("ui_demo: bye\n");
	return 0;
}
