"""Write a Hub-style dataset folder: parquet shards per config plus a ``README.md`` card.

datasets 5.x reads such a folder with ``load_dataset(folder, config)`` (no loading script):
the card's YAML front matter declares ``configs`` (name + data_files) and ``dataset_info``
features. Both ICIR-MCQ and the Visual Haystacks adapter publish through this module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import datasets
import yaml
from importlib import resources

from icir_mcq.errors import UserInputError

SPLIT = "test"


@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``out``; rename it to ``out`` on success.

    On any exception the temporary folder is removed and ``out`` is left as it was, so a
    failed or killed build never leaves a half-written dataset behind.

    Raises:
        UserInputError: ``out`` exists and ``overwrite`` is False.
    """
    out = Path(out)
    if out.exists() and not overwrite:
        raise UserInputError(f"{out} already exists; pass --overwrite or choose another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def config_data_path(config: str, split: str = SPLIT) -> str:
    """Relative path of a config's single parquet shard, e.g. ``n5/test-00000-of-00001.parquet``."""
    return f"{config}/{split}-00000-of-00001.parquet"


def write_config(
    folder: Path, config: str, records: Iterable[dict], features: datasets.Features, split: str = SPLIT
) -> int:
    """Write ``records`` as the single parquet shard of ``config``; return the row count.

    Rows are written in the order given, so identical inputs give byte-identical files.
    ``features`` fixes the Arrow schema (an ``Image`` feature takes ``{"bytes", "path"}``).
    """
    dataset = datasets.Dataset.from_list(list(records), features=features)
    path = folder / config_data_path(config, split)
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(path))
    return len(dataset)


def render_card(
    template_name: str,
    configs: dict[str, datasets.Features],
    context: dict[str, str],
    split: str = SPLIT,
) -> str:
    """Render ``dataset_cards/<template_name>`` into a README.md with YAML front matter.

    ``configs`` maps config name to its features; the front matter lists each config's
    data_files and features in the form the Hub and ``load_dataset`` read. ``context``
    fills ``{placeholders}`` of the template body (``str.format`` syntax).
    """
    front = {
        "configs": [
            {"config_name": name, "data_files": [{"split": split, "path": config_data_path(name, split)}]}
            for name in configs
        ],
        "dataset_info": [
            {"config_name": name, "features": features._to_yaml_list()} for name, features in configs.items()
        ],
    }
    body = resources.files("dataset_cards").joinpath(template_name).read_text(encoding="utf-8")
    header = yaml.safe_dump(front, sort_keys=False, allow_unicode=True)
    return f"---\n{header}---\n\n{body.format(**context)}"
