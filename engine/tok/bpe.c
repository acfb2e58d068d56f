/* bpe.c - byte-level BPE over a GGUF vocabulary (declared in bpe.h).
 *
 * Text is made well-formed UTF-8 (utf8_repair: U+FFFD for each byte of
 * a malformed sequence), split into words by the pre-tokenizer (pretok.c), and each
 * word's bytes become the tokens of their GPT-2 byte characters, merged
 * pair by pair, lowest merge rank first and leftmost first among equals
 * (Hugging Face tokenizers' and llama.cpp's order), with a heap over a
 * linked list of symbols: O(n log n) in the word's length, never a rescan.
 * Invariant: after open every merge names three pieces of the vocabulary
 * and every id's decoded text is stored, so decoding never allocates per
 * token. Dispatch between this and SentencePiece lives in tok.c.
 */
#include "engine/tok/bpe.h"
#include "engine/tok/pretok.h"
#include "engine/tok/tok_int.h"
#include "engine/base/err.h"
#include "engine/base/hash.h"
#include "engine/base/utf8.h"
#include "engine/gguf/gguf.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* GGUF token types (llama.cpp's LLAMA_TOKEN_TYPE_*). */
enum { TYPE_NORMAL = 1, TYPE_CONTROL = 3, TYPE_USER_DEFINED = 4, TYPE_MAX = 6 };

#define MERGE_EMPTY UINT64_MAX /* a free slot: ids are below 2^31 */
#define WORD_MAX ((size_t)INT32_MAX / 4) /* bytes of one word: positions and heap fit */

/* One slot of the merge table. */
struct bpe_merge {
	uint64_t pair;  /* left id << 32 | right id, or MERGE_EMPTY */
	int32_t rank;   /* index in tokenizer.ggml.merges */
	int32_t id;     /* the merged piece */
};

struct tok_bpe {
	int n_vocab;
	int bos, eos;                /* ids or -1 */
	unsigned char *type;         /* [n_vocab] GGUF token type, 1..6 */
	char *pieces;                /* every piece NUL-terminated, in id order */
	size_t *piece_at;            /* [n_vocab + 1] offsets into pieces */
	char *texts;                 /* decoded text of every id, back to back */
	size_t *text_at;             /* [n_vocab + 1] offsets into texts */
	int max_text;                /* longest decoded text, bytes */
	int32_t *slot;               /* [slot_mask + 1] piece hash: id or -1 */
	uint64_t slot_mask;
	struct bpe_merge *merge;     /* [merge_mask + 1] (left, right) -> rank, id */
	uint64_t merge_mask;
	int32_t byte_id[256];        /* token of each byte's character, -1 if none */
	struct tok_pre *pre;
};

/* ---- GPT-2's byte characters ------------------------------------------ */

/* bytes_to_unicode of GPT-2 (openai/gpt-2 src/encoder.py): the printable
 * bytes '!'..'~', 0xa1..0xac and 0xae..0xff stand for themselves; the
 * other 68, in increasing order, for U+0100..U+0143. */
static uint32_t byte_char(unsigned b)
{
	if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae)
		return b;
	if (b <= 0x20)
		return 0x100 + b;
	if (b <= 0xa0)
		return 0x100 + 33 + (b - 0x7f);
	return 0x100 + 67; /* 0xad */
}

/* The byte a character stands for, or -1. */
static int char_byte(uint32_t cp)
{
	if (cp < 0x100)
		return byte_char(cp) == cp ? (int)cp : -1;
	if (cp >= 0x144)
		return -1;
	cp -= 0x100;
	return cp <= 32 ? (int)cp : cp <= 66 ? (int)(0x7f + cp - 33) : 0xad;
}

/* Writes the UTF-8 of b's character to out (1 or 2 bytes); its length. */
static int byte_char_utf8(unsigned b, char out[4])
{
	return utf8_encode(byte_char(b), out);
}

/* ---- lookups ------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static size_t piece_len(const struct tok_bpe *b, int32_t id)
{
	return b->piece_at[id + 1] - b->piece_at[id] - 1;
}

/* Id of the piece a[0..na) followed by c[0..nc), or -1. */
static int32_t find_piece2(const struct tok_bpe *b, const char *a, size_t na,
			   const char *c, size_t nc)
{
	uint64_t h = hash_fnv1a64(hash_fnv1a64(HASH_FNV1A64_INIT, a, na), c, nc);

	for (uint64_t i = mix64(h) & b->slot_mask;; i = (i + 1) & b->slot_mask) {
		int32_t id = b->slot[i];
		if (id < 0)
			return -1;
		const char *p = b->pieces + b->piece_at[id];
		if (piece_len(b, id) == na + nc && !memcmp(p, a, na) && !memcmp(p + na, c, nc))
			return id;
	}
}

