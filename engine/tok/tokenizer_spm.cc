/* tokenizer_spm.cc - the SentencePiece shim behind tokenizer.h (the only C++
 * in the project; every entry point, declared in spm.h, is extern "C" and
 * catches every exception).
 *
 * A GGUF vocabulary becomes a SentencePiece ModelProto serialised by hand in
 * protobuf wire format (field numbers checked against sentencepiece 0.1.97
 * src/sentencepiece_model.proto) and loaded with LoadFromSerializedProto.
 * Encoding reproduces llama.cpp with parse_special = false: user-defined
 * pieces are carved out of the raw text first, control pieces never match.
 * Invariant: after open, kind[] and byte[] describe every id, so decoding
 * never allocates per token. GGUF parsing lives in gguf.c, the choice
 * between this and byte-level BPE (bpe.c) in tok.c.
 */
#include <sentencepiece_processor.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
#include "engine/base/err.h"
#include "engine/tok/tok_int.h"
#include "engine/gguf/gguf.h"
#include "engine/tok/spm.h"
}
#include "engine/base/file.h"
#include "engine/base/utf8.h"

namespace {

/* SentencePiece piece types (ModelProto.SentencePiece.Type); GGUF token
 * types 1..6 use the same numbers. */
enum sp_type {
	SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER_DEFINED = 4,
	SP_UNUSED = 5, SP_BYTE = 6,
};

/* What one id turns into when decoded. */
enum tok_kind : unsigned char {
	KIND_TEXT,     /* normal, user-defined, unused: piece with U+2581 -> ' ' */
	KIND_CONTROL,  /* "" */
	KIND_UNKNOWN,  /* SentencePiece's unk surface */
	KIND_BYTE,     /* the byte of <0xNN> */
};

const char SPACE_MARK[] = "\xe2\x96\x81";     /* U+2581, 3 bytes */
const char UNK_SURFACE[] = " \xe2\x81\x87 ";  /* TrainerSpec.unk_surface default */
const size_t MODEL_FILE_MAX = (size_t)1 << 30; /* bytes of a tokenizer.model */

/* Texts llama.cpp (src/llama-vocab.cpp, end-of-generation detection) turns
 * into control tokens whatever their GGUF type, so that its parse_special
 * = false tokenization never matches them in text. Applied to user-defined
 * pieces only: Gemma 3 ships "</s>" as user-defined. */
const char *const EOG_TEXTS[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
	"<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
	"<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
	"<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
	"<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
	"[e~[",
};

} /* namespace */

struct tok_spm {
	sentencepiece::SentencePieceProcessor sp;
	int n_vocab;
	int bos, eos;                 /* ids or -1 */
	bool dummy_prefix;            /* the normalizer adds a leading U+2581 */
	std::vector<unsigned char> kind;  /* [n_vocab] enum tok_kind */
	std::vector<unsigned char> byte;  /* [n_vocab] value of byte pieces */
	int max_text;                 /* longest tok_token_text, bytes */
	/* GGUF user-defined pieces (text, id), longest first: tok_encode
	 * carves them out of the raw text before SentencePiece sees it. */
	std::vector<std::pair<std::string, int>> user;
};

/* ---- protobuf wire format -------------------------------------------- */

namespace {

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

void pb_varint(std::string &b, uint64_t v)
{
	while (v >= 0x80) {
		b.push_back((char)(v | 0x80));
		v >>= 7;
	}
	b.push_back((char)v);
}

void pb_tag(std::string &b, unsigned field, unsigned wire)
{
	pb_varint(b, (uint64_t)field << 3 | wire);
}

/* int32 and enum fields: negative values are sign-extended to 10 bytes. */
void pb_int(std::string &b, unsigned field, int64_t v)
{
	pb_tag(b, field, WIRE_VARINT);
	pb_varint(b, (uint64_t)v);
}

void pb_bytes(std::string &b, unsigned field, const char *p, size_t n)
{
	pb_tag(b, field, WIRE_LEN);
	pb_varint(b, n);
	b.append(p, n);
}

void pb_float(std::string &b, unsigned field, float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	pb_tag(b, field, WIRE_I32);
	for (int i = 0; i < 4; i++)
		b.push_back((char)(u >> (8 * i)));
}

/* Reads a varint at *p (< end). Returns false when truncated or too long. */
bool pb_read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64 && *p < end; shift += 7) {
		unsigned char c = *(*p)++;
		*v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return true;
	}
	return false;
}

