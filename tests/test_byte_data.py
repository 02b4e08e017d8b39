"""Readers of the byte model's tasks: NSMC-style split, KLUE-NER markup, NER scores."""

from __future__ import annotations

import gzip
import random

import pytest

from kolong.data.klue_ner import entities, parse, parse_prediction, read_klue_ner, render
from kolong.data.nsmc import label_of, read_nsmc, read_reviews
from kolong.errors import DataError
from kolong.evaluation.ner import character_f1, entity_scores, ner_scores

POSITIVE = ["최고의 영화", "정말 재밌다", "감동적이고 추천", "배우 연기 훌륭", "다시 보고 싶다", "명작이다"]
NEGATIVE = ["최악의 영화", "너무 지루하다", "시간 아깝다", "연기 별로", "돈이 아깝다", "실망했다"]
FILLER = ["스토리가", "음악도", "오늘 본", "친구랑 본", "주말에", "극장에서"]


def write_nsmc_sample(path, reviews: int = 400, movies: int = 40, seed: int = 0, gz: bool = False):
    """An NSMC-style raw file: review_id movie_id rating document, ratings 1-10, a few words decide the mood."""
    rng = random.Random(seed)
    lines = ["review_id\tmovie_id\trating\tdocument"]
    for i in range(reviews):
        rating = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 9, 10, 1, 2])
        words = POSITIVE if rating >= 9 else NEGATIVE if rating <= 4 else FILLER
        lines.append(f"{i}\t{rng.randrange(movies)}\t{rating}\t{rng.choice(FILLER)} {rng.choice(words)}")
    lines.append(f"{reviews}\t0\t10\t   ")  # an empty document is dropped
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_nsmc_rule_and_reader(tmp_path):
    assert [label_of(r) for r in range(1, 11)] == [0, 0, 0, 0, None, None, None, None, 1, 1]
    reviews = list(read_reviews(write_nsmc_sample(tmp_path / "r.tsv.gz", gz=True)))
    assert reviews and all(r.label == label_of(r.rating) for r in reviews)
    assert all(r.text.strip() for r in reviews)


def test_nsmc_split_is_balanced_movie_disjoint_and_seeded(tmp_path):
    path = write_nsmc_sample(tmp_path / "r.tsv")
    split = read_nsmc(path, seed=1)
    for side in (split.train, split.test):
        labels = [r.label for r in side]
        assert labels.count(0) == labels.count(1) > 0
    assert not {r.movie_id for r in split.train} & {r.movie_id for r in split.test}
    texts, labels, movies = split.columns(split.train)
    assert len(texts) == len(labels) == len(movies) == len(split.train)
    again = read_nsmc(path, seed=1)
    assert [r.review_id for r in again.train] == [r.review_id for r in split.train]
    assert [r.review_id for r in read_nsmc(path, seed=2).train] != [r.review_id for r in split.train]
    limited = read_nsmc(path, seed=1, limit=40)
    assert len(limited.train) == 40 and len(limited.test) == 10


def test_nsmc_is_parsed_once_across_seeds_and_again_when_the_file_changes(tmp_path, monkeypatch):
    """A study splits one file per seed and scheme: the parse is kept, as tuples the garbage collector stops
    tracking (each Trainer.train starts with a full collection), and a rewritten file is read afresh."""
    import gc
    import os

    import kolong.data.nsmc as nsmc

    path = write_nsmc_sample(tmp_path / "r.tsv")
    parsed, reader = [], nsmc.read_reviews
    monkeypatch.setattr(nsmc, "read_reviews", lambda p: parsed.append(p) or reader(p))
    first = [read_nsmc(path, seed=seed) for seed in (11, 12, 13)]
    assert len(parsed) == 1 and len({tuple(r.review_id for r in s.train) for s in first}) == 3
    assert all(isinstance(r, nsmc.NSMCReview) and r.label in (0, 1) for r in first[0].train)
    stat = path.stat()
    key = (path.resolve(), stat.st_size, stat.st_mtime_ns)
    gc.collect()
    kept = nsmc._reviews_by_movie(*key)
    assert not any(gc.is_tracked(review) for reviews in kept.values() for review in reviews)
    write_nsmc_sample(path, seed=1)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert read_nsmc(path, seed=11).train != first[0].train and len(parsed) == 2


def test_nsmc_bad_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text(
        "review_id\tmovie_id\trating\tdocument\n1\t2\t10\tgood\n2\t3\tten\tbad rating\n", encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"bad.tsv:3: review 2: rating 'ten'"):
        read_nsmc(path)
    path.write_text("1\t2\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv:1: expected 4"):
        list(read_reviews(path))
    with pytest.raises(DataError, match="does not exist"):
        read_nsmc(tmp_path / "missing.tsv")


@pytest.mark.shared_data
def test_nsmc_style_split_of_the_shared_reviews(shared_data):
    split = read_nsmc(shared_data / "nsmc" / "reviews.shared.tsv.gz", seed=0, limit=4000)
    assert len(split.train) == 4000 and len(split.test) == 1000
    assert not {r.movie_id for r in split.train} & {r.movie_id for r in split.test}
    assert sum(r.label for r in split.train) == 2000


