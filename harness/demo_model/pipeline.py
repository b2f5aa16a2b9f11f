"""The demo's data and runs on it: what ``icir demo`` and ``icir demo-model eval --out`` share.

`build_demo_data` writes a demo-world toy corpus (rendered shapes in the COCO 2017 + MM-NIAH
layout, plus Visual Haystacks question files over its images) and builds both ICIR-MCQ configs
and the VHs folder from it as the shipped demo model was trained to read them (the demo world,
passages cut to ``MAX_PASSAGE_CHARS``, passage rule ``DEMO_PASSAGES``). `evaluate_two_stages` runs ``icir eval`` on ``icir_mcq``
(discovery), then on ``vhs_single_n{2,5,10}`` with that run's ranking and probes (§4.3);
`ablate_small_grid` runs ``icir ablate`` on VHs N=5. `demo_grid` does all three for one model.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.constants import ARTIFACTS_FOLDER, ICIR_MCQ_GROUP

DEMO_VHS_SIZES = (2, 5, 10)
DISCOVERY_TASK = ICIR_MCQ_GROUP
TRANSFER_TASKS = tuple(f"vhs_single_n{n}" for n in DEMO_VHS_SIZES)
DEMO_DEFAULTS = {"images": 1000, "samples": 240, "vhs_questions": 40, "seed": 0}
# A quarter of the demo model's 24 heads, as the paper's top-100 is a tenth of 1,152 (App. I).
ABLATION_TASK, ABLATION_KS, ABLATION_TOP = "vhs_single_n5", "1,2,3", 6
NEEDLE_SAMPLES, NEEDLE_IMAGES = 40, 5  # the App. K text needle probe, demo-sized


def build_demo_data(args: argparse.Namespace) -> None:
    """Write ``OUT/toy``, ``OUT/icir_mcq`` and ``OUT/vhs`` (each replaced if present); print what was built."""
    # Imported here: `icir --help` should not pay for torch and datasets (the demo model's data module
    # and the builders need them) nor for the toy writers.
    from harness.demo_model.data import DEMO_PASSAGES, DEMO_WORLD, MAX_PASSAGE_CHARS
    from icir_mcq.build import build_icir_mcq
    from icir_mcq.cli import print_build_summary
    from icir_mcq.needle import build_text_needle
    from icir_mcq.toy import write_toy_corpus
    from vhs_adapter.build import build_vhs
    from vhs_adapter.toy_questions import write_toy_vhs_questions

    corpus = write_toy_corpus(args.out / "toy", args.images, seed=args.seed, overwrite=True, world=DEMO_WORLD)
    print(f"toy corpus: {corpus.n_images} images, {corpus.n_captions} captions, {corpus.n_contexts} "
          f"MM-NIAH contexts in {corpus.root}")
    summary = build_icir_mcq(corpus.coco_root, [corpus.mmniah_file], args.out / "icir_mcq", seed=args.seed,
                             samples=args.samples, overwrite=True, max_passage_chars=MAX_PASSAGE_CHARS,
                             passages=DEMO_PASSAGES)
    print_build_summary(summary)
    print(f'load it with: datasets.load_dataset("{summary.out}", "n5")')
    questions = write_toy_vhs_questions(corpus.coco_root, corpus.root, seed=args.seed, sizes=DEMO_VHS_SIZES,
                                        per_size=args.vhs_questions)
    vhs = build_vhs(questions.root, corpus.coco_root, args.out / "vhs", overwrite=True)
    print(vhs)
    print(f'load it with: datasets.load_dataset("{args.out / "vhs"}", "single_needle_n10")')
    print(build_text_needle(corpus.coco_root, [corpus.mmniah_file], args.out / "text_needle", seed=args.seed,
                            samples=NEEDLE_SAMPLES, n_images=NEEDLE_IMAGES, max_passage_chars=MAX_PASSAGE_CHARS,
                            overwrite=True))


def evaluate_text_needle(args: argparse.Namespace, main, model: Path) -> int:
    """The text needle probe (App. K) on `model`, into the same run folder as its ICIR-MCQ run."""
    print("\nText retrieval heads (App. K): attention mass on a numeric needle sentence where the answer is generated:")
    return run_shown(["eval", "--tasks", "text_needle", "--device", "cpu", "--batch_size", "1", "--model_args",
                      f"pretrained={model}", "--metadata", json.dumps({"text_needle_data": str(args.out / "text_needle")}),
                      "--output_path", str(args.out / "eval")], main)


def evaluate_two_stages(args: argparse.Namespace, main, model: Path, model_args: list[str]) -> int:
    """Both stages of the paper's protocol for `model`: ``icir_mcq``, then VHs with its heads (§4.3)."""
    from harness.model_names import model_name

    metadata = json.dumps({"icir_mcq_data": str(args.out / "icir_mcq"), "vhs_data": str(args.out / "vhs")})
    common = ["--device", "cpu", "--batch_size", "1", "--metadata", metadata, "--output_path", str(args.out / "eval")]
    base = [f"pretrained={model}", *model_args]
    code = run_shown(["eval", "--tasks", DISCOVERY_TASK, *common, "--model_args", ",".join(base)], main)
    if code:
        return code
    found = args.out / "eval" / model_name(model) / ARTIFACTS_FOLDER / DISCOVERY_TASK
    transfer = [
        "eval", "--tasks", ",".join(TRANSFER_TASKS), *common, "--model_args",
        ",".join([*base, f"heads_ranking={found / 'pointer_ranking.json'}", f"writer_probes={found / 'writer_probes'}"]),
    ]
    if args.max_gen_toks is not None:
        transfer += ["--gen_kwargs", f"max_gen_toks={args.max_gen_toks}"]
    print("\nVisual Haystacks with the heads found on ICIR-MCQ (the paper's transfer protocol, §4.3):")
    return run_shown(transfer, main)


def ablate_small_grid(args: argparse.Namespace, main, model: Path) -> int:
    """A small set-partition grid on VHs N=5 (§6): the demo model's 24 heads, so the top-6 sets and K <= 3."""
    from harness.model_names import model_name

    rankings = args.out / "eval" / model_name(model) / ARTIFACTS_FOLDER / DISCOVERY_TASK
    print("\nThe causal test (§6): zero the first K heads of each arm of the pointer/writer set partition, "
          "and K random heads (3 seeds), on VHs N=5:")
    return run_shown(["ablate", "--rankings", str(rankings), "--tasks", ABLATION_TASK, "--ks", ABLATION_KS,
                       "--top", str(ABLATION_TOP), "--device", "cpu", "--output_path", str(args.out / "eval"),
                       "--metadata", json.dumps({"vhs_data": str(args.out / "vhs")})], main)


def demo_grid(out: Path, model: Path) -> int:
    """The demo's data under `out`, `model` evaluated on it (both stages) and its small ablation grid:
    what ``icir demo-model eval --out`` adds to the known-answer figures; the exit code."""
    import torch

    from harness.cli import main

    torch.set_num_threads(1)
    args = argparse.Namespace(out=Path(out), max_gen_toks=None, **DEMO_DEFAULTS)
    build_demo_data(args)
    return evaluate_two_stages(args, main, Path(model), []) or ablate_small_grid(args, main, Path(model))


def run_shown(argv: list[str], main) -> int:
    """Print the ``icir`` command line, then run it; its exit code."""
    print("\n$ icir " + " ".join(arg if " " not in arg else f"'{arg}'" for arg in argv), flush=True)
    return main(argv)