static int32_t find_piece(const struct tok_bpe *b, const char *s, size_t n)
{
	return find_piece2(b, s, n, "", 0);
}

static const struct bpe_merge *find_merge(const struct tok_bpe *b, int32_t l, int32_t r)
{
	uint64_t pair = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;

	for (uint64_t i = mix64(pair) & b->merge_mask;; i = (i + 1) & b->merge_mask) {
		if (b->merge[i].pair == pair)
			return &b->merge[i];
		if (b->merge[i].pair == MERGE_EMPTY)
			return NULL;
	}
}

/* Smallest power of two >= 2n (at least 16): tables stay at most half full. */
static uint64_t table_size(size_t n)
{
	uint64_t s = 16;

	while (s < 2 * (uint64_t)n)
		s <<= 1;
	return s;
}

/* ---- open ------------------------------------------------------------- */

static const char *gguf_name(const struct gguf *g)
{
	return g->path ? g->path : "gguf";
}

/* A required array of strings (or, when strings is 0, of numbers) with n
 * elements (any count when n is 0). */
static int need_array(const struct gguf *g, const char *key, int strings, uint64_t n,
		      const struct gguf_kv **out, char *err, size_t errlen)
{
	const struct gguf_kv *kv = gguf_find_kv(g, key);

	if (!kv)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "tok_open_gguf: %s: %s missing",
				 gguf_name(g), key);
	if (kv->type != GGUF_ARRAY || (strings ? kv->arr_type != GGUF_STRING
			: kv->arr_type == GGUF_STRING || kv->arr_type == GGUF_ARRAY))
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: %s: not an array of %s", gguf_name(g), key,
				 strings ? "strings" : "numbers");
	if (n && kv->arr_n != n)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: %s: %llu elements for %llu tokens", gguf_name(g),
				 key, (unsigned long long)kv->arr_n, (unsigned long long)n);
	*out = kv;
	return 0;
}

/* Pieces, types and the piece hash. */
static int read_tokens(struct tok_bpe *b, const struct gguf *g, char *err, size_t errlen)
{
	const struct gguf_kv *kt = gguf_find_kv(g, "tokenizer.ggml.tokens"), *ky;
	struct gguf_str s;
	size_t total = 0;
	int rc;

	if (!kt)
		return sekv_errf(err, errlen, SEKV_ENOTFOUND,
				 "tok_open_gguf: %s: no vocabulary (tokenizer.ggml.tokens missing)",
				 gguf_name(g));
	if ((rc = need_array(g, "tokenizer.ggml.tokens", 1, 0, &kt, err, errlen)))
		return rc;
	if (kt->arr_n == 0 || kt->arr_n > INT_MAX / 2)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "tok_open_gguf: %s: tokenizer.ggml.tokens: %llu tokens",
				 gguf_name(g), (unsigned long long)kt->arr_n);
	if ((rc = need_array(g, "tokenizer.ggml.token_type", 0, kt->arr_n, &ky, err, errlen)))
		return rc;
	b->n_vocab = (int)kt->arr_n;
	for (int i = 0; i < b->n_vocab; i++) {
		if (gguf_arr_str(g, kt, (uint64_t)i, &s))
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: tokenizer.ggml.tokens[%d]: unreadable", gguf_name(g), i);
		if (s.len == 0 || s.len > INT_MAX / 2)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: tokenizer.ggml.tokens[%d]: %s piece", gguf_name(g), i,
					 s.len ? "over-long" : "empty");
		total += (size_t)s.len + 1;
	}
	b->type = malloc((size_t)b->n_vocab);
	b->pieces = malloc(total);
	b->piece_at = malloc(((size_t)b->n_vocab + 1) * sizeof *b->piece_at);
	b->slot_mask = table_size((size_t)b->n_vocab) - 1;
	b->slot = malloc((b->slot_mask + 1) * sizeof *b->slot);
	if (!b->type || !b->pieces || !b->piece_at || !b->slot)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_gguf: %s: out of memory", gguf_name(g));
	memset(b->slot, 0xff, (b->slot_mask + 1) * sizeof *b->slot);
	b->piece_at[0] = 0;
	for (int i = 0; i < b->n_vocab; i++) {
		double y;
		gguf_arr_str(g, kt, (uint64_t)i, &s); /* read in the first pass */
		memcpy(b->pieces + b->piece_at[i], s.ptr, (size_t)s.len);
		b->pieces[b->piece_at[i] + s.len] = '\0';
		b->piece_at[i + 1] = b->piece_at[i] + (size_t)s.len + 1;
		if (gguf_arr_num(ky, (uint64_t)i, &y) || !(y >= TYPE_NORMAL && y <= TYPE_MAX) || y != floor(y))
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: tokenizer.ggml.token_type[%d]: not a type in 1..6",
					 gguf_name(g), i);
		b->type[i] = (unsigned char)y;
		/* a repeated piece keeps its first id, as a lookup by text can give only one */
		if (find_piece(b, s.ptr, (size_t)s.len) >= 0)
			continue;
		uint64_t h = hash_fnv1a64(HASH_FNV1A64_INIT, s.ptr, (size_t)s.len);
		uint64_t k = mix64(h) & b->slot_mask;
		while (b->slot[k] >= 0)
			k = (k + 1) & b->slot_mask;
		b->slot[k] = i;
	}
	return 0;
}

