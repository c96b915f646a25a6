"""Each precision's ONNX file built and held to its parity gate, in the export's staging folder.

A precision has a short ladder of plans (`embedkit.export.optimize.OPTIMIZATIONS` for fp32,
`embedkit.export.precision` for fp16 and int8); `GateRun` tries them in order and keeps the first
whose vectors pass the gate against the reference (sentence-transformers, where installed). What
failed is reported with its figures; a precision whose every plan failed leaves no file.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from embedkit.encode.onnx_backend import OnnxEncoder
from embedkit.encode.precisions import PRECISION_FILES
from embedkit.errors import InputError, RunFailure
from embedkit.export.optimize import OptimizedGraph
from embedkit.export.parity import ParityFailure, ParityGates, ParityReport, judge, row_cosines

PARITY_BATCH_SIZE = 64  # the runtime default, so parity sees the padding shapes users will run


def sts_spearman(encoder: Any, sts: Any, progress: bool) -> float:
    """Spearman x100 of cosine similarity against the gold scores, one correlation over all pairs."""
    from embedkit.evaluation.metrics import spearman

    first = encoder.encode(sts.sentences1, PARITY_BATCH_SIZE, normalize=True, progress=progress)
    second = encoder.encode(sts.sentences2, PARITY_BATCH_SIZE, normalize=True, progress=progress)
    return 100.0 * spearman(np.einsum("ij,ij->i", first, second), sts.scores)


@dataclass
class GateRun:
    """One export's checks: the staging folder, the reference vectors, the gates, the reports so far."""

    stage: Path
    texts: list[str]
    reference: np.ndarray  # (n, dim) the reference's vectors, normalised as the graph is
    gates: ParityGates
    device: str
    progress: bool
    say: Callable[[str], None]
    sts: Any = None  # embedkit.data.sts.StsData, when --dev-sts was given
    torch_sts: float | None = None
    fp32_sts: float | None = None
    reports: list[ParityReport] = field(default_factory=list)

    def check(self, precision: str) -> ParityReport:
        """Embed the parity sentences with one ONNX file of the stage and judge them (not raising)."""
        try:
            # Dynamic int8 is made for CPU inference (OnnxEncoder never picks it on a GPU), so it
            # is checked where it will run.
            where = "cpu" if precision == "int8" else self.device
            encoder = OnnxEncoder(self.stage, device=where, precision=precision)
            vectors = encoder.encode(self.texts, PARITY_BATCH_SIZE, progress=self.progress)
        except InputError as exc:  # our own file failed to load or run: a failure, not bad input
            raise RunFailure(f"the {precision} graph does not run: {exc}") from None
        sts_value = sts_spearman(encoder, self.sts, self.progress) if self.sts is not None else None
        report = judge(
            precision,
            row_cosines(vectors, self.reference),
            self.texts,
            self.gates,
            sts_spearman=sts_value,
            fp32_sts_spearman=self.fp32_sts,
            torch_sts_spearman=self.torch_sts,
        )
        if precision == "fp32":
            self.fp32_sts = sts_value
        return report

    def choose_fp32(self, candidates: list[OptimizedGraph]) -> tuple[OptimizedGraph, list[dict[str, Any]]]:
        """Write model.onnx from the first optimized graph that passes the fp32 gate; the ones refused."""
        rejected: list[dict[str, Any]] = []
        report = None
        for graph in candidates:
            shutil.copyfile(graph.path, self.stage / PRECISION_FILES["fp32"])
            self.say(f"checking fp32 parity ({graph.plan})")
            report = self.check("fp32")
            if report.passed:
                self.reports.append(report)
                return graph, rejected
            rejected.append({"plan": graph.plan, "min_cosine": round(report.min_cosine, 7)})
            self.say(f"fp32 ({graph.plan}) missed the gate: {report.summary()}")
        raise ParityFailure(f"parity gate failed: {report.summary()}", [*self.reports, report])

    def build_fp16(self) -> dict[str, Any]:
        """Write model_fp16.onnx with the first plan that passes the fp16 gate."""
        from embedkit.export.precision import FP16_PLANS, convert_fp16

        target = self.stage / PRECISION_FILES["fp16"]
        report, error = None, None
        for plan in FP16_PLANS:
            self.say(f"converting to fp16 ({plan.name}) and checking parity")
            try:
                kept = convert_fp16(self.stage / PRECISION_FILES["fp32"], target, plan)
                report = self.check("fp16")
            except RunFailure as exc:  # e.g. a conversion this onnxruntime cannot load: the next plan
                error = exc
                self.say(f"fp16 ({plan.name}): {exc}")
                continue
            if report.passed:
                self.reports.append(report)
                return {"plan": plan.name, "kept_fp32_nodes": kept}
        return self._fail(target, report, error)

    def build_int8(self, work: Path, chosen: OptimizedGraph, raw: Path) -> dict[str, Any]:
        """Write model_int8.onnx with the first plan that passes the int8 gate (checked on CPU)."""
        from embedkit.export.precision import INT8_PLANS, INT8_WEIGHTS, quantize_int8

        target = self.stage / PRECISION_FILES["int8"]
        prepared, source, shapes = self._quantizable_graph(work, chosen, raw)
        report, error = None, None
        for plan in INT8_PLANS:
            self.say(f"quantizing to int8 ({plan.name}) and checking parity")
            try:
                excluded = quantize_int8(prepared, target, plan)
                report = self.check("int8")
            except RunFailure as exc:
                error = exc
                self.say(f"int8 ({plan.name}): {exc}")
                continue
            if report.passed:
                self.reports.append(report)
                return {
                    "plan": plan.name,
                    "quantized_graph": source,
                    "shape_inference": shapes,
                    "per_channel": INT8_WEIGHTS.per_channel,
                    "weight_type": INT8_WEIGHTS.weight_type,
                    "reduce_range": INT8_WEIGHTS.reduce_range,
                    "kept_fp32_nodes": excluded,
                }
        return self._fail(target, report, error)

    def _fail(self, target: Path, report: ParityReport | None, error: RunFailure | None) -> NoReturn:
        """Every plan of a precision failed: raise with the last figures (or the last error)."""
        target.unlink(missing_ok=True)
        if report is None:
            raise RunFailure(str(error))
        raise ParityFailure(f"parity gate failed: {report.summary()}", [*self.reports, report])

    def _quantizable_graph(self, work: Path, chosen: OptimizedGraph, raw: Path) -> tuple[Path, str, str]:
        """The pre-processed graph to quantize: the optimized fp32 one, else the plain traced one.

        Quantizing the fused graph turns Attention into QAttention (the fast path). If this
        onnxruntime cannot pre-process or quantize it, the traced graph still quantizes every
        MatMul; which one was used is recorded in `embedkit.json`.
        """
        from embedkit.export.precision import INT8_PLANS, prepare_for_quantization, quantize_int8

        errors = []
        label = {"fusions": "fused", "basic": "basic"}.get(chosen.plan)
        candidates = [(label, self.stage / PRECISION_FILES["fp32"])] if label else []
        for source, graph in (*candidates, ("traced", raw)):
            prepared = work / f"int8_prepared_{source}.onnx"
            try:
                shapes = prepare_for_quantization(graph, prepared)
                quantize_int8(prepared, work / "int8_probe.onnx", INT8_PLANS[0])  # can it quantize at all?
                return prepared, source, shapes
            except RunFailure as exc:
                errors.append(f"{source} graph: {exc}")
                self.say(f"int8: the {source} graph cannot be quantized here, trying the next")
        raise RunFailure("; ".join(errors))
