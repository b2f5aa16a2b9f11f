"""``icir demo --out DIR``: the main job on the embedded default data, start to end.

Writes a demo-world toy corpus (rendered shapes in the COCO 2017 + MM-NIAH layout, plus Visual
Haystacks question files over its images), builds both ICIR-MCQ configs and the VHs folder from it
as the shipped demo model was trained to read them (the demo world, passages cut to
``MAX_PASSAGE_CHARS``; its images are not the training world's), then runs ``icir eval`` with the
default model (the shipped demo model) on ``icir_mcq`` (discovery: the pointer ranking and the
writer probes), then on ``vhs_single_n{2,5,10}`` with that ranking and those probes (the paper's
transfer protocol, §4.3): lm-eval's tables with the head metrics, the protocol line, the top
pointer heads, and where the artifacts are. A tiny random Qwen3-VL is evaluated the same way, so
the leaderboard has a second entry. Both runs are submitted into ``OUT/leaderboard`` (the MTEB-like
``results/<org__model>/<revision>/`` layout), validated, a seeded sample of the demo model's
documents is re-run and compared (``icir leaderboard verify``), and the static site is built into
``OUT/site``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.constants import ARTIFACTS_FOLDER, ICIR_MCQ_GROUP
from icir_mcq.build import build_icir_mcq
from icir_mcq.cli import print_build_summary
from icir_mcq.toy import write_toy_corpus
from vhs_adapter.build import build_vhs
from vhs_adapter.toy_questions import write_toy_vhs_questions

DEMO_VHS_SIZES = (2, 5, 10)
DISCOVERY_TASK = ICIR_MCQ_GROUP
TRANSFER_TASKS = tuple(f"vhs_single_n{n}" for n in DEMO_VHS_SIZES)
SECOND_ARCH, SECOND_MODEL, SECOND_SIDE = "qwen3_vl", "tiny-random-qwen3-vl", 64
VERIFY_DOCS = 20
DEMO_DEFAULTS = {"images": 1000, "samples": 240, "vhs_questions": 40, "seed": 0}
# A quarter of the demo model's 24 heads, as the paper's top-100 is a tenth of 1,152 (App. I).
ABLATION_TASK, ABLATION_KS, ABLATION_TOP = "vhs_single_n5", "1,2,3", 6


def build_demo_data(args: argparse.Namespace) -> None:
    """Write ``OUT/toy``, ``OUT/icir_mcq`` and ``OUT/vhs`` (each replaced if present); print what was built."""
    # Imported here: `icir --help` should not pay for torch (the demo model's data module needs it).
    from harness.demo_model.data import DEMO_WORLD, MAX_PASSAGE_CHARS

    corpus = write_toy_corpus(args.out / "toy", args.images, seed=args.seed, overwrite=True, world=DEMO_WORLD)
    print(f"toy corpus: {corpus.n_images} images, {corpus.n_captions} captions, {corpus.n_contexts} "
          f"MM-NIAH contexts in {corpus.root}")
    summary = build_icir_mcq(corpus.coco_root, [corpus.mmniah_file], args.out / "icir_mcq", seed=args.seed,
                             samples=args.samples, overwrite=True, max_passage_chars=MAX_PASSAGE_CHARS)
    print_build_summary(summary)
    print(f'load it with: datasets.load_dataset("{summary.out}", "n5")')
    questions = write_toy_vhs_questions(corpus.coco_root, corpus.root, seed=args.seed, sizes=DEMO_VHS_SIZES,
                                        per_size=args.vhs_questions)
    vhs = build_vhs(questions.root, corpus.coco_root, args.out / "vhs", overwrite=True)
    print(vhs)
    print(f'load it with: datasets.load_dataset("{args.out / "vhs"}", "single_needle_n10")')


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
    code = _evaluate(args, main, default_model_path(), []) or _ablate(args, main, default_model_path())
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
    code = _evaluate(args, main, other, [f"image_budget={SECOND_SIDE}"])
    if code:
        return code
    from harness.model_names import model_name

    print("\nCross-model ranking similarity (Table 4): the trained demo model against the random one:")
    runs = [str(args.out / "eval" / model_name(m)) for m in (default_model_path(), other)]
    return _run_shown(["compare", *runs], main) or _leaderboard(args, main, [default_model_path(), other])


def _evaluate(args: argparse.Namespace, main, model: Path, model_args: list[str]) -> int:
    """Both stages of the paper's protocol for `model`: ``icir_mcq``, then VHs with its heads (§4.3)."""
    from harness.model_names import model_name

    metadata = json.dumps({"icir_mcq_data": str(args.out / "icir_mcq"), "vhs_data": str(args.out / "vhs")})
    common = ["--device", "cpu", "--batch_size", "1", "--metadata", metadata, "--output_path", str(args.out / "eval")]
    base = [f"pretrained={model}", *model_args]
    code = _run_shown(["eval", "--tasks", DISCOVERY_TASK, *common, "--model_args", ",".join(base)], main)
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
    return _run_shown(transfer, main)


