#!/usr/bin/env python3
"""gen_bpe_goldens.py - byte-level BPE vocabularies and goldens for tests/test_bpe.c.

Reads two real GGUF models (read-only; not committed) and writes:

  tests/data/bpe/smollm2-vocab.gguf  SmolLM2-135M-Instruct's vocabulary
  tests/data/bpe/qwen2-vocab.gguf    Qwen2.5-Coder-0.5B-Instruct's vocabulary
      vocabulary-only GGUFs (gguf's GGUFWriter, no tensors): tokens, token
      types, merges, BOS/EOS/UNK/padding ids, add_bos_token, pre, model,
      chat template, so the tests run in a plain clone;
  tests/data/bpe/tiny-vocab.gguf
      a made-up vocabulary (the 256 byte characters, digit merges, a token
      no merge reaches) where Llama 3's digit groups and ignore_merges
      change the ids, which they never do on the two real vocabularies;
  tests/golden/bpe.json
      the test strings once, then per configuration the ids that Hugging
      Face `tokenizers` (PyPI) gives, built independently from the same
      vocabulary and merges: models.BPE (ignore_merges as llama.cpp sets
      it for the pre-tokenizer), pre_tokenizer Sequence of Split(regex,
      "isolated") for each of llama.cpp's expressions for that name, then
      ByteLevel(add_prefix_space=False, use_regex=False); decoder
      ByteLevel; no added tokens, so control and user-defined token texts
      are ordinary text. Strings that are not valid UTF-8 are encoded as
      Python's UTF-8 decoder repairs them with one U+FFFD for each byte of
      a malformed sequence (the errors="fffd_per_byte" handler below, the
      rule of SentencePiece and of sekv's utf8_repair); their raw bytes
      are stored as hex.

Configurations: qwen2 and smollm on their own vocabularies; llama-bpe
(Llama 3) on the Qwen2 vocabulary and gpt2 on the SmolLM2 one, for want
of those models' own vocabularies here; llama-bpe and qwen2 on the tiny
vocabulary, with strings of their own. The regular expressions are
llama.cpp's (src/llama-vocab.cpp, llm_tokenizer_bpe), taken as facts.

usage: tools/gen_bpe_goldens.py [--smollm PATH] [--qwen PATH] [--out DIR]
  (defaults /tmp/mdl/smollm2.gguf, /tmp/mdl/qwen05.gguf, the repository)
"""
import argparse
import codecs
import json
import os
import random

import gguf
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

# llama.cpp's expressions per pre-tokenizer name (one Split each, in order).
CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
PRE = {
    "llama-bpe": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "smollm": [r"\p{N}", GPT2_RE],
    "gpt2": [GPT2_RE],
}
IGNORE_MERGES = {"llama-bpe"}

# (configuration name, pre-tokenizer, vocabulary file, own strings or None)
CONFIGS = [
    ("qwen2", "qwen2", "qwen2-vocab.gguf", None),
    ("smollm", "smollm", "smollm2-vocab.gguf", None),
    ("llama_bpe", "llama-bpe", "qwen2-vocab.gguf", None),
    ("gpt2", "gpt2", "smollm2-vocab.gguf", None),
    ("tiny_llama_bpe", "llama-bpe", "tiny-vocab.gguf", "tiny"),
    ("tiny_qwen2", "qwen2", "tiny-vocab.gguf", "tiny"),
]

KEYS_U32 = ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"]
KEYS_BOOL = ["tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"]


def fffd_per_byte(e):
    """Decode error handler: one U+FFFD per byte of the malformed sequence."""
    return ("\ufffd" * (e.end - e.start), e.end)


codecs.register_error("fffd_per_byte", fffd_per_byte)


def field_str(f, i):
    return bytes(f.parts[f.data[i]]).decode("utf-8")


