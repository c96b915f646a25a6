"""Every file a command reads goes through one opener: anything but a regular file is one line, exit 2.

The table crosses the commands that read user files with the kinds of path that are not a
regular file. Each case runs on a thread with a deadline, so a command that waits on a FIFO (or
reads `/dev/zero` forever) fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runtime_helpers import invoke_with_deadline
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.data.input_files import check_input_file, open_input, read_input_text
from embedkit.errors import InputError

DEADLINE_S = 120  # a loaded machine takes seconds to load a model; a hang takes forever
CORPUS = "".join(f"wing flow number {n}\n" for n in range(1, 9))
STS = "sentence1\tsentence2\tscore\na cat\ta dog\t1.0\nwings\tflow\t3.5\nsun\tmoon\t2.0\n"
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\n"
QUERIES = '{"_id": "q1", "text": "wing"}\n'
BEIR_CORPUS = '{"_id": "d1", "title": "", "text": "wing flow"}\n{"_id": "d2", "title": "", "text": "sun"}\n'


# --- the kinds of path that are not a regular file: (name, maker, words the one line must hold) ---


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _fifo_link(path: Path) -> None:
    target = path.with_name(f"real-{path.name}")
    os.mkfifo(target)
    path.symlink_to(target)


def _socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))  # left bound: the file is what matters
    _SOCKETS.append(server)


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")  # a read that never ends


def _folder(path: Path) -> None:
    path.mkdir()


def _dangling(path: Path) -> None:
    path.symlink_to(path.with_name("gone"))


_SOCKETS: list[socket.socket] = []
KINDS: list[tuple[str, Callable[[Path], None], str]] = [
    ("fifo", _fifo, "is a pipe or FIFO"),
    ("symlink-to-fifo", _fifo_link, "is a pipe or FIFO"),
    ("socket", _socket, "is a socket"),
    ("device", _device, "is a character device"),
    ("folder", _folder, "is a folder"),
    ("dangling-symlink", _dangling, "does not exist"),
]


# --- the commands, each with the place its input goes ----------------------------------------------


def _beir(folder: Path, replaced: str) -> Path:
    """A small BEIR folder whose file `replaced` is left for the kind maker to create."""
    (folder / "qrels").mkdir(parents=True)
    files = {"corpus.jsonl": BEIR_CORPUS, "queries.jsonl": QUERIES, "qrels/test.tsv": QRELS}
    for name, text in files.items():
        if name != replaced:
            (folder / name).write_text(text, encoding="utf-8")
    return folder / replaced


# name -> (the input's file name, the argv around it); {in}, {tmp}, {model}, {index} are filled in
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "embed": ("c.txt", ["embed", "{in}", "--out", "{tmp}/v.npy", "--model", "{model}"]),
    "index": ("c.txt", ["index", "{in}", "--out", "{tmp}/idx", "--model", "{model}"]),
    "search --queries": ("q.txt", ["search", "{index}", "--queries", "{in}"]),
    "eval sts": ("s.tsv", ["eval", "sts", "{in}", "--model", "{model}"]),
    "eval pseudo": ("c.txt", ["eval", "pseudo", "{in}", "--model", "{model}"]),
    "eval retrieval qrels": ("qrels/test.tsv", ["eval", "retrieval", "{beir}", "--model", "{model}"]),
    "eval retrieval queries": ("queries.jsonl", ["eval", "retrieval", "{beir}", "--model", "{model}"]),
    "eval retrieval corpus": ("corpus.jsonl", ["eval", "retrieval", "{beir}", "--model", "{model}"]),
}


@pytest.fixture(scope="module")
def search_index(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> Path:
    folder = tmp_path_factory.mktemp("input-files")
    (folder / "c.txt").write_text(CORPUS, encoding="utf-8")
    result = CliRunner().invoke(app, ["index", str(folder / "c.txt"), "--out", str(folder / "idx"),
                                      "--model", str(tiny_bert)])
    assert result.exit_code == 0, result.output
    return folder / "idx"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: a Unix socket's path is limited to about 100 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="ek-"))
    yield folder
    for server in _SOCKETS:
        server.close()
    _SOCKETS.clear()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("kind", [k[0] for k in KINDS])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_path_that_is_not_a_regular_file_is_one_line_and_exit_2(
    command: str, kind: str, short_dir: Path, tiny_bert: Path, search_index: Path
) -> None:
    name, template = COMMANDS[command]
    _, make, words = next(k for k in KINDS if k[0] == kind)
    beir = short_dir / "beir"
    path = _beir(beir, name) if "retrieval" in command else short_dir / name
    make(path)
    fill = {"{in}": str(path), "{tmp}": str(short_dir), "{model}": str(tiny_bert),
            "{index}": str(search_index), "{beir}": str(beir)}
    args = [fill.get(a, a).replace("{tmp}", str(short_dir)) for a in template]
    if kind == "folder" and name == "c.txt":  # a corpus may be a folder of text files: an empty one
        words = "holds no .txt, .md, .pdf, .html or .docx files"
    code, stderr = invoke_with_deadline(args, DEADLINE_S)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr  # one line, no traceback
    assert str(path) in lines[0] and words in lines[0], lines[0]
    assert "has no" not in lines[0]  # a FIFO qrels/test.tsv is there: it is no missing file


# --- the owner itself -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [k[0] for k in KINDS])
def test_the_opener_refuses_each_kind_before_reading(kind: str, short_dir: Path) -> None:
    _, make, words = next(k for k in KINDS if k[0] == kind)
    path = short_dir / "x.txt"
    make(path)
    for attempt in (check_input_file, read_input_text):
        with pytest.raises(InputError, match=words):
            attempt(path, "queries file")


def test_a_path_swapped_for_a_fifo_after_its_check_does_not_hang(short_dir: Path, monkeypatch) -> None:
    """The descriptor's own type is checked: the open does not wait for a writer."""
    import embedkit.data.input_files as input_files

    path = short_dir / "q.txt"
    os.mkfifo(path)
    monkeypatch.setattr(input_files, "check_input_file", lambda p, what="file": Path(p))
    with pytest.raises(InputError, match="is a pipe or FIFO"), open_input(path, "queries file"):
        pass


def test_regular_files_and_symlinks_to_them_are_read(short_dir: Path) -> None:
    import gzip

    plain = short_dir / "a.txt"
    plain.write_text("één\n", encoding="utf-8")
    link = short_dir / "link.txt"
    link.symlink_to(plain)
    packed = short_dir / "a.txt.gz"
    packed.write_bytes(gzip.compress(b"zipped\n"))
    assert read_input_text(link) == "één\n"
    with open_input(packed) as handle:
        assert handle.read() == b"zipped\n"


@pytest.mark.parametrize("name", ["CURRENT", "v-000001/embedkit-index.json", "v-000001/docs.sqlite"])
def test_a_fifo_inside_an_index_is_refused_without_a_hang(name: str, search_index: Path, tmp_path: Path):
    """An index folder is input too: a FIFO in place of one of its files is damage, not a wait."""
    index = tmp_path / "idx"
    shutil.copytree(search_index, index)
    assert (index / name).is_file()  # the layout this test damages
    (index / name).unlink()
    os.mkfifo(index / name)
    code, stderr = invoke_with_deadline(["search", str(index), "wing"], DEADLINE_S)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert str(index) in lines[0], lines[0]
