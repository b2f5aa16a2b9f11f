"""``icir build-mcq``, ``icir validate-mcq`` and ``icir build-needle`` (the App. K text needle probe)."""

from __future__ import annotations

import argparse
from pathlib import Path

from icir_mcq.sampling import PASSAGE_RULES

# The folders the builders write by default: the dataset names `load_dataset(NAME)` reads locally.
MCQ_FOLDER = "icir-mcq"
NEEDLE_FOLDER = "icir-needle"

MAX_PRINTED_VIOLATIONS = 50


def comma_list(text: str) -> list[str]:
    """The non-empty, stripped items of a comma-separated argument."""
    return [part.strip() for part in text.split(",") if part.strip()]


def print_build_summary(summary) -> None:
    """Rows per config, the categories left out and why, and seconds per stage."""
    for config, rows in summary.rows.items():
        report = summary.reports[config]
        used = [r for r in report if r.skipped_because is None]
        print(f"{config}: {rows} samples ({summary.eval_rows[config]} eval), {len(used)} categories")
        for r in report:
            if r.skipped_because is not None:
                print(f"  skipped {r.name!r} ({r.annotated_images} annotated images, {r.captioned_images} "
                      f"captioned, {r.matching_captions} naming captions): {r.skipped_because}")
    print("seconds: " + ", ".join(f"{stage} {sec:.1f}" for stage, sec in summary.seconds.items()))
    print(f"wrote {summary.out} (0 validator violations)")


def _build(args: argparse.Namespace) -> int:
    from icir_mcq.build import build_icir_mcq

    summary = build_icir_mcq(
        args.coco, args.mmniah, args.out, seed=args.seed, configs=args.configs, samples=args.samples,
        embed_images=not args.no_embed_images, max_passage_chars=args.max_passage_chars,
        categories=args.categories, overwrite=args.overwrite, passages=args.passages,
    )
    print_build_summary(summary)
    return 0


def _build_needle(args: argparse.Namespace) -> int:
    from icir_mcq.needle import build_text_needle

    print(build_text_needle(args.coco, args.mmniah, args.out, seed=args.seed, samples=args.samples,
                            n_images=args.images, embed_images=not args.no_embed_images,
                            max_passage_chars=args.max_passage_chars, overwrite=args.overwrite))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from icir_mcq.validate import validate_icir_mcq

    violations = validate_icir_mcq(args.folder, args.coco, args.mmniah)
    for violation in violations[:MAX_PRINTED_VIOLATIONS]:
        print(violation)
    if len(violations) > MAX_PRINTED_VIOLATIONS:
        print(f"... and {len(violations) - MAX_PRINTED_VIOLATIONS} more")
    print(f"{len(violations)} violation(s) in {args.folder}")
    return 1 if violations else 0


def register(subparsers) -> None:
    """Add ``build-mcq`` and ``validate-mcq`` to the ``icir`` command."""
    build = subparsers.add_parser("build-mcq", help="build the ICIR-MCQ folder from COCO 2017 and MM-NIAH")
    build.add_argument("--coco", type=Path, required=True, help="COCO 2017 root (annotations/, train2017/, val2017/)")
    build.add_argument("--mmniah", type=Path, nargs="+", required=True, help="MM-NIAH retrieval-image.jsonl file(s)")
    build.add_argument("--out", type=Path, default=Path(MCQ_FOLDER),
                       help=f"output folder, {MCQ_FOLDER} by default, so that load_dataset({MCQ_FOLDER!r}) reads it "
                            "from here (must not exist unless --overwrite)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--configs", type=comma_list, default=["n5", "n6"], help="comma list of n<N> (default n5,n6)")
    build.add_argument("--samples", type=int, default=3000,
                       help="samples per config, a multiple of lcm(N, 4) (default 3000)")
    build.add_argument("--no-embed-images", action="store_true", help="store image file names only")
    build.add_argument("--max-passage-chars", type=int, default=None, help="cut passages to at most this length")
    build.add_argument("--categories", type=comma_list, default=None,
                       help="comma list of category names to query (default: every servable category)")
    build.add_argument("--passages", choices=PASSAGE_RULES, default=PASSAGE_RULES[0],
                       help="passage rule: fixed (default, the paper's §3.2: each MM-NIAH context's first N+1 "
                            "passages as they are) or category_free (a seeded run of N+1 passages that do not "
                            "name the category; docs/protocol.md)")
    build.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    build.set_defaults(func=_build)

    needle = subparsers.add_parser("build-needle", help="build the text needle-in-a-haystack folder (App. K)")
    needle.add_argument("--coco", type=Path, required=True, help="COCO 2017 root: the filler images")
    needle.add_argument("--mmniah", type=Path, nargs="+", required=True, help="MM-NIAH retrieval-image.jsonl file(s)")
    needle.add_argument("--out", type=Path, default=Path(NEEDLE_FOLDER),
                        help=f"output folder, {NEEDLE_FOLDER} by default (must not exist unless --overwrite)")
    needle.add_argument("--seed", type=int, default=0)
    needle.add_argument("--samples", type=int, default=300, help="records (default 300; the paper has 291)")
    needle.add_argument("--images", type=int, default=10, help="filler images per record (default 10)")
    needle.add_argument("--no-embed-images", action="store_true", help="store image file names only")
    needle.add_argument("--max-passage-chars", type=int, default=None, help="cut passages to at most this length")
    needle.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    needle.set_defaults(func=_build_needle)

    validate = subparsers.add_parser("validate-mcq", help="re-check an ICIR-MCQ folder against every rule")
    validate.add_argument("folder", type=Path)
    validate.add_argument("--coco", type=Path, default=None, help="COCO root (default: the one in build_info.json)")
    validate.add_argument("--mmniah", type=Path, nargs="+", default=None, help="MM-NIAH file(s) (default: build_info.json)")
    validate.set_defaults(func=_validate)
