"""The benchmark's report printed: hardware and baseline, then every section it measured as a table."""

from __future__ import annotations

from typing import Any

from experiments.benchmark.layers import BASELINE

__all__ = ["print_report"]


def print_report(report: dict[str, Any]) -> None:
    """The report as tables on stdout: hardware, baseline, and each section measured."""
    print(
        f"hardware: {report['hardware'].get('gpu') or report['hardware']['cpu']} | device {report['device']}"
    )
    print(f"baseline: {BASELINE}")
    if "allocator" in report:
        _print_allocator(report["allocator"])
    _print_variants(report)
    _print_steps(report)
    d = report.get("data")
    if d:
        print(
            f"data path (batch {d['batch']}): per-batch crop/flip/normalize "
            f"{d['batched_images_per_s']:,.0f} images/s, "
            f"per-image transforms.v2 {d['per_image_v2_images_per_s']:,.0f} images/s, {d['speedup']:.1f}x"
        )


def _print_variants(report: dict[str, Any]) -> None:
    s = report["sizes"]
    if "variants" not in report:
        return
    print(
        f"\nattention sublayer forward+backward (B={s['batch']}, {s['grid']}x{s['grid']}, dim {s['dim']}, "
        f"{s['heads']} heads, dropout off)"
    )
    print(
        f"{'variant':16} {'fast path':10} {'ref ms':>9} {'fast ms':>9} {'floor ms':>9} {'speedup':>8} "
        f"{'/floor':>7} {'ref MB':>9} {'fast MB':>9} {'mem':>6}"
    )
    for r in report["variants"]:
        print(
            f"{r['variant']:16} {r['fast_path']:10} {r['reference_s'] * 1e3:9.1f} {r['fast_s'] * 1e3:9.1f} "
            f"{r['floor_s'] * 1e3:9.1f} {r['speedup']:7.2f}x {r['floor_ratio']:6.2f}x "
            f"{r['reference_peak_mb']:9.1f} {r['fast_peak_mb']:9.1f} {r['memory_ratio']:6.2f}"
        )
    print("floor: the output projection Linear(heads * dim, dim) alone, forward + backward")
    sc = report.get("scaling")
    if not sc:
        return
    print(f"\nquadratic layer, time vs tokens (B={s['scaling_batch']})")
    print(f"{'grid':>6} {'tokens':>7} {'ref ms':>10} {'fast ms':>10} {'speedup':>8}")
    for r in sc["rows"]:
        print(
            f"{r['grid']:>6} {r['tokens']:>7} {r['reference_s'] * 1e3:10.1f} {r['separable_s'] * 1e3:10.1f} "
            f"{r['reference_s'] / r['separable_s']:7.2f}x"
        )
    print(
        f"fitted exponent of time vs tokens: reference {sc['exponent']['reference']:.2f}, "
        f"fast {sc['exponent']['separable']:.2f}"
    )


def _print_steps(report: dict[str, Any]) -> None:
    t = report.get("training_step")
    if t:
        _print_quadratic_step(t)
    m = report.get("model_steps")
    if m:
        _print_model_steps(m)
    b = report.get("run_steps")
    if b:
        _print_run_steps(b)
    r = report.get("recording")
    if r:
        print(
            f"\nrecording the heads' dynamics (quadratic, {r['scale']}, batch {r['batch']}, float32, "
            f"alternated): {r['plain_images_per_s']:.1f} images/s plain, {r['recording_images_per_s']:.1f} "
            f"recording: {100 * r['cost']:+.2f}% time per step"
        )


def _print_quadratic_step(t: dict[str, Any]) -> None:
    off, paper, bf16 = t["dropout_off"], t["paper_dropout"], t["bf16"]
    print(
        f"\ntraining step of the quadratic model (batch {t['batch']}), images/s:\n"
        f"  attention dropout off: reference {off['reference']:.1f}, fast {off['auto']:.1f}, "
        f"{off['speedup']:.2f}x\n"
        f"  the paper's dropout 0.1: reference with one mask per image {paper['per_image_reference']:.1f}, "
        f"reference with one mask per step {paper['reference']:.1f}, fast (shared) {paper['auto']:.1f}, "
        f"{paper['speedup']:.2f}x against the per-image reference\n"
        f"  bf16 autocast against float32 (attention dropout {bf16['attn_dropout']}): {bf16['float32']:.1f} "
        f"-> {bf16['bf16']:.1f}, {bf16['speedup']:.2f}x"
    )


