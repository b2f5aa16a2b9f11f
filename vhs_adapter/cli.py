"""``icir build-vhs`` (the Visual Haystacks folder, see ``vhs_adapter.build``) and ``icir toy-corpus``.

``toy-corpus`` lives here, not in ``icir_mcq``, because it also writes VHs question files over the
toy images: `vhs_adapter` builds on `icir_mcq`, never the other way round.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from icir_mcq.cli import comma_list
from icir_mcq.toy.worlds import WORLDS
from vhs_adapter.haystack import DEFAULT_SEED
from vhs_adapter.question_files import DEFAULT_SIZES, DEFAULT_SUBSET, ORACLE, SUBSETS

VHS_FOLDER = "icir-vhs"  # the folder build-vhs writes by default, the name load_dataset reads locally


def _toy_corpus(args: argparse.Namespace) -> int:
    from icir_mcq.toy import write_toy_corpus
    from vhs_adapter.toy_questions import check_toy_vhs_options, write_toy_vhs_questions_into

    # Every option is checked before anything is written; the VHs question files are written into
    # the corpus' temporary folder, so the whole corpus appears at once or not at all.
    sizes = tuple(args.vhs_sizes)
    if sizes:
        check_toy_vhs_options(sizes, args.vhs_per_size)
    written = []

    def add_vhs(root: Path) -> None:
        written.append(write_toy_vhs_questions_into(root / "coco", root / "VHs_qa", seed=args.seed, sizes=sizes,
                                                    per_size=args.vhs_per_size))

    corpus = write_toy_corpus(args.out, args.images, seed=args.seed, image_files=not args.no_image_files,
                              overwrite=args.overwrite, world=args.world, finish=add_vhs if sizes else None)
    print(f"toy corpus in {corpus.root}: {corpus.n_train} train2017 + {corpus.n_val} val2017 images "
          f"({'with' if corpus.image_files else 'without'} image files), {corpus.n_instances} instances, "
          f"{corpus.n_captions} captions, {corpus.n_contexts} MM-NIAH contexts")
    print(f"  --coco {corpus.coco_root} --mmniah {corpus.mmniah_file}")
    if written:
        vhs = written[0]
        vhs.root = corpus.root / "VHs_qa"
        print(vhs)
        print(f"  --vhs {vhs.root} --coco {corpus.coco_root}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``toy-corpus`` and ``build-vhs`` subcommands to the ``icir`` parser."""
    toy = subparsers.add_parser("toy-corpus", help="write a toy COCO 2017 + MM-NIAH corpus of rendered shapes")
    toy.add_argument("out", type=Path, help="output folder (gets coco/ and mm_niah/)")
    toy.add_argument("--images", type=int, default=2000, help="number of images (default 2000)")
    toy.add_argument("--seed", type=int, default=0)
    toy.add_argument("--no-image-files", action="store_true", help="write annotations only, no JPEGs")
    toy.add_argument("--world", choices=sorted(WORLDS), default="standard",
                     help="standard: 17 categories, COCO-like partial captions (default); demo: the demo model's "
                          "world, 9 categories each in its own colour, distinct per image, one caption per shape "
                          "naming it and the background")
    toy.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    toy.add_argument("--vhs-sizes", type=_toy_sizes, default=[1, 2, 3, 5, 10],
                     help="haystack sizes N of the Visual Haystacks question files written into OUT/VHs_qa "
                          "(comma list, default 1,2,3,5,10; empty for none)")
    toy.add_argument("--vhs-per-size", type=int, default=20, help="VHs questions per file (even; default 20)")
    toy.set_defaults(func=_toy_corpus)

    parser = subparsers.add_parser(
        "build-vhs",
        help="build seeded Visual Haystacks haystacks with anchor/target spans (parquet + card)",
        description="Read the VHs question files and COCO images; write single_needle_n{N} and "
        "multi_needle_n{N} configs loadable with datasets.load_dataset(OUT, CONFIG).",
    )
    parser.add_argument("--vhs", type=Path, required=True, help="the VHs_qa folder (or its parent)")
    parser.add_argument("--coco", type=Path, required=True, help="COCO 2017 root holding train2017/ and val2017/")
    parser.add_argument("--out", type=Path, default=Path(VHS_FOLDER),
                        help=f"output dataset folder, {VHS_FOLDER} by default (load_dataset({VHS_FOLDER!r}) reads it)")
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=_sizes,
        help=f"haystack sizes N, space- or comma-separated; 1 or '{ORACLE}' is the oracle file "
        f"(default: those of {','.join(map(str, DEFAULT_SIZES))} that have a file)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed for filler choice and order (default 42)")
    parser.add_argument("--subset", default=DEFAULT_SUBSET, help=f"single-needle subset folder, one of {', '.join(SUBSETS)} (default {DEFAULT_SUBSET})")
    parser.add_argument("--no-embed-images", action="store_true", help="store relative image paths, not image bytes")
    parser.add_argument("--skip-unparsable", action="store_true", help="skip questions matching no template")
    parser.add_argument("--limit", type=int, help="keep the first K entries of each question file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out folder")
    parser.set_defaults(func=_run)


def _toy_sizes(text: str) -> list[int]:
    try:
        return [int(n) for n in comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of haystack sizes: {text!r}") from None


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
