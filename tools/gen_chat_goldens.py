#!/usr/bin/env python3
"""gen_chat_goldens.py - chat-template goldens from an independent renderer.

Renders one conversation per template family with Jinja2 as Hugging Face's
apply_chat_template sets it up (sandboxed, trim_blocks and lstrip_blocks,
raise_exception, add_generation_prompt), through the model's own
tokenizer.chat_template where a local GGUF has one and through the short
templates in tests/data/chat/*.jinja otherwise (ours, see the README there).
llama.cpp (llama-cpp-python, vocab only) then tokenizes each rendered string
with special-token parsing on, as it tokenizes a prompt. Not run by CI; the
outputs are committed under tests/data/chat/:

  <case>.json         template, conversation pieces, rendered strings and
                      llama.cpp's ids, per case (tests/test_chat.c)
  <name>-vocab.gguf   vocabulary-only GGUFs the cases tokenize with

usage: tools/gen_chat_goldens.py [--smollm2 GGUF] [--qwen GGUF] [--gemma GGUF]
"""
import argparse
import json
import os
import sys

import gguf
import jinja2
import jinja2.sandbox
from gguf import GGUFReader, GGUFWriter

OUT = "tests/data/chat"
SPM_VOCAB = "tests/data/tokenizer/ggml-vocab-llama-spm.gguf"
GEMMA_MODEL = "assets/models/gemma-3-270m-q4_k_m.gguf"

# The conversation: a system instruction, the document, a question, its
# answer, a second question (contents without surrounding white space,
# which several templates trim).
SYSTEM = "Answer questions about the document from its text. Quote the document where you can."
DOCUMENT = "The bakery on Elm Street opened in 1998.\nIt sells rye bread and closes at noon."
QUESTION1 = "When did the bakery open?"
ANSWER1 = "It opened in 1998."
QUESTION2 = "When does it close?"
JOIN = "\n\n"  # the document and the first question in one turn (alternating templates)

# Special tokens that the small SentencePiece vocabularies add as control
# pieces, per vocabulary.
SPM_CONTROL = {
    "mistral": ["[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"],
    "phi3": ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>"],
}
# Llama 3's control pieces, appended to SmolLM2's byte-level vocabulary.
LLAMA3_CONTROL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                  "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"]


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    return f.contents()


def render(template, messages, bos, eos):
    """The template rendered as transformers' apply_chat_template does."""
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    return env.from_string(template).render(messages=messages, add_generation_prompt=True,
                                            bos_token=bos, eos_token=eos)


def conversations(template, bos, eos):
    """The document conversation (the first question in a turn of its own
    where the template allows two user turns in a row, else after the
    document in its turn) and the prompt conversation (system + one
    question)."""
    sys_m = {"role": "system", "content": SYSTEM}
    tail = [{"role": "assistant", "content": ANSWER1}, {"role": "user", "content": QUESTION2}]
    apart = [sys_m, {"role": "user", "content": DOCUMENT},
             {"role": "user", "content": QUESTION1}] + tail
    joined = [sys_m, {"role": "user", "content": DOCUMENT + JOIN + QUESTION1}] + tail
    try:
        doc = {"alternating": False, "messages": apart, "rendered": render(template, apart, bos, eos)}
    except jinja2.exceptions.TemplateError:
        doc = {"alternating": True, "messages": joined, "rendered": render(template, joined, bos, eos)}
    prompt_m = [sys_m, {"role": "user", "content": QUESTION1}]
    prompt = {"messages": prompt_m, "rendered": render(template, prompt_m, bos, eos)}
    return doc, prompt