def _print_model_steps(m: dict[str, Any]) -> None:
    print(
        f"\ntraining step of every model at the {m['scale']} scale (batch {m['batch']}), images/s, "
        f"interleaved in one process; the default precision here: {m['default_precision']}; one "
        f"2048 x 2048 matrix product in it: {m['matmul_gflop_per_s']:.1f} GFLOP/s"
    )
    print(
        f"{'model':16} {'eager f32':>9} {'float32':>9} {'flushed':>8} {'ref f32':>9} {'vs ref':>7} "
        f"{'bf16':>9} {'bf16/f32':>9} {'GFLOP/img':>10} {'GFLOP/s':>9} {'of mm':>6}"
    )
    for r in m["rows"]:
        ref, vs_ref = r.get("reference_float32_images_per_s"), r.get("default_over_reference")
        print(
            f"{r['model']:16} {r['eager_float32_images_per_s']:9.1f} {r['float32_images_per_s']:9.1f} "
            f"{r['flush_speedup']:7.2f}x {_or_dash(ref, '9.1f')} {_or_dash(vs_ref, '6.2f', 'x')} "
            f"{r['bf16_images_per_s']:9.1f} {r['bf16_speedup']:8.2f}x "
            f"{r['gflop_per_image']:10.3f} {r['default_gflop_per_s']:9.1f} "
            f"{r['default_fraction_of_matmul']:6.0%}"
        )
    print(
        "eager f32: float32 with denormals computed; float32: as the runs compute it (denormals flushed to "
        "zero; 'flushed': its speed-up); ref f32: the reference computation of the attention, as the runs "
        "compute float32 ('vs ref': the default precision's step against it); GFLOP/s: in the default "
        "precision, from the counted FLOPs of the trained path (forward + backward); of mm: that rate "
        "over the matrix product's"
    )


def _print_run_steps(b: dict[str, Any]) -> None:
    print(
        f"\ntraining step of every model at the {b['scale']} scale (batch {b['batch']}), float32, images/s, "
        f"as a run sees it: one model at a time, {b['steps']} steps back to back on {b['threads']} threads, "
        f"freed memory kept; {b['rounds']} rounds"
    )
    print(f"{'model':16} {'auto':>15} {'reference':>15} {'auto/ref':>9} {'tiled':>15} {'tiled/ref':>9}")
    for r in b["rows"]:
        speeds = {impl: " ".join(f"{v:7.1f}" for v in values) for impl, values in r["images_per_s"].items()}
        print(
            f"{r['model']:16} {speeds['auto']:>15} {speeds.get('reference', '-'):>15} "
            f"{_or_dash(r['auto_over_reference'], '8.2f', 'x')} {speeds.get('tiled', '-'):>15} "
            f"{_or_dash(r.get('tiled_over_reference'), '8.2f', 'x')}"
        )
    print(
        "auto/ref: the best round of each; tiled: the tiled kernel where auto takes another path; the "
        "interleaved table above times one thread at a time"
    )


def _print_allocator(a: dict[str, Any]) -> None:
    print(
        f"\nfloat32 training steps at the {a['scale']} scale (batch {a['batch']}), images/s: glibc's "
        f"allocator settings, then freed memory kept (measured first in the process, one phase after the "
        f"other){'' if a['applied'] else ' -- not applied here: the C library is not glibc'}"
    )
    print(f"{'model':16} {'path':10} {'glibc':>9} {'kept':>9} {'speed-up':>9}")
    for r in a["rows"]:
        print(
            f"{r['model']:16} {r['path']:10} {r['default_allocator_images_per_s']:9.1f} "
            f"{r['kept_memory_images_per_s']:9.1f} {r['speedup']:8.2f}x"
        )


def _or_dash(value: float | None, spec: str, suffix: str = "") -> str:
    width = int(spec.split(".")[0])
    return "-".rjust(width + len(suffix)) if value is None else f"{value:{spec}}{suffix}"
