"""Benchmark the full ICIR-MCQ build: 6,000 samples (n5 + n6) from a 120,000-image toy corpus.

The toy corpus is written with annotations only (no JPEGs) and the build runs with
``--no-embed-images``, so the figure measures annotation loading, sampling, writing and the
validator (which re-reads COCO), the parts that scale with COCO's size. Prints seconds per stage.

    python bench/build_icir.py [--images 120000] [--samples 3000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from icir_mcq.build import build_icir_mcq
from icir_mcq.toy import write_toy_corpus

TARGET_BUILD_SECONDS = 60.0


def main() -> None:
    """Write the toy corpus, build both configs from it, print seconds per stage (see module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=120_000)
    parser.add_argument("--samples", type=int, default=3000, help="per config")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="icir-bench-") as work:
        work = Path(work)
        start = time.perf_counter()
        corpus = write_toy_corpus(work / "toy", args.images, seed=args.seed, image_files=False)
        toy_seconds = time.perf_counter() - start

        start, cpu_start = time.perf_counter(), time.process_time()
        summary = build_icir_mcq(corpus.coco_root, [corpus.mmniah_file], work / "icir_mcq", seed=args.seed,
                                 samples=args.samples, embed_images=False)
        build_seconds, build_cpu = time.perf_counter() - start, time.process_time() - cpu_start

    print(f"toy corpus: {corpus.n_images} images, {corpus.n_instances} instances, {corpus.n_captions} captions, "
          f"{corpus.n_contexts} MM-NIAH contexts (annotations only)")
    print(f"{'stage':<26}{'seconds':>9}")
    print(f"{'toy corpus generation':<26}{toy_seconds:>9.1f}")
    for stage, seconds in summary.seconds.items():
        print(f"{stage:<26}{seconds:>9.1f}")
    rows = sum(summary.rows.values())
    verdict = "within" if build_seconds < TARGET_BUILD_SECONDS else "OVER"
    print(f"{'build total':<26}{build_seconds:>9.1f}   ({rows} samples; {verdict} the {TARGET_BUILD_SECONDS:.0f} s target, "
          f"{build_seconds / TARGET_BUILD_SECONDS:.2f} of it; {build_cpu:.1f} s of CPU time in this process)")


if __name__ == "__main__":
    main()