def llamacpp_ids(vocab, text):
    """llama.cpp's ids for a rendered prompt (special tokens parsed), or
    None where llama-cpp-python is missing."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=vocab, vocab_only=True, verbose=False)
    return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def live_ids(vocab, template, conv, bos, eos):
    """Byte-level BPE vocabularies: llama.cpp's ids for a conversation as a
    live chat has them. The prompt up to the generation prompt before the
    assistant's answer is one tokenization, the answer and what follows the
    next: the model writes its answer after the generation prompt, so no
    token spans that seam (Llama 3's "\\n\\n" + "It" is [ĊĊ][It] live, while
    the whole rendered string gives [Ċ][Ċ][It]). A BPE fragment gets no
    dummy prefix, so the split is exact; SentencePiece vocabularies keep
    the whole-string ids (llama.cpp would put a dummy space at the split),
    which chat.c's continued runs reproduce."""
    msgs = conv["messages"]
    at = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), None)
    if at is None:
        return llamacpp_ids(vocab, conv["rendered"])
    head = render(template, msgs[:at], bos, eos)
    if not conv["rendered"].startswith(head):
        return llamacpp_ids(vocab, conv["rendered"])
    a = llamacpp_ids(vocab, head)
    b = llamacpp_ids(vocab, conv["rendered"][len(head):])
    return None if a is None or b is None else a + b


def write_vocab(path, model, tokens, types, scores=None, merges=None, bos=None, eos=None,
                unk=None, pad=None, pre=None, space_prefix=None, template=None):
    w = GGUFWriter(path, "llama")
    # hyper-parameters llama.cpp reads even for a vocabulary (no tensors)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(1)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for fn, v in ((w.add_bos_token_id, bos), (w.add_eos_token_id, eos),
                  (w.add_unk_token_id, unk), (w.add_pad_token_id, pad)):
        if v is not None:
            fn(v)
    if space_prefix is not None:
        w.add_add_space_prefix(space_prefix)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def small_spm_vocab(name, template):
    """A small SentencePiece vocabulary: <unk> <s> </s>, the family's
    control pieces, the 256 byte pieces (byte fallback), U+2581, printable
    ASCII and U+2581 + each letter or digit."""
    T = gguf.TokenType
    tokens, types, scores = ["<unk>", "<s>", "</s>"], [T.UNKNOWN, T.CONTROL, T.CONTROL], [0.0] * 3
    for c in SPM_CONTROL[name]:
        tokens.append(c)
        types.append(T.CONTROL)
        scores.append(0.0)
    for b in range(256):
        tokens.append("<0x%02X>" % b)
        types.append(T.BYTE)
        scores.append(0.0)
    chars = [chr(c) for c in range(0x21, 0x7f)]
    pieces = ["\u2581"] + ["\u2581" + c for c in chars if c.isalnum()] + chars
    for i, p in enumerate(pieces):
        tokens.append(p)
        types.append(T.NORMAL)
        scores.append(-1.0 - i / len(pieces))
    path = os.path.join(OUT, name + "-vocab.gguf")
    write_vocab(path, "llama", tokens, types, scores=scores, bos=1, eos=2, unk=0,
                space_prefix=True, template=template)
    return path


def bpe_vocab(src, path, extra_control=(), template=None, bos=None, eos=None):
    """A byte-level BPE vocabulary copied from a model GGUF (tokens, types,
    merges, special ids, pre-tokenizer), with extra control pieces
    appended."""
    r = GGUFReader(src)
    tokens = [str(t) for t in field(r, "tokenizer.ggml.tokens")]
    types = [int(t) for t in field(r, "tokenizer.ggml.token_type")]
    merges = [str(m) for m in field(r, "tokenizer.ggml.merges")]
    ids = {}
    for c in extra_control:
        ids[c] = len(tokens)
        tokens.append(c)
        types.append(gguf.TokenType.CONTROL)
    write_vocab(path, "gpt2", tokens, types, merges=merges,
                bos=ids.get(bos, field(r, "tokenizer.ggml.bos_token_id")),
                eos=ids.get(eos, field(r, "tokenizer.ggml.eos_token_id")),
                unk=field(r, "tokenizer.ggml.unknown_token_id"),
                pad=field(r, "tokenizer.ggml.padding_token_id"),
                pre=field(r, "tokenizer.ggml.pre"),
                template=template if template is not None else field(r, "tokenizer.chat_template"))
    return path


