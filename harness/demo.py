"""``icir demo --out DIR``: the main job on the embedded default data, start to end.

Writes a demo-world toy corpus (rendered shapes in the COCO 2017 + MM-NIAH layout, plus Visual
Haystacks question files over its images), builds both ICIR-MCQ configs, the VHs folder and the text
needle folder (App. K) from it as the shipped demo model was trained to read them (the demo world,
passages cut to ``MAX_PASSAGE_CHARS``; its images are not the training world's), then runs ``icir eval`` with the
default model (the shipped demo model) on ``icir_mcq`` (discovery: the pointer ranking and the
writer probes), then on ``vhs_single_n{2,5,10}`` with that ranking and those probes (the paper's
transfer protocol, §4.3): lm-eval's tables with the head metrics, the protocol line, the top
pointer heads, and where the artifacts are; then a small ablation grid (``icir ablate``, VHs N=5)
on the demo model, and the text needle probe (App. K, ``text_needle``) on it. A tiny random Qwen3-VL
of the demo model's shape is evaluated the same way, so the leaderboard has a second entry, and
``icir compare`` sets the two rankings side by side (Table 4) and the demo model's image pointer
ranking beside its text ranking (Table 15). Both runs are submitted into ``OUT/leaderboard`` (the MTEB-like
``results/<org__model>/<revision>/`` layout), validated, a seeded sample of the demo model's
documents is re-run and compared (``icir leaderboard verify``), external retrievers (untrained
tiny CLIP and SigLIP, and the random Qwen3-VL as an embedder) are scored on the same VHs N=10
documents (``icir retrievers``, Table 2), and the static site is built into ``OUT/site``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.demo_model.pipeline import (
    DEMO_DEFAULTS,
    ablate_small_grid,
    build_demo_data,
    evaluate_text_needle,
    evaluate_two_stages,
    run_shown,
)

SECOND_ARCH, SECOND_MODEL, SECOND_SIDE = "qwen3_vl", "tiny-random-qwen3-vl", 64
VERIFY_DOCS = 20
RETRIEVER_SIZE = 10  # Table 2's haystack size


def run_demo(args: argparse.Namespace) -> int:
    """The whole demo (module docstring); the data only with ``--no-eval``."""
    build_demo_data(args)
    if args.no_eval:
        return 0
    import torch

    from harness.cli import main
    from harness.demo_model import default_model_path

    # The demo models are tiny: intra-op threads cost more in hand-offs than they save (30x on a
    # loaded 2-core machine), so the demo evaluates on one thread.
    torch.set_num_threads(1)
    print(f"\nThe default model is the shipped demo model ({default_model_path()}): a 4-layer x 6-head Qwen3-VL "
          "trained on another demo-world draw to find the image a question names; its training record is "
          "TRAINING.md in that folder.")
    code = (evaluate_two_stages(args, main, default_model_path(), []) or ablate_small_grid(args, main, default_model_path())
            or evaluate_text_needle(args, main, default_model_path()))
    if code:
        return code
    from harness.demo_model.architecture import DEMO_SIZES
    from harness.tiny_models import save_tiny

    # The demo model's L x H, so Table 4 (icir compare) can set the two rankings side by side.
    other = save_tiny(SECOND_ARCH, args.out / "models" / SECOND_MODEL, seed=0, overwrite=True,
                      num_hidden_layers=DEMO_SIZES.num_hidden_layers, num_attention_heads=DEMO_SIZES.num_attention_heads,
                      num_key_value_heads=DEMO_SIZES.num_key_value_heads, head_dim=DEMO_SIZES.head_dim)
    print(f"\nA second leaderboard entry: a tiny random {SECOND_ARCH} ({other}), untrained, on the same data "
          f"at {SECOND_SIDE} px images (a declared deviation):")
    code = evaluate_two_stages(args, main, other, [f"image_budget={SECOND_SIDE}"])
    if code:
        return code
    from harness.model_names import model_name

    print("\nCross-model ranking similarity (Table 4): the trained demo model against the random one; "
          "image vs text retrieval heads of the demo model (Table 15):")
    runs = [str(args.out / "eval" / model_name(m)) for m in (default_model_path(), other)]
    return run_shown(["compare", *runs], main) or _leaderboard(args, main, [default_model_path(), other])


def _leaderboard(args: argparse.Namespace, main, models: list[Path]) -> int:
    """Submit every model's run, validate each, verify a sample of the demo model's, build the site."""
    from harness.model_names import model_name
    from harness.leaderboard.entries import verification_path
    from icir_common import atomic_output_dir

    board = args.out / "leaderboard"
    with atomic_output_dir(board, overwrite=True, kind="demo-leaderboard"):
        pass  # a fresh, empty leaderboard each run (only a previous demo's is replaced)
    for model in models:
        code = run_shown(["submit", str(args.out / "eval" / model_name(model)), "--leaderboard", str(board),
                           "--submitter", "icir demo"], main)
        if code:
            return code
    print("\nThe leaderboard checks every number of a submission against its per-document records:")
    keys = sorted(str(p.parent.relative_to(board / "results")) for p in (board / "results").rglob("submission.json"))
    for key in keys:
        code = run_shown(["leaderboard", "validate", str(board / "results" / key)], main)
        if code:
            return code
    demo_key = next(key for key in keys if key.startswith(model_name(models[0]) + "/"))
    print("\nA reviewer with the weights re-runs a seeded sample of documents and compares them:")
    metadata = json.dumps({"icir_mcq_data": str(args.out / "icir_mcq"), "vhs_data": str(args.out / "vhs")})
    code = run_shown(["leaderboard", "verify", str(board / "results" / demo_key), "--docs", str(VERIFY_DOCS),
                       "--device", "cpu", "--metadata", metadata, "--record", str(verification_path(board, demo_key)),
                       "--model_args", f"pretrained={models[0]}"], main)
    if code:
        return code
    code = _retrievers(args, main, models, board)
    if code:
        return code
    return run_shown(["leaderboard", "build", str(board), "--out", str(args.out / "site")], main)


def _retrievers(args: argparse.Namespace, main, models: list[Path], board: Path) -> int:
    """Table 2: untrained tiny CLIP and SigLIP and the tiny random Qwen3-VL as a VLM embedder,
    on the VHs N=10 documents of both runs, beside each run's single pointer head."""
    from harness.model_names import model_name
    from harness.tiny_models.retrievers import save_tiny_retriever

    stand_ins = {kind: save_tiny_retriever(kind, args.out / "models" / f"tiny-random-{kind}", seed=0, overwrite=True)
                 for kind in ("clip", "siglip")}
    print("\nExternal retrievers on the same VHs documents (Table 2). Untrained tiny stand-ins for CLIP, SigLIP "
          "and Qwen3-VL-Embedding (the random Qwen3-VL), so expect chance; point --retriever at real checkpoints:")
    return run_shown(["retrievers", *(str(args.out / "eval" / model_name(m)) for m in models),
                      "--retriever", f"clip={stand_ins['clip']}", "--retriever", f"siglip={stand_ins['siglip']}",
                      "--retriever", f"qwen3vl-embedding={models[1]}", "--tasks", f"vhs_single_n{RETRIEVER_SIZE}",
                      "--metadata", json.dumps({"vhs_data": str(args.out / "vhs")}), "--device", "cpu",
                      "--output_path", str(args.out / "eval" / "retrievers"), "--leaderboard", str(board)], main)


