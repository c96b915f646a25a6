"""The one `Runtime` each command builds from its options, before any work."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from embedkit.cli.app import app
from embedkit.encode.runtime import Runtime


def test_serve_hands_its_run_time_options_down_as_one_runtime(monkeypatch):
    pytest.importorskip("starlette")
    import embedkit.serve.server as server

    configs = []
    monkeypatch.setattr(server, "run_server", lambda config, echo: configs.append(config))
    options = ["--device", "cpu", "--precision", "fp32", "--tokenizer-workers", "2", "--no-warmup"]
    result = CliRunner().invoke(app, ["serve", *options, "--no-cuda-graphs", "--ort-spinning"])
    assert result.exit_code == 0, result.output
    expected = Runtime("cpu", "fp32", spinning=True, warmup=False, tokenizer_workers=2, cuda_graphs=False)
    assert configs[0].runtime == expected
    CliRunner().invoke(app, ["serve"])
    assert configs[1].runtime == Runtime(spinning=False)  # the server's default: threads sleep between runs


@pytest.mark.parametrize(
    "args",
    [
        ["search", "some-index", "a query", "--device", "tpu"],
        ["index", "corpus.jsonl", "--out", "idx", "--device", "tpu"],
        ["embed", "corpus.jsonl", "--out", "v.npy", "--device", "tpu"],
        ["serve", "--device", "tpu"],
    ],
)
def test_a_bad_device_is_one_line_before_any_file_is_read(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # none of the files named exists: the device is refused first
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == ["error: unknown device 'tpu': use auto, cpu, cuda or cuda:N"]