def case(name, variant, template, template_from, vocab, vocab_note):
    r = GGUFReader(vocab)
    toks = field(r, "tokenizer.ggml.tokens")
    bos = str(toks[field(r, "tokenizer.ggml.bos_token_id")])
    eos = str(toks[field(r, "tokenizer.ggml.eos_token_id")])
    doc, prompt = conversations(template, bos, eos)
    bpe = field(r, "tokenizer.ggml.model") == "gpt2"
    for c in (doc, prompt):
        c["ids_llamacpp"] = live_ids(vocab, template, c, bos, eos) if bpe \
            else llamacpp_ids(vocab, c["rendered"])
    out = {
        "case": name, "variant": variant, "template_from": template_from, "template": template,
        "vocab": vocab, "vocab_note": vocab_note,
        "system": SYSTEM, "document": DOCUMENT, "question1": QUESTION1, "answer1": ANSWER1,
        "question2": QUESTION2, "join": JOIN, "document_conversation": doc,
        "prompt_conversation": prompt,
    }
    with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("%-18s %-18s %s" % (name, variant, "alternating" if doc["alternating"] else "apart"))


def read_template(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smollm2", default="/tmp/mdl/smollm2.gguf")
    ap.add_argument("--qwen", default="/tmp/mdl/qwen05.gguf")
    ap.add_argument("--gemma", default=GEMMA_MODEL,
                    help="a Gemma 3 GGUF; its own chat template is used when it has one")
    a = ap.parse_args()
    ours = lambda n: os.path.join(OUT, n + ".jinja")

    for name, src in (("smollm2", a.smollm2), ("qwen2", a.qwen)):
        r = GGUFReader(src)
        tmpl = field(r, "tokenizer.chat_template")
        vocab = bpe_vocab(src, os.path.join(OUT, name + "-vocab.gguf"))
        case(name, "chatml", tmpl, "tokenizer.chat_template of " + os.path.basename(src), vocab,
             "the vocabulary of " + os.path.basename(src))

    llama3_tmpl = read_template(ours("llama3"))
    vocab = bpe_vocab(a.smollm2, os.path.join(OUT, "llama3-vocab.gguf"), LLAMA3_CONTROL,
                      template=llama3_tmpl, bos="<|begin_of_text|>", eos="<|end_of_text|>")
    case("llama3", "llama3", llama3_tmpl, ours("llama3"), vocab,
         "SmolLM2's byte-level vocabulary with Llama 3's control pieces appended")

    g = GGUFReader(a.gemma)
    tmpl = field(g, "tokenizer.chat_template")
    src = "tokenizer.chat_template of " + os.path.basename(a.gemma)
    if not tmpl:
        tmpl, src = read_template(ours("gemma")), ours("gemma") + " (the model has no template)"
    case("gemma", "gemma", tmpl, src, a.gemma, "the vocabulary of the default model")

    for name in ("llama2", "mistral", "mistral-v1"):
        case(name, name, read_template(ours(name)), ours(name), SPM_VOCAB,
             "llama.cpp's Llama SentencePiece vocabulary ([INST] is text)")
    for name in ("mistral-v3", "mistral-v3-tekken", "mistral-v7"):
        vocab = small_spm_vocab("mistral", read_template(ours("mistral-v3")))
        case(name, name, read_template(ours(name)), ours(name), vocab,
             "a small SentencePiece vocabulary with [INST] [/INST] [SYSTEM_PROMPT] "
             "[/SYSTEM_PROMPT] as control pieces")
    vocab = small_spm_vocab("phi3", read_template(ours("phi3")))
    case("phi3", "phi3", read_template(ours("phi3")), ours("phi3"), vocab,
         "a small SentencePiece vocabulary with Phi-3's control pieces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