def register(subparsers) -> None:
    """Add ``demo`` to the ``icir`` command."""
    demo = subparsers.add_parser("demo", help="the whole job on the toy data: build, evaluate, ablate, compare, "
                                              "submit, verify, build the leaderboard")
    demo.add_argument("--out", type=Path, default=Path("demo_out"), help="output folder (default demo_out)")
    demo.add_argument("--images", type=int, default=DEMO_DEFAULTS["images"],
                      help=f"toy corpus images (default {DEMO_DEFAULTS['images']})")
    demo.add_argument("--samples", type=int, default=DEMO_DEFAULTS["samples"],
                      help=f"samples per ICIR-MCQ config (default {DEMO_DEFAULTS['samples']})")
    demo.add_argument("--vhs-questions", type=int, default=DEMO_DEFAULTS["vhs_questions"],
                      help=f"VHs questions per haystack size (default {DEMO_DEFAULTS['vhs_questions']})")
    demo.add_argument("--seed", type=int, default=DEMO_DEFAULTS["seed"])
    demo.add_argument("--max-gen-toks", type=int, default=None,
                      help="VHs answer length cap (default: the task's, decoding stops at the first yes/no)")
    demo.add_argument("--no-eval", action="store_true", help="build the folders only")
    demo.set_defaults(func=run_demo)
