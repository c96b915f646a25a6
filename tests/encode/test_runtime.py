"""`Runtime`: one checked value for where things run, and the older keywords that still build one."""

from __future__ import annotations

import warnings

import pytest

from embedkit.encode.loading import load_encoder
from embedkit.encode.runtime import Runtime, fold_gpu, runtime_of
from embedkit.errors import InputError
from embedkit.jobs.index_options import IndexOptions


def test_defaults_are_the_libraries_own():
    runtime = Runtime()
    assert (runtime.device, runtime.precision, runtime.threads) == ("auto", None, None)
    assert (runtime.spinning, runtime.warmup, runtime.tokenizer_workers, runtime.cuda_graphs) == (
        True,
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"device": "gpu"}, "unknown device 'gpu': use auto, cpu, cuda or cuda:N"),
        ({"device": "cuda:x"}, "unknown device 'cuda:x'"),
        ({"precision": "bf16"}, "unknown precision 'bf16': use one of fp32, fp16, int8"),
        ({"threads": -1}, "threads must be 0 (all cores) or more, got -1"),
        ({"tokenizer_workers": 65}, "tokenizer workers must be 0"),
    ],
)
def test_a_bad_value_is_refused_on_creation(settings, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Runtime(**settings)


@pytest.mark.parametrize(
    ("device", "faiss_gpu", "faiss_device"),
    [("auto", None, "cpu"), ("cpu", None, "cpu"), ("cuda", 0, "cuda:0"), ("cuda:3", 3, "cuda:3")],
)
def test_where_faiss_runs(device, faiss_gpu, faiss_device):
    # auto keeps faiss on the CPU: an index's kind must not depend on the faiss package installed
    assert (Runtime(device).faiss_gpu, Runtime(device).faiss_device) == (faiss_gpu, faiss_device)


def test_the_gpu_switch_is_device_cuda():
    assert fold_gpu("auto", True) == "cuda"
    assert fold_gpu("cuda:1", True) == "cuda:1"  # a GPU named stays
    assert fold_gpu("cpu", False) == "cpu" and fold_gpu("auto", False) == "auto"
    with pytest.raises(InputError, match="--gpu runs on the GPU and --device cpu on the CPU"):
        fold_gpu("cpu", True)


def test_the_older_keywords_build_one_runtime_and_never_beside_one():
    assert runtime_of(None, device="cpu", precision="fp32", threads=None) == Runtime("cpu", "fp32")
    assert runtime_of(None) == Runtime()
    given = Runtime("cpu")
    assert runtime_of(given, device=None) is given
    with pytest.raises(InputError, match="give runtime= or device=, not both"):
        runtime_of(given, device="cpu")
    with pytest.raises(InputError, match="give runtime= or gpu=, not both"):
        runtime_of(given, True)
    with pytest.warns(DeprecationWarning, match="gpu=True is deprecated"):
        assert runtime_of(None, True) == Runtime("cuda")


def test_load_encoder_takes_a_runtime_or_the_older_keywords(tiny_onnx):
    encoder = load_encoder(tiny_onnx, runtime=Runtime("cpu", "fp32", threads=1))
    assert (str(encoder.device), encoder.precision) == ("cpu", "fp32")
    older = load_encoder(tiny_onnx, device="cpu", precision="fp32", intra_op_threads=1)
    texts = ["a wing in a shock wave", "the cat eats"]
    assert (encoder.encode(texts) == older.encode(texts)).all()
    with pytest.raises(InputError, match="give runtime= or device=, not both"):
        load_encoder(tiny_onnx, device="cpu", runtime=Runtime("cpu"))


def test_index_options_fold_the_older_fields_into_the_runtime():
    assert IndexOptions(device="cpu", precision="fp32").runtime == Runtime("cpu", "fp32")
    folded = IndexOptions(device="cpu")
    assert (folded.device, folded.precision, folded.gpu) == (None, None, False)  # read once, from runtime
    with pytest.warns(DeprecationWarning):
        assert IndexOptions(gpu=True).runtime == Runtime("cuda")
    with pytest.raises(InputError, match="not both"):
        IndexOptions(runtime=Runtime("cuda"), device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns of nothing
        assert IndexOptions(runtime=Runtime("cuda")).runtime.faiss_gpu == 0