/* tokenizer.ggml.merges: "left right", rank = index; the first of two
 * equal merges keeps its rank (llama.cpp's rule). */
static int read_merges(struct tok_bpe *b, const struct gguf *g, char *err, size_t errlen)
{
	const struct gguf_kv *km;
	struct gguf_str s;
	int rc;

	if ((rc = need_array(g, "tokenizer.ggml.merges", 1, 0, &km, err, errlen)))
		return rc;
	if (km->arr_n > INT_MAX / 2)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "tok_open_gguf: %s: tokenizer.ggml.merges: %llu merges",
				 gguf_name(g), (unsigned long long)km->arr_n);
	b->merge_mask = table_size((size_t)km->arr_n) - 1;
	if (!(b->merge = malloc((b->merge_mask + 1) * sizeof *b->merge)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_gguf: %s: out of memory", gguf_name(g));
	for (uint64_t i = 0; i <= b->merge_mask; i++)
		b->merge[i].pair = MERGE_EMPTY;
	for (uint64_t i = 0; i < km->arr_n; i++) {
		const char *sp;
		size_t nl;
		int32_t l, r, id;

		if (gguf_arr_str(g, km, i, &s))
			return sekv_errf(err, errlen, SEKV_EFORMAT, "tok_open_gguf: %s: tokenizer.ggml.merges[%llu]: unreadable",
					 gguf_name(g), (unsigned long long)i);
		sp = memchr(s.ptr, ' ', (size_t)s.len);
		nl = sp ? (size_t)(sp - s.ptr) : 0;
		if (!sp || nl == 0 || nl + 1 == s.len || memchr(sp + 1, ' ', (size_t)s.len - nl - 1))
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: tokenizer.ggml.merges[%llu] \"%.*s\": not two pieces "
					 "separated by one space", gguf_name(g), (unsigned long long)i,
					 (int)(s.len > 64 ? 64 : s.len), s.ptr);
		l = find_piece(b, s.ptr, nl);
		r = find_piece(b, sp + 1, (size_t)s.len - nl - 1);
		id = find_piece2(b, s.ptr, nl, sp + 1, (size_t)s.len - nl - 1);
		if (l < 0 || r < 0 || id < 0)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: tokenizer.ggml.merges[%llu] \"%.*s\": %s not in the vocabulary",
					 gguf_name(g), (unsigned long long)i, (int)(s.len > 64 ? 64 : s.len), s.ptr,
					 l < 0 ? "left piece" : r < 0 ? "right piece" : "merged piece");
		uint64_t pair = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
		uint64_t k = mix64(pair) & b->merge_mask;
		while (b->merge[k].pair != MERGE_EMPTY && b->merge[k].pair != pair)
			k = (k + 1) & b->merge_mask;
		if (b->merge[k].pair == MERGE_EMPTY)
			b->merge[k] = (struct bpe_merge){pair, (int32_t)i, id};
	}
	return 0;
}

/* Decoded text of id into out (NULL: length only): "" for control
 * tokens, the raw piece for user-defined ones and for pieces with a
 * character outside the byte alphabet (Hugging Face's ByteLevel decoder
 * keeps those as they are), else the bytes the characters stand for. */
