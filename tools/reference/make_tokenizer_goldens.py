#!/usr/bin/env python3
"""Tokenizer goldens from the real Hugging Face `tokenizers` / `transformers` libraries.

Writes tests/data/tokenizer/:
  tokenizer.json            SmolLM2-135M-Instruct's vocabulary and merges (built by transformers
                            from the GGUF) with SmolLM2's real pre-tokenizer:
                            Sequence[Digits(individual_digits), ByteLevel(use_regex)]
  strings.json              the test strings (>= 300)
  <variant>/override.json   a JSON merge patch (RFC 7386) turning tokenizer.json into the variant
                            (smollm: none; gpt2: ByteLevel only; llama3 / qwen2: the Split regex +
                            ByteLevel(use_regex=false) those models' tokenizer.json files carry)
  <variant>/tokenizer_config.json  bos/eos/chat template where the variant has one
  <variant>/goldens.json    ids from tokenizers.Tokenizer.encode(s, add_special_tokens=False)
                            for every string (added tokens are parsed, as HF always does)
  chat_goldens.json         transformers' apply_chat_template renders (ChatML from SmolLM2's
                            GGUF template, Meta's Llama-3 template) and the ChatML ids

One tokenizer.json plus small patches keeps the folder at a few MB; the C++ test applies the
patch (nlohmann::json::merge_patch) and loads the result from a temporary directory.

Setup (once):
    python3 -m venv /work/refenv
    /work/refenv/bin/pip install tokenizers transformers gguf torch
    scripts/fetch-model   # models/SmolLM2-135M-Instruct.Q4_1.gguf
Run from anywhere:
    /work/refenv/bin/python tools/reference/make_tokenizer_goldens.py
"""
import copy
import json
import random
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "tokenizer"
MODEL_DIR = ROOT / "models"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SEED = 20250117

SMOLLM_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
GPT2_PRE = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": True}
LLAMA3_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def split_pre(regex):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}


# Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}")

VARIANTS = {
    "smollm": {},
    "gpt2": {"pre_tokenizer": GPT2_PRE},
    # Llama-3's tokenizer.json also sets ignore_merges (whole words looked up first).
    "llama3": {"pre_tokenizer": split_pre(LLAMA3_REGEX), "model": {"ignore_merges": True}},
    "qwen2": {"pre_tokenizer": split_pre(QWEN2_REGEX)},
}


