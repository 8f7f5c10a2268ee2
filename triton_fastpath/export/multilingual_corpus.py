"""A seeded multilingual test corpus, for proving a tokenizer exact beyond English review text.

`corpus()` makes a few hundred texts per locale with Faker (pinned in requirements.txt, so the same
seed gives the same texts): names, addresses, companies, jobs and the locale's lorem sentences in
30 locales (Latin with diacritics for Western and Central Europe, Turkish and Vietnamese; Cyrillic,
Greek, Armenian, Georgian, Hebrew, Arabic, Persian, Devanagari, Bengali, Thai, Hangul, kana and
CJK), some texts upper-cased, decomposed (NFD) or with emoji glued on. `hostile_texts()` adds the
edge cases by hand (control and zero-width characters, combining marks, very long words, emoji
sequences, special tokens inside text, characters newer than a library's Unicode tables) and
`invalid_utf8()` byte strings that must be refused, not tokenized.

    python -m triton_fastpath.export.multilingual_corpus --per-locale 5    # print a sample
"""

from __future__ import annotations

import argparse
import random
import unicodedata

from triton_fastpath.errors import ExportError

LOCALES = (
    "en_US", "fr_FR", "es_ES", "it_IT", "pt_BR", "de_DE", "pl_PL", "cs_CZ", "tr_TR", "vi_VN",
    "ru_RU", "el_GR", "ja_JP", "zh_CN", "zh_TW", "ko_KR", "uk_UA", "hu_HU", "sk_SK", "ro_RO",
    "da_DK", "nl_NL", "he_IL", "ar_AA", "fa_IR", "hi_IN", "bn_BD", "th_TH", "ka_GE", "hy_AM",
)  # fmt: skip
PER_LOCALE = 300
SEED = 20261128
EMOJI = ("😀", "👍🏽", "🇵🇱", "❤️", "👨‍👩‍👧", "1️⃣", "🤖", "™", "½")


def _faker(locale: str, seed: int):
    try:
        from faker import Faker
    except ImportError as error:
        raise ExportError("the multilingual corpus needs faker (pip install -r requirements.txt)") from error
    fake = Faker(locale)
    fake.seed_instance(seed)
    return fake


def locale_texts(locale: str, n: int = PER_LOCALE, seed: int = SEED) -> list[str]:
    """`n` texts in `locale`, the same for the same faker version, locale and seed."""
    fake = _faker(locale, seed)
    rng = random.Random(f"{seed}-{locale}")
    makers = (
        lambda: f"{fake.name()}: {fake.sentence()} {fake.company()}.",
        fake.address,
        lambda: fake.paragraph(nb_sentences=3),
        lambda: f"{fake.job()} — {fake.company()}, {fake.city()}",
        lambda: f"{fake.street_address()}; {fake.name()} ({fake.date()})",
        lambda: f"«{fake.sentence()}» — {fake.name()}!",
    )
    texts = []
    for _ in range(n):
        text = rng.choice(makers)()
        roll = rng.random()
        if roll < 0.08:
            text = text.upper()
        elif roll < 0.16:
            text = unicodedata.normalize("NFD", text)
        elif roll < 0.22:
            words = text.split(" ")
            at = rng.randrange(len(words))
            words[at] = words[at] + rng.choice(EMOJI)
            text = " ".join(words)
        texts.append(text)
    return texts


def corpus(per_locale: int = PER_LOCALE, seed: int = SEED, locales: tuple[str, ...] = LOCALES) -> dict[str, list[str]]:
    """{locale: texts} for every locale in `locales`."""
    return {locale: locale_texts(locale, per_locale, seed) for locale in locales}


def corpus_texts(per_locale: int = PER_LOCALE, seed: int = SEED) -> list[str]:
    """Every locale's texts in one list (locales in `LOCALES` order)."""
    return [text for texts in corpus(per_locale, seed).values() for text in texts]