static size_t decode_piece(const struct tok_bpe *b, int32_t id, char *out)
{
	const char *p = b->pieces + b->piece_at[id];
	size_t n = piece_len(b, id), k = 0;

	if (b->type[id] == TYPE_CONTROL)
		return 0;
	if (b->type[id] != TYPE_USER_DEFINED) {
		for (size_t i = 0; i < n; k++) {
			uint32_t cp;
			int valid, len = utf8_decode(p + i, n - i, &cp, &valid), byte;
			if (!valid || (byte = char_byte(cp)) < 0)
				goto raw;
			if (out)
				out[k] = (char)byte;
			i += (size_t)len;
		}
		return k;
	}
raw:
	if (out)
		memcpy(out, p, n);
	return n;
}

static int build_texts(struct tok_bpe *b, const struct gguf *g, char *err, size_t errlen)
{
	size_t total = 0;

	if (!(b->text_at = malloc(((size_t)b->n_vocab + 1) * sizeof *b->text_at)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_gguf: %s: out of memory", gguf_name(g));
	b->text_at[0] = 0;
	for (int i = 0; i < b->n_vocab; i++) {
		size_t n = decode_piece(b, i, NULL);
		if ((int)n > b->max_text)
			b->max_text = (int)n;
		b->text_at[i + 1] = (total += n);
	}
	if (!(b->texts = malloc(total ? total : 1)))
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_gguf: %s: out of memory", gguf_name(g));
	for (int i = 0; i < b->n_vocab; i++)
		decode_piece(b, i, b->texts + b->text_at[i]);
	return 0;
}

static int open_pre(struct tok_bpe *b, const struct gguf *g, char *err, size_t errlen)
{
	struct gguf_str s;
	char e2[256];
	int rc = gguf_get_str(g, "tokenizer.ggml.pre", &s);

	if (rc == SEKV_ENOTFOUND)
		return sekv_errf(err, errlen, SEKV_EUNSUP,
				 "tok_open_gguf: %s: tokenizer.ggml.pre missing: the pre-tokenizer is unknown",
				 gguf_name(g));
	if (rc)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "tok_open_gguf: %s: tokenizer.ggml.pre: not a string",
				 gguf_name(g));
	if ((rc = tok_pre_open(&b->pre, s.ptr, (size_t)s.len, e2, sizeof e2)))
		return sekv_errf(err, errlen, rc, "tok_open_gguf: %s: tokenizer.ggml.pre: %s", gguf_name(g), e2);
	return 0;
}

int tok_bpe_open(struct tok_bpe **out, const struct gguf *g, char *err, size_t errlen)
{
	struct tok_bpe *b = calloc(1, sizeof *b);
	int rc, unk, pad;

	*out = NULL;
	if (!b)
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_gguf: %s: out of memory", gguf_name(g));
	if ((rc = read_tokens(b, g, err, errlen)) ||
	    (rc = tok_read_special_id(g, "tokenizer.ggml.bos_token_id", (size_t)b->n_vocab, &b->bos, err, errlen)) ||
	    (rc = tok_read_special_id(g, "tokenizer.ggml.eos_token_id", (size_t)b->n_vocab, &b->eos, err, errlen)) ||
	    (rc = tok_read_special_id(g, "tokenizer.ggml.unknown_token_id", (size_t)b->n_vocab, &unk, err, errlen)) ||
	    (rc = tok_read_special_id(g, "tokenizer.ggml.padding_token_id", (size_t)b->n_vocab, &pad, err, errlen)) ||
	    (rc = open_pre(b, g, err, errlen)) || (rc = read_merges(b, g, err, errlen)) ||
	    (rc = build_texts(b, g, err, errlen)))
		goto fail;
	for (unsigned c = 0; c < 256; c++) {
		char u[4];
		b->byte_id[c] = find_piece(b, u, (size_t)byte_char_utf8(c, u));
	}
	*out = b;
	return 0;
fail:
	tok_bpe_close(b);
	return rc;
}

void tok_bpe_close(struct tok_bpe *b)
{
	if (!b)
		return;
	tok_pre_close(b->pre);
	free(b->type);
	free(b->pieces);
	free(b->piece_at);
	free(b->texts);
	free(b->text_at);
	free(b->slot);
	free(b->merge);
	free(b);
}

int tok_bpe_add_bos_default(const struct tok_bpe *b)
{
	return tok_pre_add_bos(b->pre);
}

/* ---- encode ----------------------------------------------------------- */

/* One tok_encode call: the output and one word's scratch. */
struct enc {
	const struct tok_bpe *b;
	int32_t *ids;               /* [cap] caller's */
	int cap;
	size_t n;                   /* ids the text needs so far */
	size_t room;                /* bytes of the longest word the scratch holds */
	int32_t *sym, *prev, *next; /* [room] symbols of one word: id (-1 merged away), links */
	uint64_t *heap;             /* [3 * room] rank << 32 | left position, min first */
	size_t n_heap;
	char *mapped;               /* [2 * room + 4] the word in byte characters */
	char *err;
	size_t errlen;
};

static void emit(struct enc *e, int32_t id)
{
	if (e->n < (size_t)e->cap)
		e->ids[e->n] = id;
	e->n++;
}

static int reserve(struct enc *e, size_t n)
{
	size_t room = e->room * 2 > n ? e->room * 2 : n;

	if (n <= e->room)
		return 0;
	if (n > WORD_MAX)
		return sekv_errf(e->err, e->errlen, SEKV_EINVAL,
				 "tok_encode: a word of %zu bytes: longer than %zu", n, WORD_MAX);
	room = room > WORD_MAX ? WORD_MAX : room;
	free(e->sym);
	free(e->heap);
	free(e->mapped);
	e->sym = malloc(room * 3 * sizeof *e->sym);
	e->heap = malloc(room * 3 * sizeof *e->heap);
	e->mapped = malloc(room * 2 + 4);
	e->room = e->sym && e->heap && e->mapped ? room : 0;
	if (!e->room)
		return sekv_errf(e->err, e->errlen, SEKV_ENOMEM, "tok_encode: a word of %zu bytes: out of memory", n);
	e->prev = e->sym + room;
	e->next = e->sym + 2 * room;
	return 0;
}

static void heap_push(struct enc *e, uint64_t v)
{
	size_t i = e->n_heap++;

	while (i > 0 && e->heap[(i - 1) / 2] > v) {
		e->heap[i] = e->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	e->heap[i] = v;
}

static uint64_t heap_pop(struct enc *e)
{
	uint64_t top = e->heap[0], v = e->heap[--e->n_heap];
	size_t i = 0, n = e->n_heap;

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && e->heap[c + 1] < e->heap[c])
			c++;
		if (e->heap[c] >= v)
			break;
		e->heap[i] = e->heap[c];
		i = c;
	}
	if (n)
		e->heap[i] = v;
	return top;
}