def _ablate(args: argparse.Namespace, main, model: Path) -> int:
    """A small set-partition grid on VHs N=5 (§6): the demo model's 24 heads, so the top-6 sets and K <= 3."""
    from harness.model_names import model_name

    rankings = args.out / "eval" / model_name(model) / ARTIFACTS_FOLDER / DISCOVERY_TASK
    print("\nThe causal test (§6): zero the first K heads of each arm of the pointer/writer set partition, "
          "and K random heads (3 seeds), on VHs N=5:")
    return _run_shown(["ablate", "--rankings", str(rankings), "--tasks", ABLATION_TASK, "--ks", ABLATION_KS,
                       "--top", str(ABLATION_TOP), "--device", "cpu", "--output_path", str(args.out / "eval"),
                       "--metadata", json.dumps({"vhs_data": str(args.out / "vhs")})], main)


def _leaderboard(args: argparse.Namespace, main, models: list[Path]) -> int:
    """Submit every model's run, validate each, verify a sample of the demo model's, build the site."""
    from harness.model_names import model_name
    from harness.leaderboard.entries import verification_path
    from icir_common import atomic_output_dir

    board = args.out / "leaderboard"
    with atomic_output_dir(board, overwrite=True, kind="demo-leaderboard"):
        pass  # a fresh, empty leaderboard each run (only a previous demo's is replaced)
    for model in models:
        code = _run_shown(["submit", str(args.out / "eval" / model_name(model)), "--leaderboard", str(board),
                           "--submitter", "icir demo"], main)
        if code:
            return code
    print("\nThe leaderboard checks every number of a submission against its per-document records:")
    keys = sorted(str(p.parent.relative_to(board / "results")) for p in (board / "results").rglob("submission.json"))
    for key in keys:
        code = _run_shown(["leaderboard", "validate", str(board / "results" / key)], main)
        if code:
            return code
    demo_key = next(key for key in keys if key.startswith(model_name(models[0]) + "/"))
    print("\nA reviewer with the weights re-runs a seeded sample of documents and compares them:")
    metadata = json.dumps({"icir_mcq_data": str(args.out / "icir_mcq"), "vhs_data": str(args.out / "vhs")})
    code = _run_shown(["leaderboard", "verify", str(board / "results" / demo_key), "--docs", str(VERIFY_DOCS),
                       "--device", "cpu", "--metadata", metadata, "--record", str(verification_path(board, demo_key)),
                       "--model_args", f"pretrained={models[0]}"], main)
    if code:
        return code
    return _run_shown(["leaderboard", "build", str(board), "--out", str(args.out / "site")], main)


def demo_grid(out: Path, model: Path) -> int:
    """The demo's data under `out`, `model` evaluated on it (both stages) and its small ablation grid:
    what ``icir demo-model eval --out`` adds to the known-answer figures."""
    import torch

    from harness.cli import main

    torch.set_num_threads(1)
    args = argparse.Namespace(out=Path(out), max_gen_toks=None, **DEMO_DEFAULTS)
    build_demo_data(args)
    return _evaluate(args, main, Path(model), []) or _ablate(args, main, Path(model))


def _run_shown(argv: list[str], main) -> int:
    """Print the ``icir`` command line, then run it; its exit code."""
    print("\n$ icir " + " ".join(arg if " " not in arg else f"'{arg}'" for arg in argv), flush=True)
    return main(argv)

def register(subparsers) -> None:
    """Add ``demo`` to the ``icir`` command."""
    demo = subparsers.add_parser("demo", help="build the toy ICIR-MCQ and VHs folders and evaluate the default model on them")
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
