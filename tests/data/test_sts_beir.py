"""STS and BEIR readers: formats, gzip, and one clear error line per kind of bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from embedkit.data import read_beir, read_sts
from embedkit.errors import InputError

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, text: str | bytes, gz: bool = False) -> Path:
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_read_tsv_keeps_quotes_and_ignores_extra_columns(tmp_path: Path, gz: bool) -> None:
    name = "pairs.tsv.gz" if gz else "pairs.tsv"
    path = _write(
        tmp_path / name,
        'genre\tscore\tsentence1\tsentence2\nnews\t4.5\tHe said "hi".\tA "quote\nnews\t0\tb\tc\n\n',
        gz=gz,
    )
    data = read_sts(path)
    assert data.sentences1 == ['He said "hi".', "b"]
    assert data.sentences2 == ['A "quote', "c"]
    assert data.scores.dtype == np.float64
    assert data.scores.tolist() == [4.5, 0.0]


def test_read_csv_with_quoted_multiline_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "pairs.csv", 'sentence1,sentence2,score\n"a, b","two\nlines",1.5\nx,y,2\nz,w,oops\n'
    )
    with pytest.raises(InputError, match=r"line 5: bad score 'oops'"):
        read_sts(path)
    path.write_text('sentence1,sentence2,score\n"a, b","two\nlines",1.5\nx,y,2\n')
    data = read_sts(path)
    assert data.sentences1 == ["a, b", "x"]
    assert data.sentences2 == ["two\nlines", "y"]
    assert data.scores.tolist() == [1.5, 2.0]


def test_read_jsonl(tmp_path: Path) -> None:
    lines = [
        {"sentence1": "a", "sentence2": "b", "score": 3},
        {"sentence1": "c", "sentence2": "d", "score": "1.25"},
    ]
    path = _write(tmp_path / "pairs.jsonl.gz", "\n".join(json.dumps(x) for x in lines) + "\n", gz=True)
    data = read_sts(path)
    assert data.sentences1 == ["a", "c"]
    assert data.scores.tolist() == [3.0, 1.25]


def test_missing_column_names_the_columns_found(tmp_path: Path) -> None:
    path = _write(tmp_path / "pairs.tsv", "sentence1\tsentence2\tlabel\na\tb\t1\n")
    with pytest.raises(InputError, match=r"lacks score \(columns found: 'sentence1', 'sentence2', 'label'\)"):
        read_sts(path)
    path = _write(tmp_path / "pairs.jsonl", '{"sentence1": "a", "score": 1}\n')
    with pytest.raises(InputError, match=r"line 1 lacks sentence2 \(keys found: 'sentence1', 'score'\)"):
        read_sts(path)


@pytest.mark.parametrize("score", ["abc", "", "nan", "inf"])
def test_bad_score_reports_the_line(tmp_path: Path, score: str) -> None:
    path = _write(tmp_path / "pairs.tsv", f"sentence1\tsentence2\tscore\na\tb\t1\n\nc\td\t{score}\n")
    with pytest.raises(InputError, match=rf"pairs.tsv: line 4: bad score '{score}'"):
        read_sts(path)


def test_non_utf8_reports_the_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "pairs.tsv.gz", b"sentence1\tsentence2\tscore\na\tb\t1\ncaf\xe9\tb\t2\n", gz=True
    )
    with pytest.raises(InputError, match=r"line 3 is not valid UTF-8"):
        read_sts(path)


def test_empty_and_header_only_and_ragged_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"pairs.tsv is empty"):
        read_sts(_write(tmp_path / "pairs.tsv", ""))
    with pytest.raises(InputError, match=r"pairs.csv is empty"):
        read_sts(_write(tmp_path / "pairs.csv", "\n\n"))
    with pytest.raises(InputError, match=r"holds no sentence pairs"):
        read_sts(_write(tmp_path / "pairs.tsv", "sentence1\tsentence2\tscore\n"))
    with pytest.raises(InputError, match=r"line 2 has 2 fields, the header has 3"):
        read_sts(_write(tmp_path / "pairs.tsv", "sentence1\tsentence2\tscore\na\tb\n"))


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"unknown format '.txt'"):
        read_sts(_write(tmp_path / "pairs.txt", "x"))
    with pytest.raises(InputError, match=r"file not found"):
        read_sts(tmp_path / "absent.tsv")


def _beir(folder: Path, qrels: str = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\n") -> Path:
    folder.mkdir()
    docs = [
        {"_id": "d1", "title": "Wing", "text": "lift"},
        {"_id": "d2", "title": "", "text": "drag"},
        {"_id": 3},
    ]
    _write(folder / "corpus.jsonl", "".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": "q1", "text": "wing lift"}, {"_id": "q2", "text": "unjudged"}]
    _write(folder / "queries.jsonl.gz", "".join(json.dumps(q) + "\n" for q in queries), gz=True)
    (folder / "qrels").mkdir()
    _write(folder / "qrels" / "test.tsv", qrels)
    return folder


def test_read_beir_keeps_judged_queries_and_joins_title_and_text(tmp_path: Path) -> None:
    data = read_beir(_beir(tmp_path / "beir"))
    assert data.queries == {"q1": "wing lift"}
    assert data.qrels == {"q1": {"d1": 2, "d2": 0}}
    assert data.document_texts() == (["d1", "d2", "3"], ["Wing lift", "drag", ""])


def test_qrels_without_header_keep_their_first_judgment(tmp_path: Path) -> None:
    data = read_beir(_beir(tmp_path / "beir", qrels="q1\td1\t1\n"))
    assert data.qrels == {"q1": {"d1": 1}}


def test_beir_errors(tmp_path: Path) -> None:
    folder = _beir(tmp_path / "beir")
    with pytest.raises(InputError, match=r"has no qrels/dev.tsv.*\(splits found: test\)"):
        read_beir(folder, split="dev")
    with pytest.raises(InputError, match=r"BEIR folder not found"):
        read_beir(tmp_path / "absent")
    bad = _beir(tmp_path / "bad", qrels="query-id\tcorpus-id\tscore\nq1\td1\thigh\n")
    with pytest.raises(InputError, match=r"test.tsv: line 2: bad relevance grade 'high'"):
        read_beir(bad)
    unknown = _beir(tmp_path / "unknown", qrels="q9\td1\t1\n")
    with pytest.raises(InputError, match=r"judges 1 queries that .* lacks \(e.g. 'q9'\)"):
        read_beir(unknown)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n')
    with pytest.raises(InputError, match=r"line 2 repeats document id 'd1'"):
        read_beir(folder)
    queries = _beir(tmp_path / "queries")
    repeated = '{"_id": "q1", "text": "wing lift"}\n{"_id": "q1", "text": "drag"}\n'
    _write(queries / "queries.jsonl.gz", repeated, gz=True)
    with pytest.raises(InputError, match=r"queries.jsonl.gz: line 2 repeats query id 'q1'"):
        read_beir(queries)


def test_read_the_bundled_gzipped_cranfield() -> None:
    data = read_beir(REPO / "examples" / "cranfield")
    assert len(data.corpus) == 1400
    assert len(data.queries) == 225
    assert sum(len(j) for j in data.qrels.values()) == 1837  # the README's count
    assert set(data.qrels["1"]) >= {"184", "29", "31", "12"}