def hostile_texts() -> list[str]:
    """Edge cases every exact tokenizer must survive and agree on (valid Unicode; see `invalid_utf8`)."""
    marks = "".join(chr(c) for c in range(0x0300, 0x0370))
    return [
        "",
        " ",
        "\t\n\r\x0b\x0c",
        "\x00",
        "a\x00b",
        "\x01abc\x02",
        "a\x7fb\x85c",
        "x\x1c\x1d\x1e\x1fy",  # Python calls these whitespace; Rust does not
        "a\u200bb\u200cc\u200dd\u2060e\ufeff",
        "soft\u00adhyphen",
        "bidi \u202eevil\u202c and \u2066iso\u2069",
        "nbsp\u00a0thin\u2009ideo\u3000line\u2028para\u2029end",
        "\ufffd replacement \ufffd",
        "private \ue000\uf8ff \U000f0000 \U0010fffd",
        "noncharacters \ufffe \uffff \U0010ffff",
        "e\u0301 a\u0300 o\u0302\u0323 \u1ec7",
        "a" + marks,
        "\u0301\u0302leading marks",
        "zalgo" + "\u0336\u0334\u0335" * 40 + " text",
        "a\u0315\u0300\u05ae\u0301b",  # canonical reordering
        "\u0f73 \u0f75 \u0f81 \u0344 \u0958",  # decompositions that start with marks; exclusions
        "\u1100\u1161\u11a8 \uac00\ud7a3 \u1e9b\u0323",
        "ﬁ ﬂ ﬀ ǅ ǈ ǋ Ⅻ ① ㎏",  # compatibility characters: NFD keeps them
        "İstanbul ıiİI İSTANBUL",
        "Straße STRASSE ẞ ß",
        "ΟΔΥΣΣΕΥΣ Ὀδυσσεύς ς σ Σ ᾼ ῼ",
        "Ǆemal ǅemal ǆemal",
        "ǰ ΐ ΰ և ŉ",  # lower-case letters with multi-character upper cases
        "中文测试 漢字 𠀀𪜀𫝀𫠠𬺰 丽 豈",
        "ひらがな カタカナ ｶﾀｶﾅ ＡＢＣ ａｂｃ",
        "한국어 텍스트",
        "مرحبا بالعالم ١٢٣",
        "שלום עולם",
        "नमस्ते दुनिया",
        "สวัสดีชาวโลก",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝 𝟘𝟙𝟚",
        "good😀movie 👍🏽👍🏽 🇵🇱🇨🇿 ❤️ 1️⃣ 👨‍👩‍👧‍👦 🏳️‍🌈",
        "[CLS] [SEP] [MASK] [UNK] [PAD]",
        "x[MASK]y[SEP]z",
        "[[SEP]] [SEP [MASK",
        "[cls] [Sep]",
        "a" * 99,
        "a" * 100,
        "a" * 101,
        "é" * 100,
        "é" * 101,
        "x" * 5000,
        "word " * 3000,
        ("Zażółć gęślą jaźń. Příliš žluťoučký kůň úpěl ďábelské ódy. " * 40).strip(),
        "Tiếng Việt có dấu: Nguyễn Văn Ánh, Đà Nẵng, Huế.",
        "a\u2e43b c\u2e5dd",  # punctuation newer than tokenizers' Unicode 8.0 tables
        "a\u1abfb e\u0301\u1ac1 x\u0898y",  # marks newer than its tables
        "\U00013430\u0890 format",  # format characters newer than its tables
        "\ua7cb\ua7dc \U00010d50 \U00016ea0",  # capitals newer than utf8proc's Unicode 15
        "\U00011938 \U00011935\U00011930",  # decomposable in Unicode 13, not in tokenizers' NFD
        "tab\tseparated\tvalues\n" * 3,
        "¿Qué? ¡Sí! «quotes» „Anführung“ ‘single’ – — … · • ‰ ‱ ※",
        "$100 €5 £3 ¥9 ₿1 ¢ ^caret^ `tick` ~tilde~ |pipe| \\back\\",
    ]


def invalid_utf8() -> list[bytes]:
    """Byte strings that are not UTF-8: a tokenizer must refuse each with an error, never tokenize it."""
    return [
        b"\x80",
        b"abc\xbf",
        b"\xc0\x80",
        b"\xc1\xbf",
        b"\xe0\x80\x80",
        b"\xe0\x9f\xbf",
        b"\xed\xa0\x80",  # a lone high surrogate, encoded
        b"\xed\xbf\xbf",  # a lone low surrogate
        b"\xed\xa0\xbd\xed\xb8\x80",  # a surrogate pair encoded as two (CESU-8)
        b"\xf0\x80\x80\x80",
        b"\xf4\x90\x80\x80",
        b"\xf5\x80\x80\x80",
        b"\xf8\x88\x80\x80\x80",
        b"\xfe",
        b"\xff",
        b"ok \xc3",
        b"\xe2\x82",
        b"\xf0\x9f\x98",
        b"\xe2\x28\xa1",
        b"caf\xe9",  # Latin-1
        b"\xc3\x00",
        b"ok\xff" + "ünïcödé".encode(),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-locale", type=int, default=3)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    for locale, texts in corpus(args.per_locale, args.seed).items():
        for text in texts:
            print(f"{locale}\t{text!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