/* Queues the pair (l, next of l) when a merge exists for it. */
static void push_pair(struct enc *e, int32_t l, int32_t r)
{
	const struct bpe_merge *m = find_merge(e->b, e->sym[l], e->sym[r]);

	if (m)
		heap_push(e, (uint64_t)(uint32_t)m->rank << 32 | (uint32_t)l);
}

/* Merges sym[0..m) in rank order. A queued pair is stale when its left
 * symbol was merged away, has no right neighbour any more, or forms
 * another pair now (each pair has its own rank). */
static void merge_word(struct enc *e, int32_t m)
{
	int32_t *sym = e->sym, *prev = e->prev, *next = e->next;

	for (int32_t i = 0; i < m; i++) {
		prev[i] = i - 1;
		next[i] = i + 1 < m ? i + 1 : -1;
	}
	e->n_heap = 0;
	for (int32_t i = 0; i + 1 < m; i++)
		push_pair(e, i, i + 1);
	while (e->n_heap) {
		uint64_t top = heap_pop(e);
		int32_t pos = (int32_t)(uint32_t)top, nx = next[pos];
		const struct bpe_merge *mg;

		if (sym[pos] < 0 || nx < 0 || !(mg = find_merge(e->b, sym[pos], sym[nx])) ||
		    (uint64_t)(uint32_t)mg->rank != top >> 32)
			continue;
		sym[pos] = mg->id;
		sym[nx] = -1;
		next[pos] = next[nx];
		if (next[nx] >= 0)
			prev[next[nx]] = pos;
		if (prev[pos] >= 0)
			push_pair(e, prev[pos], pos);
		if (next[pos] >= 0)
			push_pair(e, pos, next[pos]);
	}
}

