"""``icir build-vhs``: build the Visual Haystacks dataset folder (see ``vhs_adapter.build``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vhs_adapter.haystack import DEFAULT_SEED
from vhs_adapter.question_files import DEFAULT_SIZES, DEFAULT_SUBSET, ORACLE


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``build-vhs`` subcommand to the ``icir`` parser."""
    parser = subparsers.add_parser(
        "build-vhs",
        help="build seeded Visual Haystacks haystacks with anchor/target spans (parquet + card)",
        description="Read the VHs question files and COCO images; write single_needle_n{N} and "
        "multi_needle_n{N} configs loadable with datasets.load_dataset(OUT, CONFIG).",
    )
    parser.add_argument("--vhs", type=Path, required=True, help="the VHs_qa folder (or its parent)")
    parser.add_argument("--coco", type=Path, required=True, help="COCO 2017 root holding train2017/ and val2017/")
    parser.add_argument("--out", type=Path, required=True, help="output dataset folder")
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=_sizes,
        help=f"haystack sizes N, space- or comma-separated; 1 or '{ORACLE}' is the oracle file "
        f"(default: those of {','.join(map(str, DEFAULT_SIZES))} that have a file)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed for filler choice and order (default 42)")
    parser.add_argument("--subset", default=DEFAULT_SUBSET, help="single-needle subset folder (default VHs_large)")
    parser.add_argument("--no-embed-images", action="store_true", help="store relative image paths, not image bytes")
    parser.add_argument("--skip-unparsable", action="store_true", help="skip questions matching no template")
    parser.add_argument("--limit", type=int, help="keep the first K entries of each question file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    parser.set_defaults(func=_run)


def _sizes(text: str) -> list[int]:
    sizes = []
    for part in filter(None, text.split(",")):
        if part == ORACLE:
            sizes.append(1)
        elif part.isdigit() and int(part) >= 1:
            sizes.append(int(part))
        else:
            raise argparse.ArgumentTypeError(f"not a haystack size: {part!r}")
    return sizes


def _run(args: argparse.Namespace) -> int:
    from vhs_adapter.build import build_vhs  # imports datasets (seconds); not needed for --help

    sizes = sorted({size for group in args.sizes for size in group}) if args.sizes else None
    summary = build_vhs(
        args.vhs,
        args.coco,
        args.out,
        sizes=sizes,
        seed=args.seed,
        embed_images=not args.no_embed_images,
        skip_unparsable=args.skip_unparsable,
        limit=args.limit,
        subset=args.subset,
        overwrite=args.overwrite,
    )
    print(summary)
    return 0