/* Walks the fields of one message in [p, end). For each field calls
 * fn(field, wire, value, payload, payload_len); returns false on malformed
 * wire data. */
template <typename F>
bool pb_walk(const unsigned char *p, const unsigned char *end, F fn)
{
	while (p < end) {
		uint64_t key, v = 0;
		const unsigned char *payload = p;
		uint64_t n = 0;

		if (!pb_read_varint(&p, end, &key))
			return false;
		switch (key & 7) {
		case WIRE_VARINT:
			if (!pb_read_varint(&p, end, &v))
				return false;
			break;
		case WIRE_I64: n = 8; break;
		case WIRE_I32: n = 4; break;
		case WIRE_LEN:
			if (!pb_read_varint(&p, end, &n))
				return false;
			break;
		default:
			return false;
		}
		if (n > (uint64_t)(end - p))
			return false;
		payload = p;
		p += n;
		fn((unsigned)(key >> 3), (unsigned)(key & 7), v, payload, (size_t)n);
	}
	return true;
}

/* NormalizerSpec.add_dummy_prefix (field 3 of field 3 of ModelProto,
 * default true; the last occurrence wins, as protobuf merges). */
bool proto_dummy_prefix(const std::string &proto)
{
	const unsigned char *b = (const unsigned char *)proto.data();
	bool on = true;

	pb_walk(b, b + proto.size(), [&](unsigned f, unsigned w, uint64_t,
					 const unsigned char *q, size_t n) {
		if (f != 3 || w != WIRE_LEN)
			return;
		pb_walk(q, q + n, [&](unsigned f2, unsigned w2, uint64_t v,
				      const unsigned char *, size_t) {
			if (f2 == 3 && w2 == WIRE_VARINT)
				on = v != 0;
		});
	});
	return on;
}

/* ---- vocabulary -> ModelProto ------------------------------------------ */

struct vocab {
	std::vector<struct gguf_str> piece;  /* [n] inside the GGUF mapping */
	std::vector<float> score;            /* [n] */
	std::vector<unsigned char> type;     /* [n] enum sp_type */
	int unk = -1, bos = -1, eos = -1, pad = -1;  /* ids or -1 */
	bool dummy_prefix = true;
	bool has_bytes = false;
};

void put_special(std::string &ts, const vocab &v, int id, unsigned id_field,
		 unsigned piece_field)
{
	pb_int(ts, id_field, id);
	if (id >= 0)
		pb_bytes(ts, piece_field, v.piece[id].ptr, (size_t)v.piece[id].len);
}

/* ModelProto: pieces = 1 {piece = 1, score = 2, type = 3}, trainer_spec = 2
 * {model_type = 3 (BPE = 2), vocab_size = 4, byte_fallback = 35, unk_id = 40,
 * bos_id = 41, eos_id = 42, pad_id = 43, unk_piece = 45, bos_piece = 46,
 * eos_piece = 47, pad_piece = 48}, normalizer_spec = 3 {name = 1,
 * add_dummy_prefix = 3, remove_extra_whitespaces = 4, escape_whitespaces = 5}. */
void serialise(std::string &out, const vocab &v)
{
	std::string msg, ts, ns;
	size_t n = v.piece.size();

	for (size_t i = 0; i < n; i++) {
		msg.clear();
		pb_bytes(msg, 1, v.piece[i].ptr, (size_t)v.piece[i].len);
		pb_float(msg, 2, v.score[i]);
		pb_int(msg, 3, v.type[i]);
		pb_bytes(out, 1, msg.data(), msg.size());
	}

	pb_int(ts, 3, 2);
	pb_int(ts, 4, (int64_t)n);
	pb_int(ts, 35, v.has_bytes);
	put_special(ts, v, v.unk, 40, 45);
	put_special(ts, v, v.bos, 41, 46);
	put_special(ts, v, v.eos, 42, 47);
	put_special(ts, v, v.pad, 43, 48);
	pb_bytes(out, 2, ts.data(), ts.size());

	pb_bytes(ns, 1, "identity", 8);
	pb_int(ns, 3, v.dummy_prefix);
	pb_int(ns, 4, 0);
	pb_int(ns, 5, 1);
	pb_bytes(out, 3, ns.data(), ns.size());
}

const char *gguf_name(const struct gguf *g)
{
	return g->path ? g->path : "gguf";
}