def byte_level_decode(piece):
    """GPT-2's bytes_to_unicode, inverted: a ByteLevel piece back to its raw bytes."""
    printable = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)))
    to_char, extra = {}, 0
    for b in range(256):
        if b in printable:
            to_char[b] = chr(b)
        else:
            to_char[b] = chr(0x100 + extra)
            extra += 1
    to_byte = {c: b for b, c in to_char.items()}
    return bytes(to_byte[c] for c in piece)


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def gguf_chat_template():
    from gguf import GGUFReader
    field = GGUFReader(str(MODEL_DIR / GGUF_NAME)).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def base_tokenizer_json():
    """transformers' GGUF conversion of SmolLM2's tokenizer, pre-tokenizer made the real one."""
    from transformers import AutoTokenizer
    with tempfile.TemporaryDirectory() as tmp:
        tok = AutoTokenizer.from_pretrained(str(MODEL_DIR), gguf_file=GGUF_NAME)
        tok.save_pretrained(tmp)
        doc = json.loads((Path(tmp) / "tokenizer.json").read_text(encoding="utf-8"))
    doc["pre_tokenizer"] = SMOLLM_PRE
    doc["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                      "use_regex": True}
    return doc


def test_strings():
    s = ["", " ", "  ", "a", "A", "Hello world", "Hello, world!", "hello  world", "  leading",
         "trailing  ", "trailing\n", "\nleading newline", "The quick brown fox jumps over the lazy dog.",
         "THE QUICK BROWN FOX", "CamelCaseIdentifier", "snake_case_name", "kebab-case-name",
         "e.g. i.e. etc.", "Mr. O'Neil's dog", "...", "?!?!", "--", "—em dash—", "“quoted”",
         "«guillemets»", "¿Qué?", "¡Hola!", "a.b.c", "end.", "x", "  x  ", "\ta", "a\tb\tc"]
    # Contractions in every case; the llama3/qwen2 regexes match them case-insensitively.
    for c in ["s", "t", "re", "ve", "m", "ll", "d"]:
        s += [f"it'{c}", f"IT'{c.upper()}", f"It'{c.capitalize()}", f" '{c} ", f"'{c}"]
    s += ["don't", "DON'T", "Don'T", "y'all", "rock 'n' roll", "'twas", "''", "'''", "' s",
          "it's' s", "I'M HERE", "we'Re", "'ſ", "it'ſ", "''s", "'x", "''ll", "can't've",
          "O'Reilly", "rock'n'roll", "'ſx", "it'ſelf", "'STUFF", "'dx", "'REx", "'Llama", "'", " '", "' ", "l'homme", "dell'arte"]
    # Whitespace runs in every position.
    for n in [1, 2, 3, 5, 8]:
        s += [" " * n, "\n" * n, "a" + " " * n + "b", "a" + "\n" * n + "b", " " * n + "x",
              "x" + " " * n]
    s += ["\t", "\t\t", "\r\n", "a\r\nb", "a\r\n\r\nb", "\r", "a\rb", " \n ", "a \n b",
          "a  \n  b", "a\n \nb", " \n\n x", "\n \t\n", "a\t\n\tb", "x \t y", "\v\f", "a\u3000b",
          "\u3000\u3000x", "\u00a0x", "x\u00a0", "a\u2003b", "a \u2003 b", "a\u2028b", "a\u2029b",
          "\x1c\x1d\x1e\x1f", "a\x85b", "  \u3000", "\u200b zero width", "a\u200bb",
          "if x:\n    return 1\n", "\n\n\n\n", "   \n", "\n   ", "line1\nline2\n\nline4"]
    # Numbers.
    s += ["1", "12", "123", "1234", "12345", "1234567", "12345678901234567890", "0", "007",
          "3.14159", "1,000,000", "1_000_000", "$1,234.56", "-42", "+1 (555) 123-4567",
          "2024-01-15", "10:30:00", "1e-10", "0x1F", "v1.2.3", "a1b2c3", "100%", "50/50",
          "1st 2nd 3rd 4th", "x86_64", "H2O", "COVID-19", "٠١٢٣٤٥", "१२३४", "০১২", "๑๒๓",
          "½ ¾ ⅓", "Ⅻ ⅻ", "①②③", "x² + y³", "１２３４５", "𝟙𝟚𝟛", " 1", " 12", " 1234",
          "abc 123 def", "1 2 3 4", "11 22 333 4444", "3.0.0-rc1", "192.168.0.1", "9" * 40]
    # Scripts.
    s += ["café naïve résumé", "Straße", "İstanbul ıi", "Ελληνικά γλώσσα", "Здравствуй, мир!",
          "Привет МИР", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "বাংলা ভাষা", "สวัสดีชาวโลก",
          "안녕하세요 세계", "こんにちは世界", "カタカナとひらがな", "日本語の文章です。", "你好，世界！",
          "繁體中文測試", "Tiếng Việt có dấu", "ქართული", "Հայերեն", "አማርኛ", "தமிழ்", "తెలుగు",
          "ಕನ್ನಡ", "ગુજરાતી", "ਪੰਜਾਬੀ", "සිංහල", "ລາວ", "ខ្មែរ", "မြန်မာ", "ᠮᠣᠩᠭᠣᠯ", "ᏣᎳᎩ",
          "e\u0301", "n\u0303o", "Z̴̡̛a̷l̶g̸o̵", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝", "𠀀𠀁𠀂", "𐌰𐌱𐌲",
          "𝄞 music", "ﬁ ﬂ ligatures", "ǅ titlecase", "ÅÆØ åæø", "Ωmega", "µ micro", "ß ẞ",
          "mixed English和中文text", "한국어English혼합", "русский English", "عربي123english"]
    # Emoji.
    s += ["😀", "😀😃😄", "👍🏽", "👍 👍🏻 👍🏿", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "❤️", "1️⃣",
          "🧑🏿‍💻", "I ❤️ NY", "Great job! 🎉🎉", "emoji😀inside", "🤷‍♀️", "👩🏽‍🚀 in space",
          "☺ ☹ ☃", "★☆", "→ ← ↑ ↓", "© ® ™", "∀x∈ℝ: x²≥0", "≤ ≥ ≠ ≈", "∑∫∂"]
    # Code.
    s += ["def foo(x):\n    return x * 2\n",
          "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
          "const f = (a, b) => a + b;",
          "fn main() {\n    println!(\"Hello, {}!\", name);\n}",
          "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hi\") }",
          "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
          "<div class=\"main\"><p>Hello</p></div>",
          "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
          "#!/bin/bash\nset -euo pipefail\necho \"$HOME\" | grep -v '^#' > /dev/null 2>&1",
          "^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)$",
          "\\begin{equation} E = mc^2 \\end{equation}",
          "all:\n\t$(CC) -O2 -o $@ $^",
          "key:\n  - item1\n  - item2\n    nested: true",
          "std::vector<int32_t> ids{1, 2, 3};",
          "template <typename T> auto f(T&& x) -> decltype(x) { return x; }",
          "x = {'a': 1, \"b\": 2}  # comment",
          "print(f\"{name!r:>10}\")",
          "if (a != b && c <= d || !e) return;",
          "    indented    code    ",
          "// TODO: fix this\n/* block */",
          "https://example.com/path?query=1&b=2#frag",
          "user@example.com", "C:\\Users\\Name\\file.txt", "/usr/local/bin/python3",
          "a->b->c", "a::b::c", "a...b", "x+=1;y-=2;", "i++ --j", "<<=>>=", "[[nodiscard]]",
          "@decorator\ndef f(): pass", "$var ${var} %s %d", "```python\nprint(1)\n```",
          "| col1 | col2 |\n|------|------|", "# Heading\n\n* bullet\n* bullet"]
    # Special tokens inline (parsed as HF does), and near misses.
    s += ["<|im_start|>user\nhi<|im_end|>", "<|im_start|><|im_end|>",
          "text<|endoftext|>more", "<|im_start", "<|im_start|", "< |im_start|>",
          "<repo_name>foo<file_sep>bar", "<|im_end|>\n<|im_start|>assistant\n",
          "<<|im_start|>>", "<|im_start|><|im_start|>", " <|im_end|> ", "a<|im_end|>b",
          "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
          "<filename>main.py\n<gh_stars>100", "<jupyter_code>print(1)<jupyter_output>1",
          "<|endoftext|>", "<|endoftext|><|endoftext|>", "<|im_start|>  spaced  <|im_end|>",
          "<empty_output>", "<issue_start>bug<issue_comment>ok<issue_closed>"]
    # Invalid-looking input: replacement chars, byte-level mapping chars, controls, BOM,
    # private use and noncharacters.
    s += ["\ufffd", "\ufffd\ufffd abc", "\u00ff\u00fe", "\\x80\\xff", "\u200d", "\ufeffBOM",
          "\u202eRTL override", "\x00", "a\x00b", "\x7f", "\x01\x02\x1b[31mred\x1b[0m",
          "Ġ Ċ ĉ", "âĢĶ", "ĠĠĠ", "\ue000\uf8ff", "\uffff", "\U0010FFFF", "\U000F0000",
          "\u0300 lone combining", "\u00ad soft hyphen", "Ā", "ŀ", "ł"]
    # Long runs.
    s += ["a" * 200, " " * 100, "\n" * 50, "ab" * 100, "Hello " * 30, "0123456789" * 10,
          "the " * 60, "😀" * 20, "中" * 50, "." * 64, "=" * 80, "-_-" * 20,
          ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
           "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
           "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.")]
    # Random strings over a pool that mixes every class the regexes distinguish.
    rng = random.Random(SEED)
    pool = (list("abcXYZ019'’ .,;!?-_()[]{}<>/\\\"#@$%^&*+=|~`") +
            [" ", " ", "  ", "\n", "\t", "\r\n", "\u3000", "\u00a0", "é", "ß", "Ω", "ж", "ا",
             "中", "日", "한", "😀", "👍🏽", "\u200d", "\u0301", "٣", "½", "Ⅻ", "'s", "'LL",
             "'t", "<|im_start|>", "<|im_end|>", "Ġ", "𝔘", "𠀀", "\x0b", "\x85"])
    for _ in range(120):
        s.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 30))))
    # Keep the order stable and drop duplicates.
    seen = set()
    return [x for x in s if not (x in seen or seen.add(x))]


