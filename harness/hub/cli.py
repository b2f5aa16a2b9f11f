"""``icir publish FOLDER --repo-id ORG/NAME``: a built ICIR-MCQ or VHs folder as a Hub benchmark dataset.

The upload is staged first, in a temporary folder (or, with ``--dry-run DIR``, in ``DIR`` and
nothing is uploaded)::

    README.md                         the build's card, its YAML front matter completed for the Hub
    <config>/test-00000-of-00001.parquet   every data file the card's ``configs`` names, as built
    eval.yaml                         the benchmark declaration (Hub evaluation results)

then `huggingface_hub.HfApi.create_repo` (``repo_type="dataset"``, ``exist_ok=True``) and
`~huggingface_hub.HfApi.upload_folder` push it, so that ``datasets.load_dataset("ORG/NAME", "n5")``
reads what ``datasets.load_dataset(FOLDER, "n5")`` reads. The card keeps the build's ``configs``
and ``dataset_info`` and gets license, language, task categories, tags and size category; an
ICIR-MCQ folder of several configs also gets the config ``all`` (every config's rows), which the
pooled benchmark tasks use. ``build_info.json`` and the build marker stay local: they record
paths of this machine and are not read from the Hub.

``eval.yaml`` follows https://huggingface.co/docs/hub/eval-results: ``name``, ``description``,
``evaluation_framework`` and ``tasks`` (``id``, ``config``, ``split``), one task per metric and
config (`harness.hub.eval_results.benchmark_tasks`), the task ids that ``icir submit
--eval-results`` writes. huggingface_hub ships no ``eval.yaml`` model, so `check_eval_yaml`
checks the documented fields.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.hub.eval_results import extend_submit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``icir publish``, and ``--eval-results`` to ``icir submit`` (`harness.hub.eval_results.extend_submit`)."""
    parser = subparsers.add_parser(
        "publish", help="upload a built ICIR-MCQ or VHs folder as a Hub benchmark dataset",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, metavar="FOLDER",
                        help="a folder built by icir build-mcq or icir build-vhs")
    parser.add_argument("--repo-id", required=True, metavar="ORG/NAME", help="the Hub dataset repo (created if needed)")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--revision", metavar="BRANCH", default=None,
                        help="commit to this branch (created if needed; default main)")
    parser.add_argument("--dry-run", type=Path, metavar="DIR", default=None,
                        help="write the staged upload into DIR (a new folder) and upload nothing")
    parser.set_defaults(func=run_publish)
    extend_submit(subparsers)


def run_publish(args: argparse.Namespace) -> int:
    """``icir publish``: stage (and unless ``--dry-run``, upload) the folder; print where it went."""
    from harness.hub.publish import publish  # huggingface_hub's client and pyarrow: not for --help

    where = publish(args.folder, args.repo_id, private=args.private, revision=args.revision, dry_run=args.dry_run)
    if args.dry_run is not None:
        print(f"staged (nothing uploaded): {where}")
    else:
        print(f"published {args.folder} to https://huggingface.co/datasets/{args.repo_id}: {where}")
    return 0