/* The three parallel arrays; checks their types and lengths. */
int read_arrays(const struct gguf *g, vocab &v, char *err, size_t errlen)
{
	const char *name = gguf_name(g);
	const struct gguf_kv *kt = gguf_find_kv(g, "tokenizer.ggml.tokens");
	const struct gguf_kv *ks = gguf_find_kv(g, "tokenizer.ggml.scores");
	const struct gguf_kv *ky = gguf_find_kv(g, "tokenizer.ggml.token_type");

	if (!kt || !ks || !ky)
		return sekv_errf(err, errlen, SEKV_ENOTFOUND,
				 "tok_open_gguf: %s: no vocabulary (tokenizer.ggml.%s missing)",
				 name, !kt ? "tokens" : !ks ? "scores" : "token_type");
	if (kt->type != GGUF_ARRAY || kt->arr_type != GGUF_STRING ||
	    ks->type != GGUF_ARRAY || ky->type != GGUF_ARRAY)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: tokenizer.ggml.tokens/scores/token_type: not arrays of the right type",
				 name);
	if (kt->arr_n == 0 || kt->arr_n > INT_MAX / 2)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: tokenizer.ggml.tokens: %llu tokens",
				 name, (unsigned long long)kt->arr_n);
	if (ks->arr_n != kt->arr_n || ky->arr_n != kt->arr_n)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: vocabulary arrays disagree: %llu tokens, %llu scores, %llu types",
				 name, (unsigned long long)kt->arr_n,
				 (unsigned long long)ks->arr_n, (unsigned long long)ky->arr_n);

	size_t n = (size_t)kt->arr_n;
	v.piece.resize(n);
	v.score.resize(n);
	v.type.resize(n);
	for (size_t i = 0; i < n; i++) {
		double s, y;
		if (gguf_arr_str(g, kt, i, &v.piece[i]) || gguf_arr_num(ks, i, &s) ||
		    gguf_arr_num(ky, i, &y))
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: token %zu: unreadable token, score or type",
					 name, i);
		if (v.piece[i].len == 0)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: token %zu: empty piece", name, i);
		if (!std::isfinite(s) || std::fabs(s) > 3.0e38)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: token %zu: score %g not a finite float",
					 name, i, s);
		if (!(y >= SP_NORMAL && y <= SP_BYTE) || y != std::floor(y))
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: token %zu: type %g not in 1..6",
					 name, i, y);
		v.score[i] = (float)s;
		v.type[i] = (unsigned char)y;
		v.has_bytes = v.has_bytes || y == SP_BYTE;
	}
	return 0;
}

bool piece_is(const struct gguf_str &p, const char *s)
{
	return p.len == strlen(s) && !memcmp(p.ptr, s, (size_t)p.len);
}

/* SentencePiece needs exactly one UNKNOWN piece; GGUF files often type it
 * CONTROL (Gemma 3) and name it through unknown_token_id. */
int fix_types(const struct gguf *g, vocab &v, char *err, size_t errlen)
{
	const char *name = gguf_name(g);
	size_t n = v.piece.size();

	for (size_t i = 0; i < n; i++) {
		if (v.type[i] != SP_UNKNOWN || (int)i == v.unk)
			continue;
		if (v.unk >= 0)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: token %zu and %d both typed unknown",
					 name, i, v.unk);
		v.unk = (int)i;
	}
	if (v.unk < 0)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: no unknown token (no tokenizer.ggml.unknown_token_id, no token of type 2)",
				 name);
	if (v.type[v.unk] != SP_UNKNOWN && v.type[v.unk] != SP_CONTROL &&
	    v.type[v.unk] != SP_UNUSED)
		return sekv_errf(err, errlen, SEKV_EFORMAT,
				 "tok_open_gguf: %s: unknown token %d has type %u (normal, user-defined or byte)",
				 name, v.unk, (unsigned)v.type[v.unk]);
	v.type[v.unk] = SP_UNKNOWN;

	for (size_t i = 0; i < n; i++) {
		if (v.type[i] != SP_USER_DEFINED)
			continue;
		for (const char *t : EOG_TEXTS)
			if (piece_is(v.piece[i], t))
				v.type[i] = SP_CONTROL;
	}
	return 0;
}

/* llama.cpp matches user-defined pieces in the raw text, before spaces
 * are escaped (its converter even stores Gemma's "\u2581\u2581" pieces as
 * "  "), longest piece first, each left to right; SentencePiece would
 * match them after escaping and never see a piece holding a space. */