def chat_goldens(smollm_template, smollm_tok):
    from transformers import PreTrainedTokenizerFast
    cases = [
        ([{"role": "user", "content": "Hello!"}], True),
        ([{"role": "user", "content": "Hello!"}], False),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], True),
        ([{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
          {"role": "user", "content": "And 3+3?"}], True),
        ([{"role": "system", "content": "You speak French."},
          {"role": "user", "content": "Bonjour, ça va ?"},
          {"role": "assistant", "content": "Oui, très bien !"}], False),
        ([{"role": "user", "content": "  padded content \n"}], True),
        ([{"role": "user", "content": "line one\nline two\n\n  indented"}], True),
        ([{"role": "user", "content": "emoji 👨‍👩‍👧‍👦 and 中文"}], True),
        ([{"role": "assistant", "content": "I start."}, {"role": "user", "content": "ok"}], True),
        ([{"role": "user", "content": ""}], True),
    ]
    out = []
    smol = PreTrainedTokenizerFast(tokenizer_object=smollm_tok, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>")
    smol.chat_template = smollm_template
    llama = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(smollm_tok.to_str()),
                                    bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    llama.chat_template = LLAMA3_TEMPLATE
    for messages, gen in cases:
        chatml = smol.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        llama3 = llama.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        out.append({"messages": messages, "add_generation_prompt": gen, "chatml": chatml,
                    "chatml_ids": smollm_tok.encode(chatml, add_special_tokens=False).ids,
                    "llama3": llama3})
    return out


def dump(path, obj, indent=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    seps = (",", ":") if indent is None else (",", ": ")
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=indent, separators=seps) + "\n",
                    encoding="utf-8")