def read_vocab(path):
    """The tokenizer keys of a GGUF model, as Python values."""
    r = gguf.GGUFReader(path)
    fl = r.fields
    v = {
        "arch": field_str(fl["general.architecture"], 0),
        "model": field_str(fl["tokenizer.ggml.model"], 0),
        "pre": field_str(fl["tokenizer.ggml.pre"], 0),
        "tokens": [field_str(fl["tokenizer.ggml.tokens"], i)
                   for i in range(len(fl["tokenizer.ggml.tokens"].data))],
        "types": [int(fl["tokenizer.ggml.token_type"].parts[i][0])
                  for i in fl["tokenizer.ggml.token_type"].data],
        "merges": [field_str(fl["tokenizer.ggml.merges"], i)
                   for i in range(len(fl["tokenizer.ggml.merges"].data))],
        "template": field_str(fl["tokenizer.chat_template"], 0)
        if "tokenizer.chat_template" in fl else None,
    }
    for k in KEYS_U32 + KEYS_BOOL:
        if k in fl:
            v[k] = fl[k].parts[fl[k].data[0]][0].item()
    return v


def byte_chars():
    """GPT-2's bytes_to_unicode: the character of each byte, 0..255."""
    keep = (list(range(0x21, 0x7f)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100)))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(0x100 + n)
            n += 1
    return [out[b] for b in range(256)]


