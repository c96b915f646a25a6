"""Embedding one shard of a corpus into part files (`embedkit embed --shard I/N`).

Shard I of N is documents [I*n//N, (I+1)*n//N) of the corpus (`embedkit.jobs.parts`), so N jobs
that share nothing but the corpus file and an output folder (a Slurm array, a shell loop over
machines, Ray workers) together write the single-process output, cut into N parts. Each job reads
the corpus once to count it (unless told the count) and once up to the end of its range; only its
own documents are embedded. Its three files are written together and atomically, under a lock of
its own: jobs writing different parts of one folder never wait for each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from embedkit.data.fingerprint import CorpusFingerprint
from embedkit.encode.default_onnx import recorded_model_path
from embedkit.encode.runtime import Runtime, runtime_of
from embedkit.errors import InputError
from embedkit.jobs.parts import PartInfo, Shard, part_paths
from embedkit.jobs.run_report import EncoderRun, RunStart
from embedkit.jobs.streaming import (
    CorpusOptions,
    as_encoder,
    count_documents,
    embed_corpus,
    one_line_id,
    read_corpus,
)
from embedkit.storage.atomic import atomic_files
from embedkit.storage.locking import write_lock
from embedkit.storage.write_failures import npy_for_writing

if TYPE_CHECKING:
    from embedkit.data.corpus import Document
    from embedkit.encode.protocol import Encoder


@dataclass(frozen=True)
class PartReport(EncoderRun):
    """What `embed_shard` wrote and how it went."""

    out: Path  # the part's .npy; its .ids.txt and .json lie beside it
    shard: Shard
    start: int
    total: int


def check_part_folder(folder: str | Path) -> Path:
    """`--out` of a sharded or distributed run: a folder (created if absent), never a file."""
    folder = Path(folder)
    if folder.suffix == ".npy" or (folder.exists() and not folder.is_dir()):
        raise InputError(f"--out must be a folder for part files with --shard or --ray, got {folder}")
    return folder


def embed_shard(
    corpus: str | Path,
    folder: str | Path,
    shard: Shard,
    model: Encoder | str | Path | None = None,
    *,
    options: CorpusOptions | None = None,
    normalize: bool | None = None,
    runtime: Runtime | None = None,
    device: str | None = None,  # with `precision`: the older spelling of `runtime`
    precision: str | None = None,
    progress: bool = False,
    total: int | None = None,
) -> PartReport:
    """Embed shard `shard` of `corpus` into `folder/part-I-of-N.{npy,ids.txt,json}`.

    `model`: an open encoder, or a model folder (None: the bundled all-MiniLM-L6-v2) opened once
    the corpus is known to be readable. `total`: the corpus's document count when the caller has
    it (Ray's driver counts once for all workers); otherwise this job counts. A shard may be empty
    (more shards than documents): its part holds 0 rows.
    """
    folder = check_part_folder(folder)
    runtime = runtime_of(runtime, device=device, precision=precision)
    options = options or CorpusOptions()
    npy, ids, sidecar = part_paths(folder, shard)
    with write_lock(npy):
        total = count_documents(corpus, options) if total is None else total
        start, stop = shard.rows(total)
        encoder = as_encoder(model, runtime)
        started = RunStart.of(encoder)
        fingerprint = CorpusFingerprint()
        with atomic_files(npy, ids, sidecar) as (npy_tmp, ids_tmp, json_tmp):
            documents = islice(read_corpus(corpus, options), start, stop)
            _write_part(
                encoder,
                corpus,
                documents,
                stop - start,
                npy_tmp,
                ids_tmp,
                fingerprint,
                options,
                normalize,
                progress,
            )
            info = PartInfo(
                shard=shard.index,
                shards=shard.count,
                start=start,
                count=stop - start,
                total=total,
                dim=encoder.dim,
                model=str(recorded_model_path(encoder)),
                model_fingerprint=encoder.fingerprint,
                model_backend=encoder.backend,
                max_seq_length=encoder.max_seq_length,
                normalized=normalize,
                corpus=str(corpus),
                corpus_fingerprint=fingerprint.hex,
            )
            json_tmp.write_text(json.dumps(info.to_json(), indent=2) + "\n", encoding="utf-8")
    return PartReport.measured(
        encoder, started, count=stop - start, out=npy, shard=shard, start=start, total=total
    )


def _write_part(
    encoder: Encoder,
    corpus: str | Path,
    documents,
    count: int,
    npy: Path,
    ids: Path,
    fingerprint: CorpusFingerprint,
    options: CorpusOptions,
    normalize: bool | None,
    progress: bool,
) -> None:
    """Fill `npy` ([count, dim] float32) and `ids` from `documents`, and their fingerprint."""
    if count == 0:  # a memory map cannot be empty
        with npy.open("wb") as fh:  # a file object: np.save would append .npy to a path
            np.save(fh, np.zeros((0, encoder.dim), dtype=np.float32))
        ids.write_text("", encoding="utf-8")
        return
    matrix = npy_for_writing(npy, (count, encoder.dim))  # its space reserved: a full disk is no SIGBUS
    with ids.open("w", encoding="utf-8", newline="\n") as ids_file:

        def write(offset: int, chunk: list[Document], vectors: np.ndarray) -> None:
            matrix[offset : offset + len(chunk)] = vectors
            ids_file.writelines(f"{one_line_id(doc.id)}\n" for doc in chunk)
            fingerprint.add(chunk)

        embed_corpus(
            encoder,
            corpus,
            write,
            expected=count,
            options=options,
            normalize=normalize,
            progress=progress,
            documents=documents,
        )
    matrix.flush()