def main():
    base = base_tokenizer_json()
    dump(OUT / "tokenizer.json", base)
    strings = test_strings()
    assert len(strings) >= 300, len(strings)
    dump(OUT / "strings.json", strings, indent=1)
    smollm_template = gguf_chat_template()
    configs = {
        "smollm": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "add_bos_token": False,
                   "chat_template": smollm_template},
        "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                   "add_bos_token": True, "chat_template": LLAMA3_TEMPLATE},
    }
    for name, patch in VARIANTS.items():
        tok = Tokenizer.from_str(json.dumps(merge_patch(base, patch)))
        ids = [tok.encode(x, add_special_tokens=False).ids for x in strings]
        # Strings holding a byte the vocabulary has no token for (SmolLM2 lacks a few control
        # bytes) lose it; `decoded` records HF's decode for those, by string index.
        decoded = {}
        for i, row in enumerate(ids):
            text = tok.decode(row, skip_special_tokens=False)
            if text != strings[i]:
                decoded[str(i)] = text
        dump(OUT / name / "override.json", patch, indent=1)
        # The pre-tokenizer alone, as byte lengths of its pieces: SmolLM2's vocabulary has no
        # multi-digit tokens, so ids alone cannot tell \p{N}{1,3} from \p{N}.
        pieces = [[len(byte_level_decode(p)) for p, _ in tok.pre_tokenizer.pre_tokenize_str(x)]
                  for x in strings]
        for x, lengths in zip(strings, pieces):
            assert sum(lengths) == len(x.encode("utf-8")), (name, x)
        dump(OUT / name / "goldens.json",
             {"variant": name, "ids": ids, "decoded": decoded, "piece_bytes": pieces})
        if name in configs:
            dump(OUT / name / "tokenizer_config.json", configs[name], indent=1)
        print(f"{name}: {len(strings)} strings, {sum(map(len, ids))} tokens, "
              f"{len(decoded)} lossy")
    smollm_tok = Tokenizer.from_str(json.dumps(base))
    dump(OUT / "chat_goldens.json", chat_goldens(smollm_template, smollm_tok), indent=1)


if __name__ == "__main__":
    main()