void user_pieces(struct tok_spm *t, const vocab &v)
{
	for (size_t i = 0; i < v.piece.size(); i++)
		if (v.type[i] == SP_USER_DEFINED)
			t->user.emplace_back(std::string(v.piece[i].ptr, (size_t)v.piece[i].len),
					     (int)i);
	std::stable_sort(t->user.begin(), t->user.end(),
			 [](const std::pair<std::string, int> &a,
			    const std::pair<std::string, int> &b) {
				 return a.first.size() > b.first.size();
			 });
}

/* A stretch of the input: raw text (id < 0) or one matched piece. */
struct frag {
	size_t off, len;
	int id;
};

/* Splits text into raw stretches and user-defined pieces as llama.cpp's
 * tokenizer_st_partition does with parse_special = false. */
void partition(const struct tok_spm *t, const char *text, size_t len, std::vector<frag> &out)
{
	std::vector<frag> next;

	out.assign(1, frag{0, len, -1});
	for (const auto &u : t->user) {
		const std::string &p = u.first;
		next.clear();
		for (const frag &f : out) {
			size_t pos = f.off, end = f.off + f.len;
			const char *hit;

			if (f.id >= 0 || f.len < p.size()) {
				next.push_back(f);
				continue;
			}
			while (end - pos >= p.size() &&
			       (hit = (const char *)memmem(text + pos, end - pos, p.data(), p.size()))) {
				size_t h = (size_t)(hit - text);
				if (h > pos)
					next.push_back(frag{pos, h - pos, -1});
				next.push_back(frag{h, p.size(), u.second});
				pos = h + p.size();
			}
			if (pos < end)
				next.push_back(frag{pos, end - pos, -1});
		}
		out.swap(next);
	}
}

/* Appends the ids of text[0..len) to out. SentencePiece encodes each raw
 * stretch separately; like llama.cpp, each gets the dummy prefix when the
 * model adds one. */
sentencepiece::util::Status encode_into(const struct tok_spm *t, const char *text, size_t len,
					std::vector<int> &out)
{
	std::vector<frag> frags;
	std::vector<int> part;

	if (t->user.empty())
		return t->sp.Encode(std::string_view(text, len), &out);
	partition(t, text, len, frags);
	for (const frag &f : frags) {
		if (f.id >= 0) {
			out.push_back(f.id);
			continue;
		}
		sentencepiece::util::Status st =
			t->sp.Encode(std::string_view(text + f.off, f.len), &part);
		if (!st.ok())
			return st;
		out.insert(out.end(), part.begin(), part.end());
	}
	return sentencepiece::util::Status();
}

/* Loads a serialised ModelProto into t and fills the per-id tables. */
int tok_load(struct tok_spm *t, const std::string &proto, const char *fn,
	     const char *name, char *err, size_t errlen)
{
	sentencepiece::util::Status st = t->sp.LoadFromSerializedProto(proto);

	if (!st.ok())
		return sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: sentencepiece: %s",
				 fn, name, st.ToString().c_str());
	t->n_vocab = t->sp.GetPieceSize();
	if (t->n_vocab <= 0)
		return sekv_errf(err, errlen, SEKV_EFORMAT, "%s: %s: empty vocabulary",
				 fn, name);
	t->kind.assign((size_t)t->n_vocab, KIND_TEXT);
	t->byte.assign((size_t)t->n_vocab, 0);
	t->max_text = (int)sizeof UNK_SURFACE - 1;
	for (int id = 0; id < t->n_vocab; id++) {
		const std::string &p = t->sp.IdToPiece(id);
		unsigned b;
		char tail;

		if (t->sp.IsControl(id)) {
			t->kind[id] = KIND_CONTROL;
		} else if (t->sp.IsUnknown(id)) {
			t->kind[id] = KIND_UNKNOWN;
		} else if (t->sp.IsByte(id)) {
			/* sentencepiece has checked the <0xNN> form at load */
			if (sscanf(p.c_str(), "<0x%2X%c", &b, &tail) != 2 || tail != '>' || b > 255)
				return sekv_errf(err, errlen, SEKV_EFORMAT,
						 "%s: %s: byte piece %d: bad text", fn, name, id);
			t->kind[id] = KIND_BYTE;
			t->byte[id] = (unsigned char)b;
		} else if (p.size() > INT_MAX / 2) {
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "%s: %s: piece %d too long", fn, name, id);
		} else if ((int)p.size() > t->max_text) {
			t->max_text = (int)p.size();
		}
	}
	t->dummy_prefix = proto_dummy_prefix(proto);
	return 0;
}

/* Length of id's decoded text; writes it to buf when buf is not NULL (the
 * caller has checked room). Never allocates. */