/* tok_pre_word_fn: the ids of one word. */
static int encode_word(void *ud, const char *w, size_t n)
{
	struct enc *e = ud;
	const struct tok_bpe *b = e->b;
	int32_t m = 0;
	int rc;

	if ((rc = reserve(e, n)))
		return rc;
	if (tok_pre_ignore_merges(b->pre)) {
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			k += (size_t)byte_char_utf8((unsigned char)w[i], e->mapped + k);
		int32_t id = find_piece(b, e->mapped, k);
		if (id >= 0) {
			emit(e, id);
			return 0;
		}
	}
	/* a byte whose character is not a piece is left out, as Hugging Face
	 * tokenizers (no unknown token) and llama.cpp leave it */
	for (size_t i = 0; i < n; i++)
		if ((e->sym[m] = b->byte_id[(unsigned char)w[i]]) >= 0)
			m++;
	if (m == 0)
		return 0;
	merge_word(e, m);
	for (int32_t i = 0; i >= 0; i = e->next[i])
		emit(e, e->sym[i]);
	return 0;
}

int tok_bpe_encode(const struct tok_bpe *b, const char *text, size_t len, int add_bos,
		   int32_t *ids, int cap, char *err, size_t errlen)
{
	struct enc e = {.b = b, .ids = ids, .cap = cap, .err = err, .errlen = errlen};
	char *fixed = NULL;
	size_t n_bad = 0;
	int rc;

	if (add_bos)
		emit(&e, b->bos);
	utf8_repair(text, len, NULL, &n_bad);
	if (n_bad) {
		if (len > SIZE_MAX / 3 || !(fixed = malloc(3 * len)))
			return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_encode: %zu bytes: out of memory", len);
		len = utf8_repair(text, len, fixed, NULL);
		text = fixed;
	}
	rc = tok_pre_split(b->pre, text, len, encode_word, &e, err, errlen);
	free(fixed);
	free(e.sym);
	free(e.heap);
	free(e.mapped);
	if (rc)
		return rc;
	if (e.n > INT_MAX)
		return sekv_errf(err, errlen, SEKV_EINVAL, "tok_encode: %zu bytes: more than INT_MAX tokens", len);
	return (int)e.n;
}

/* ---- the rest of tokenizer.h -------------------------------------------- */

int tok_bpe_n_vocab(const struct tok_bpe *b)
{
	return b->n_vocab;
}

int tok_bpe_bos(const struct tok_bpe *b)
{
	return b->bos;
}

int tok_bpe_eos(const struct tok_bpe *b)
{
	return b->eos;
}

int tok_bpe_piece_id(const struct tok_bpe *b, const char *piece)
{
	return find_piece(b, piece, strlen(piece));
}

int tok_bpe_special_id(const struct tok_bpe *b, const char *piece)
{
	int id = tok_bpe_piece_id(b, piece);

	return id >= 0 && b->type[id] == TYPE_CONTROL ? id : -1;
}

int tok_bpe_is_control(const struct tok_bpe *b, int32_t id)
{
	return id >= 0 && id < b->n_vocab && b->type[id] == TYPE_CONTROL;
}

int tok_bpe_max_text_len(const struct tok_bpe *b)
{
	return b->max_text;
}

int tok_bpe_token_text(const struct tok_bpe *b, int32_t id, char *buf, int cap)
{
	if (id < 0 || id >= b->n_vocab || cap < 0 || (!buf && cap > 0))
		return SEKV_EINVAL;
	size_t n = b->text_at[id + 1] - b->text_at[id];
	if (n > (size_t)cap)
		return SEKV_EINVAL;
	if (n)
		memcpy(buf, b->texts + b->text_at[id], n);
	return (int)n;
}

const char *tok_bpe_piece(const struct tok_bpe *b, int32_t id)
{
	return id >= 0 && id < b->n_vocab ? b->pieces + b->piece_at[id] : NULL;
}

char *tok_bpe_decode_dup(const struct tok_bpe *b, const int32_t *ids, int n)
{
	size_t total = 0;
	char *s, *w;

	if (n < 0 || (!ids && n > 0))
		return NULL;
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= b->n_vocab)
			return NULL;
		total += b->text_at[ids[i] + 1] - b->text_at[ids[i]];
	}
	if (!(s = malloc(total + 1)))
		return NULL;
	w = s;
	for (int i = 0; i < n; i++) {
		size_t k = b->text_at[ids[i] + 1] - b->text_at[ids[i]];
		memcpy(w, b->texts + b->text_at[ids[i]], k);
		w += k;
	}
	*w = '\0';
	return s;
}