def tiny_vocab():
    """Byte characters, digit groups merged up to three, "ab" and " hello"
    that no merge makes, a control and a user-defined token."""
    tokens = byte_chars()
    merges = ["1 2", "12 3", "4 5", "45 6", "7 8", "78 9", "9 0", "1 1", "11 1",
              "h e", "he l", "hel l", "hell o", "' s", "\u0120 w"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    tokens += ["ab", "\u0120hello", "<|ctl|>", "<u>"]
    types = [1] * (len(tokens) - 2) + [3, 4]
    return {"arch": "llama", "model": "gpt2", "pre": "llama-bpe", "tokens": tokens,
            "types": types, "merges": merges, "template": None,
            "tokenizer.ggml.bos_token_id": len(tokens) - 2,
            "tokenizer.ggml.eos_token_id": len(tokens) - 2}


def tiny_texts():
    out = []
    for s in ["ab", "xab", "ab ab", "abab", " hello", "hello", " hellohello", "hello world",
              "12345", "1234567890", "111111", "123 456", "7890789", "1 12 123 1234",
              "he's", "<|ctl|>", "<u>", "a1b22c333d4444", "", " w", "  w", "9" * 12,
              "45.6", "x7 89", "'s's"]:
        out.append(("tiny", s.encode("utf-8")))
    for n in range(1, 13):
        out.append(("tiny-digits-%d" % n, "".join(str(1 + (i % 9)) for i in range(n)).encode()))
    return out


def write_vocab(v, path):
    w = gguf.GGUFWriter(path, v["arch"])
    w.add_tokenizer_model(v["model"])
    w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    w.add_token_types(v["types"])
    w.add_token_merges(v["merges"])
    setters = {
        "tokenizer.ggml.bos_token_id": w.add_bos_token_id,
        "tokenizer.ggml.eos_token_id": w.add_eos_token_id,
        "tokenizer.ggml.unknown_token_id": w.add_unk_token_id,
        "tokenizer.ggml.padding_token_id": w.add_pad_token_id,
        "tokenizer.ggml.add_bos_token": w.add_add_bos_token,
        "tokenizer.ggml.add_space_prefix": w.add_add_space_prefix,
    }
    for k, fn in setters.items():
        if k in v:
            fn(v[k])
    if v["template"] is not None:
        w.add_chat_template(v["template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_tokenizer(v, pre):
    vocab = {t: i for i, t in enumerate(v["tokens"])}
    merges = [tuple(m.split(" ")) for m in v["merges"]]
    bpe = models.BPE(vocab=vocab, merges=merges, ignore_merges=pre in IGNORE_MERGES)
    tk = Tokenizer(bpe)
    steps = [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in PRE[pre]]
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tk.decoder = decoders.ByteLevel()
    return tk


# ---- the strings ---------------------------------------------------------

def texts():
    """(name, raw bytes) pairs; every category of the brief, then random mixes."""
    out = []

    def add(name, s):
        out.append((name, s if isinstance(s, bytes) else s.encode("utf-8")))

    add("empty", "")
    for ws, label in [(" ", "sp"), ("\t", "tab"), ("\n", "nl"), ("\r\n", "crlf"), ("\r", "cr")]:
        for n in (1, 2, 3, 4, 7, 16):
            add(f"ws-{label}-{n}", ws * n)
    for s in ["a  b", "a   b", "a \t b", "a\t\tb", "  leading", "trailing  ", "  both  ",
              "a\n\n\nb", "x\r\ny", "x\r\n\r\ny", "line\n  indented\n\tTabbed\n", " \n \n ",
              "\n ", " \n", "\t\n", "\n\t", "a \n b", "a\r\n  b", "end of line  \r\n",
              "\u00a0nbsp\u00a0", "ideographic\u3000space", "nel\u0085next", "ls\u2028ps\u2029",
              "thin\u2009space", "zwsp\u200bword", "\v\f vertical", "en\u2002em\u2003",
              "mongolian\u180evowel \u180e x", "x \u180ey \u180e\u1820\u1821", "\x1c\x1d\x1e\x1f info separators",
              "   \n\n   \t\t  x", "x" + " " * 10 + "y", "a\u202fb\u205fc", "ogham\u1680mark"]:
        add("ws-mix", s)
    code = [
        "def f(x):\n    return x ** 2  # square\n",
        "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
        "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
        "{\"key\": [1, 2.5, -3e-4, true, null], \"nested\": {\"a\": \"b\"}}",
        "<div class=\"box\"><a href=\"https://example.org/?q=1&r=2\">link</a></div>",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "$ ls -la | grep '.c$' && echo \"done\" >> /tmp/log 2>&1",
        "    if x == None:\n        raise ValueError('bad')\n",
        "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
        "x = [i**2 for i in range(10) if i % 2 == 0]",
        "// comment\n/* block */\n/** doc */",
        "a->b; c::d; e=>f; g!=h; i<=j; k>>=2; l||m; n&&o;",
        "    \n    \n        indented_block()\n",
        "\t\tdeep\t\ttabs\t",
        "const re = /^[a-z]+\\d*$/gi;",
        "std::vector<std::pair<int, std::string>> v{{1, \"one\"}};",
        "@decorator\nclass Foo(Bar):\n    pass\n",
        "```python\nprint('hi')\n```",
        "key: value\nlist:\n  - item1\n  - item2\n",
    ]
    for s in code:
        add("code", s)
    for n in range(1, 13):
        add(f"digits-{n}", "".join(str((i * 7 + 3) % 10) for i in range(n)))
    for s in ["3.14159", "0.5", "-12.75", "1,234,567.89", "1e-10", "6.022e23", "v1.2.3",
              "2024-01-31", "12:34:56", "0x1F3A", "100%", "$1,000", "ab12cd345ef6789",
              "1234 5678 9012", "٠١٢٣٤٥", "१२३", "½ ¼ ¾", "x² + y³", "Ⅻ ⅻ", "①②③",
              "１２３４５", "9.99.999.9999", "007", "1st 2nd 3rd 4th"]:
        add("numbers", s)
    for s in ["I'm", "you're", "he's", "they've", "we'll", "she'd", "don't", "isn't",
              "I'M", "YOU'RE", "HE'S", "THEY'VE", "WE'LL", "SHE'D", "DON'T",
              "We'Ll", "tHeY'rE", "'s", "'S", "'ll", "'LL", "'d'm't", "O'Neil's",
              "rock'n'roll", "it\u2019s", "don\u2019t", "'twas", "the dogs' bones",
              "'quoted'", "L'été", "ma'am", "y'all'd've"]:
        add("contraction", s)
    for s in ["日本語のテキスト", "中文文本测试", "汉字漢字かなカナ", "東京は日本の首都です。",
              "안녕하세요 세계", "한국어 문장입니다.", "مرحبا بالعالم", "السلام عليكم ورحمة الله",
              "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Привет, мир!", "Γειά σου Κόσμε",
              "Ünïcödé àccents: café, naïve, Ångström", "Straße", "ﬁ ﬂ ligatures",
              "Tiếng Việt có dấu", "ქართული ენა", "Հայերեն", "ᚠᛇᚻ runes", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math",
              "日本語 English 混合 text", "中文，标点。符号！", "「引用」『二重』"]:
        add("script", s)
    for s in ["😀", "😀😃😄", "👍🏽", "👋🏿👋🏻", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈",
              "🧑🏾\u200d💻", "🇫🇷🇩🇪🇯🇵", "🇺🇸 flag", "1️⃣ 2️⃣", "❤️", "☺︎", "🦙 llama",
              "emoji👍in🎉words", "🤷\u200d♀️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]:
        add("emoji", s)
    for s in ["e\u0301", "a\u0308\u0304", "n\u0303o", "Z\u0324\u0354\u0367\u0311a\u0308\u0356l\u036e\u0312g\u0317o\u0319",
              "\u0301leading mark", "क्षत्रिय", "ä vs a\u0308", "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd",
              "Å\u030a", "x\u20dd"]:
        add("combining", s)
    invalid = [b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xe2\x82", b"abc\x80def", b"\xed\xa0\x80",
               b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\xc3", b"\xc3(", b"ok\xe2\x28\xa1ok",
               b"\xf8\x88\x80\x80\x80", b"caf\xe9 latin1", b"\xf0\x9f\x98\x80\xf0\x9f",
               b"\x80\x80\x80", b"mid\xc2word\xc2", b"\xe0\x80\xaf", b"\xef\xbf\xbd real fffd",
               b"\xed\xbf\xbf", b"tail\xf0"]
    for s in invalid:
        add("invalid-utf8", s)
    for s in [b"nul\x00byte", b"\x01\x02\x03", b"\x04\x06\x13\x14\x16\x1d", b"bell\x07",
              b"\x1b[31mred\x1b[0m", b"del\x7f", b"\x0b\x0c", b"\xc2\x80\xc2\x9f c1"]:
        add("control-chars", s)
    for s in ["<|im_start|>", "<|im_start|>user\nHello<|im_end|>\n", "<|endoftext|>",
              "text<|endoftext|>more", "<tool_call>{\"a\": 1}</tool_call>", "<|fim_prefix|>x<|fim_suffix|>",
              "<repo_name>sekv<file_sep>", "[PAD151665]", "<s></s><unk>", "<|begin_of_text|>",
              "<|eot_id|>", "<|im_end|><|im_end|>", " <|im_start|> ", "<|im_start|assistant",
              "<jupyter_code>print(1)", "<empty_output>"]:
        add("special-text", s)
    for s in ["!!!", "...", "?!?!", "—", "– dash", "«»", "“quoted”", "a,b;c:d", "(x)[y]{z}",
              "==>", "->", "::", "...???!!!", "#hashtag @mention", "100% sure!!!", "~/.bashrc",
              "a/b\\c", "¿Qué?", "¡Hola!", "•bullet", "§ 3 ¶ 2", "©®™", "→←↑↓", "∑∏∫√∞",
              "  !!  ", " .", ". ", "'", "''", "'''", "\"", "a'", "' s"]:
        add("punct", s)
    for s in ["Hello world", " Hello world", "Hello  world   with    runs",
              "The quick brown fox jumps over the lazy dog.",
              "In 1969, Apollo 11 landed on the Moon; Neil Armstrong said: \"That's one small step.\"",
              "Dr. Smith's lab (room 4B) opens at 9:30am—don't be late!",
              "PDF page 12 of 340\fNext page", "UPPER lower MiXeD cAsE",
              "e-mail: someone@example.com, web: https://www.example.org/path?q=a+b#frag"]:
        add("prose", s)

    rnd = random.Random(20240601)
    add("long-a", "a" * 4096)
    add("long-letters", "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8192)))
    add("long-digits", "".join(rnd.choice("0123456789") for _ in range(3000)))
    add("long-spaces", " " * 3000)
    add("long-spaces-then-word", " " * 2000 + "word")
    add("long-newlines", "\n" * 1000)
    add("long-tabs", "\t" * 500)
    add("long-base64", "".join(rnd.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                               for _ in range(4096)))
    add("long-cjk", "".join(chr(rnd.randint(0x4E00, 0x9FA5)) for _ in range(1500)))
    add("long-emoji", "".join(rnd.choice(["😀", "👍🏽", "🇫🇷", "👨\u200d👩\u200d👧"]) for _ in range(300)))
    add("long-url", "https://example.org/" + "/".join("seg%d" % i for i in range(300)))
    add("long-punct", "=-" * 1000)
    add("long-mixed-line", "".join(rnd.choice(["x", "y", "1", "_", ".", "é", "ß"]) for _ in range(5000)))

    pool = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
            [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\n\n", "'", "'s", "'LL", ".", ",", "!", "?",
             "-", "_", "(", ")", "<|", "|>", "<|im_start|>", "é", "ü", "ß", "日", "本", "語", "한",
             "글", "ع", "ب", "😀", "👍🏽", "\u200d", "\u0301", "\u00a0", "\u3000", "１", "½", "#"])
    for i in range(60):
        n = rnd.randint(1, 40)
        add(f"random-{i}", "".join(rnd.choice(pool) for _ in range(n)))
    bad_pool = [b"\x80", b"\xc3", b"\xe2\x82", b"\xff", b"\xf0\x9f", b"a", b" ", b"1", b"\n", b"\xc3\xa9"]
    for i in range(12):
        n = rnd.randint(1, 12)
        add(f"random-bytes-{i}", b"".join(rnd.choice(bad_pool) for _ in range(n)))
    return out


def text_field(raw):
    """{"text": s} for valid UTF-8 without NUL, else {"hex": ...}."""
    try:
        s = raw.decode("utf-8")
        if "\x00" not in s:
            return {"text": s}
    except UnicodeDecodeError:
        pass
    return {"hex": raw.hex()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smollm", default="/tmp/mdl/smollm2.gguf")
    ap.add_argument("--qwen", default="/tmp/mdl/qwen05.gguf")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    a = ap.parse_args()

    data_dir = os.path.join(a.out, "tests", "data", "bpe")
    os.makedirs(data_dir, exist_ok=True)
    vocabs = {}
    for path, name in [(a.smollm, "smollm2-vocab.gguf"), (a.qwen, "qwen2-vocab.gguf")]:
        v = read_vocab(path)
        write_vocab(v, os.path.join(data_dir, name))
        vocabs[name] = v
    vocabs["tiny-vocab.gguf"] = tiny_vocab()
    write_vocab(vocabs["tiny-vocab.gguf"], os.path.join(data_dir, "tiny-vocab.gguf"))

    cases = texts()
    golden = {
        "generator": "tools/gen_bpe_goldens.py",
        "reference": "tokenizers %s (Hugging Face, PyPI)" % tokenizers.__version__,
        "cases": [dict(name=n, **text_field(raw)) for n, raw in cases],
        "configs": [],
    }
    for cname, pre, vfile, own in CONFIGS:
        tk = hf_tokenizer(vocabs[vfile], pre)
        ids, decoded = [], {}
        cfg_cases = tiny_texts() if own else cases
        for i, (_, raw) in enumerate(cfg_cases):
            s = raw.decode("utf-8", errors="fffd_per_byte")
            enc = tk.encode(s, add_special_tokens=False).ids
            ids.append(enc)
            back = tk.decode(enc, skip_special_tokens=False)
            if back.encode("utf-8") != raw:
                decoded[str(i)] = text_field(back.encode("utf-8"))
        cfg = {
            "name": cname, "pre": pre, "vocab": "tests/data/bpe/" + vfile,
            "regex": PRE[pre], "ignore_merges": pre in IGNORE_MERGES,
            "ids": ids, "decoded": decoded,
        }
        if own:
            cfg["cases"] = [dict(name=n, **text_field(raw)) for n, raw in cfg_cases]
        golden["configs"].append(cfg)
    with open(os.path.join(a.out, "tests", "golden", "bpe.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print("%d strings, %d configurations" % (len(cases), len(CONFIGS)))


if __name__ == "__main__":
    main()