int token_text(const struct tok_spm *t, int32_t id, char *buf)
{
	const std::string &p = t->sp.IdToPiece(id);
	int n = 0;

	switch (t->kind[id]) {
	case KIND_CONTROL:
		return 0;
	case KIND_UNKNOWN:
		if (buf)
			memcpy(buf, UNK_SURFACE, sizeof UNK_SURFACE - 1);
		return (int)sizeof UNK_SURFACE - 1;
	case KIND_BYTE:
		if (buf)
			buf[0] = (char)t->byte[id];
		return 1;
	}
	for (size_t i = 0; i < p.size(); n++) {
		if (!p.compare(i, 3, SPACE_MARK)) {
			if (buf)
				buf[n] = ' ';
			i += 3;
		} else {
			if (buf)
				buf[n] = p[i];
			i++;
		}
	}
	return n;
}

} /* namespace */

/* ---- public interface ------------------------------------------------- */

extern "C" int tok_spm_open_gguf(struct tok_spm **out, const struct gguf *g, char *err,
			     size_t errlen)
{
	struct tok_spm *t = NULL;
	int rc;

	*out = NULL;
	try {
		const char *name = gguf_name(g);
		vocab v;
		std::string proto;
		int sp_flag;

		if ((rc = read_arrays(g, v, err, errlen)))
			return rc;
		size_t n = v.piece.size();
		if ((rc = tok_read_special_id(g, "tokenizer.ggml.unknown_token_id", n, &v.unk, err, errlen)) ||
		    (rc = tok_read_special_id(g, "tokenizer.ggml.bos_token_id", n, &v.bos, err, errlen)) ||
		    (rc = tok_read_special_id(g, "tokenizer.ggml.eos_token_id", n, &v.eos, err, errlen)) ||
		    (rc = tok_read_special_id(g, "tokenizer.ggml.padding_token_id", n, &v.pad, err, errlen)))
			return rc;
		rc = gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &sp_flag);
		if (rc == SEKV_ENOTFOUND)
			sp_flag = 1;
		else if (rc)
			return sekv_errf(err, errlen, SEKV_EFORMAT,
					 "tok_open_gguf: %s: tokenizer.ggml.add_space_prefix: not a bool", name);
		v.dummy_prefix = sp_flag != 0;
		if ((rc = fix_types(g, v, err, errlen)))
			return rc;
		serialise(proto, v);

		t = new struct tok_spm();
		if ((rc = tok_load(t, proto, "tok_open_gguf", name, err, errlen)))
			goto fail;
		t->bos = v.bos;
		t->eos = v.eos;
		user_pieces(t, v);
		*out = t;
		return 0;
	} catch (const std::bad_alloc &) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_gguf: %s: out of memory",
			       gguf_name(g));
	} catch (...) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "tok_open_gguf: %s: sentencepiece failed",
			       gguf_name(g));
	}
fail:
	delete t;
	return rc;
}

extern "C" int tok_spm_open_file(struct tok_spm **out, const char *path, char *err, size_t errlen)
{
	struct tok_spm *t = NULL;
	FILE *f = NULL;
	int rc;

	*out = NULL;
	try {
		std::string proto;
		char buf[65536];
		size_t got;

		int fd;
		if ((rc = file_open_regular(path, "tok_open_file", &fd, NULL, err, errlen)))
			return rc;
		if (!(f = fdopen(fd, "rb"))) {
			rc = sekv_errf(err, errlen, SEKV_EIO, "tok_open_file: %s: %s", path, strerror(errno));
			close(fd);
			return rc;
		}
		while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
			if (proto.size() + got > MODEL_FILE_MAX) {
				rc = sekv_errf(err, errlen, SEKV_EFORMAT,
					       "tok_open_file: %s: larger than %zu bytes",
					       path, MODEL_FILE_MAX);
				goto fail;
			}
			proto.append(buf, got);
		}
		if (ferror(f)) {
			rc = sekv_errf(err, errlen, SEKV_EIO, "tok_open_file: %s: read: %s",
				       path, strerror(errno));
			goto fail;
		}
		fclose(f);
		f = NULL;

		t = new struct tok_spm();
		if ((rc = tok_load(t, proto, "tok_open_file", path, err, errlen)))
			goto fail;
		t->bos = t->sp.bos_id();
		t->eos = t->sp.eos_id();
		*out = t;
		return 0;
	} catch (const std::bad_alloc &) {
		rc = sekv_errf(err, errlen, SEKV_ENOMEM, "tok_open_file: %s: out of memory", path);
	} catch (...) {
		rc = sekv_errf(err, errlen, SEKV_EFORMAT, "tok_open_file: %s: sentencepiece failed",
			       path);
	}