MARKUP = "<경찰:OG>은 <박:PS>씨의 딸(<32:QT>)과 <<레이:PS>> 그리고 <일:;LC> <10:30:TI>"


def test_markup_parse_and_render_round_trip():
    text, tags = parse(MARKUP)
    assert text == "경찰은 박씨의 딸(32)과 <레이> 그리고 <일:;LC> 10:30"
    assert render(text, tags) == MARKUP
    spans = [(text[s:e], kind) for s, e, kind in entities(tags)]
    assert spans == [("경찰", "OG"), ("박", "PS"), ("32", "QT"), ("<레이", "PS"), ("10:30", "TI")]
    # adjacent entities of the same type stay two entities (B- B-)
    assert render("한일", ["B-LC", "B-LC"]) == "<한:LC><일:LC>"
    assert parse("<한:LC><일:LC>") == ("한일", ["B-LC", "B-LC"])


def test_predictions_are_parsed_against_the_source_and_malformed_ones_flagged():
    source = "경찰은 박씨의 딸과 김모씨"
    good = parse_prediction("<경찰:OG>은 <박:PS>씨의 딸과 <김:PS>모씨", source)
    assert good.well_formed and [k for *_, k in entities(good.tags)] == ["OG", "PS", "PS"]
    # one character dropped and an unknown tag: flagged, the aligned entities kept
    bad = parse_prediction("<경찰:OG>은 <박:PS>씨 딸과 <김:XX>모씨", source)
    assert not bad.well_formed and len(bad.tags) == len(source)
    assert [(source[s:e], k) for s, e, k in entities(bad.tags)] == [("경찰", "OG"), ("박", "PS")]
    for garbage in ("", "<<<:::>>>", "<경찰:OG" * 50, "\x00\ufffd"):
        parsed = parse_prediction(garbage, source)
        assert not parsed.well_formed and len(parsed.tags) == len(source)


def write_klue_ner_sample(path):
    path.write_text(
        "## 토큰, 레이블 구분자 : \\t\n## 컬럼명 : CHAR\tNE_TAG\n"
        "## s-1\t<박:PS>씨 <1명:QT>\n박\tB-PS\n씨\tO\n \tO\n1\tB-QT\n명\tI-QT\n\n"
        "## s-2\t오늘 <서울:LC>\n오\tO\n늘\tO\n \tO\n서\tB-LC\n울\tI-LC\n",
        encoding="utf-8",
    )
    return path


def test_klue_ner_reader(tmp_path):
    sentences = read_klue_ner(write_klue_ner_sample(tmp_path / "ner.tsv"))
    assert [s.id for s in sentences] == ["s-1", "s-2"]
    assert sentences[0].text == "박씨 1명" and sentences[1].tags == ["O", "O", "O", "B-LC", "I-LC"]
    bad = tmp_path / "bad.tsv"
    bad.write_text("## s-1\t<박:PS>씨\n박\tB-PS\n씨\tB-XX\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.tsv:3: sentence s-1: unknown tag 'B-XX'"):
        read_klue_ner(bad)
    bad.write_text("## s-1\t<박:OG>씨\n박\tB-PS\n씨\tO\n", encoding="utf-8")
    with pytest.raises(DataError, match="markup does not match"):
        read_klue_ner(bad)


@pytest.mark.shared_data
def test_klue_ner_gold_markup_round_trips_exactly(shared_data):
    sentences = read_klue_ner(shared_data / "klue" / "klue-ner-v1.1_dev.tsv")
    assert len(sentences) == 5000
    for sentence in sentences:
        assert parse(sentence.markup) == (sentence.text, sentence.tags), sentence.id
        assert render(sentence.characters, sentence.tags) == sentence.markup
        assert parse_prediction(sentence.markup, sentence.text).well_formed


def test_entity_f1_is_seqeval_strict_iob2():
    gold = [["B-PS", "I-PS", "O", "B-LC"], ["O", "B-DT", "I-DT"]]
    predicted = [
        ["B-PS", "I-PS", "O", "O"],
        ["O", "I-DT", "I-DT"],
    ]  # I- without B- is no entity in strict mode
    scores = entity_scores(gold, predicted)
    assert scores["entity_precision"] == 100.0
    assert scores["entity_recall"] == pytest.approx(100 / 3)
    assert scores["entity_f1"] == pytest.approx(50.0)
    assert ner_scores(gold, gold)["entity_f1"] == 100.0


def test_character_f1_is_klue_macro_over_labels_without_o():
    gold = [["B-PS", "I-PS", "O", "B-LC"]]
    predicted = [["B-PS", "I-PS", "O", "B-PS"]]
    # B-PS: tp 1, gold 1, predicted 2 -> 2/3; I-PS: 1; B-LC: 0 -> mean 5/9
    assert character_f1(gold, predicted) == pytest.approx(100 * 5 / 9)
    assert character_f1([["O"]], [["O"]]) == 100.0
    with pytest.raises(ValueError, match="tags"):
        character_f1([["O"]], [["O", "O"]])