fail:
	if (f)
		fclose(f);
	delete t;
	return rc;
}

extern "C" void tok_spm_close(struct tok_spm *t)
{
	delete t;
}

extern "C" int tok_spm_n_vocab(const struct tok_spm *t)
{
	return t->n_vocab;
}

extern "C" int tok_spm_bos(const struct tok_spm *t)
{
	return t->bos;
}

extern "C" int tok_spm_eos(const struct tok_spm *t)
{
	return t->eos;
}

extern "C" int tok_spm_max_text_len(const struct tok_spm *t)
{
	return t->max_text;
}

extern "C" int tok_spm_piece_id(const struct tok_spm *t, const char *piece)
{
	try {
		/* PieceToId answers unk for an absent piece: confirm the text. */
		int id = t->sp.PieceToId(piece);
		if (id < 0 || id >= t->n_vocab || t->sp.IdToPiece(id) != piece)
			return -1;
		return id;
	} catch (...) {
		return -1;
	}
}

extern "C" int tok_spm_special_id(const struct tok_spm *t, const char *piece)
{
	int id = tok_spm_piece_id(t, piece);

	return id >= 0 && t->kind[id] == KIND_CONTROL ? id : -1;
}

extern "C" int tok_spm_is_control(const struct tok_spm *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && t->kind[id] == KIND_CONTROL;
}

extern "C" int tok_spm_encode(const struct tok_spm *t, const char *text, size_t len, int add_bos,
			  int32_t *ids, int cap, char *err, size_t errlen)
{
	try {
		std::vector<int> v;
		sentencepiece::util::Status st = encode_into(t, len ? text : "", len, v);
		if (!st.ok())
			return sekv_errf(err, errlen, SEKV_EINVAL, "tok_encode: %zu bytes: sentencepiece: %s",
					 len, st.ToString().c_str());
		size_t nb = add_bos ? 1 : 0;
		if (v.size() > (size_t)INT_MAX - nb)
			return sekv_errf(err, errlen, SEKV_EINVAL,
					 "tok_encode: %zu bytes: more than INT_MAX tokens", len);
		int total = (int)(v.size() + nb);
		int k = 0;
		if (nb && k < cap)
			ids[k++] = t->bos;
		for (size_t i = 0; i < v.size() && k < cap; i++)
			ids[k++] = v[i];
		return total;
	} catch (const std::bad_alloc &) {
		return sekv_errf(err, errlen, SEKV_ENOMEM, "tok_encode: %zu bytes: out of memory", len);
	} catch (...) {
		return sekv_errf(err, errlen, SEKV_EINVAL, "tok_encode: %zu bytes: sentencepiece failed",
				 len);
	}
}

extern "C" int tok_spm_token_text(const struct tok_spm *t, int32_t id, char *buf, int cap)
{
	if (id < 0 || id >= t->n_vocab || cap < 0 || (!buf && cap > 0))
		return SEKV_EINVAL;
	int n = token_text(t, id, NULL);
	if (n > cap)
		return SEKV_EINVAL;
	return token_text(t, id, buf);
}

extern "C" const char *tok_spm_piece(const struct tok_spm *t, int32_t id)
{
	if (id < 0 || id >= t->n_vocab)
		return NULL;
	return t->sp.IdToPiece(id).c_str();
}

extern "C" char *tok_spm_decode_dup(const struct tok_spm *t, const int32_t *ids, int n)
{
	size_t total = 0;
	char *s, *w;
	bool at_start = true;

	if (n < 0 || (!ids && n > 0))
		return NULL;
	for (int i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= t->n_vocab)
			return NULL;
		total += (size_t)token_text(t, ids[i], NULL);
	}
	s = (char *)malloc(total + 1);
	if (!s)
		return NULL;
	w = s;
	for (int i = 0; i < n; i++) {
		int k = token_text(t, ids[i], w);
		/* Drop the one space the normalizer added before the first word. */
		if (at_start && k > 0 && t->dummy_prefix && t->kind[ids[i]] == KIND_TEXT &&
		    !t->sp.IdToPiece(ids[i]).compare(0, 3, SPACE_MARK)) {
			memmove(w, w + 1, (size_t)k - 1);
			k--;
			at_start = false;
		}
		if (k > 0)
			at_start = false;
		w += k;
	}
	*w = '\0';
	return s;
}
