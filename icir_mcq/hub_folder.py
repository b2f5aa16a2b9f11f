"""Write a Hub-style dataset folder: parquet shards per config plus a ``README.md`` card.

datasets 5.x reads such a folder with ``load_dataset(folder, config)`` (no loading script):
the card's YAML front matter declares ``configs`` (name + data_files) and ``dataset_info``
features. Both ICIR-MCQ and the Visual Haystacks adapter publish through this module.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

SPLIT = "test"
# Small row groups keep image-heavy shards streamable (the Hub viewer reads one group at a time).
ROWS_PER_GROUP = 100


def config_data_path(config: str, split: str = SPLIT) -> str:
    """Relative path of a config's single parquet shard, e.g. ``n5/test-00000-of-00001.parquet``."""
    return f"{config}/{split}-00000-of-00001.parquet"


def write_config(
    folder: Path,
    config: str,
    records: Iterable[dict],
    features: datasets.Features,
    split: str = SPLIT,
    rows_per_group: int = ROWS_PER_GROUP,
) -> int:
    """Stream ``records`` into the single parquet shard of ``config``; return the row count.

    Rows are encoded with ``features`` (an ``Image`` feature takes ``{"bytes", "path"}``) and
    written ``rows_per_group`` at a time as parquet row groups, so memory stays bounded by one
    group even when images are embedded (a real ICIR-MCQ build embeds several GB). The schema
    carries datasets' ``huggingface`` metadata, as ``Dataset.to_parquet`` writes it. Rows keep the
    order given, so identical inputs give byte-identical files.
    """
    path = folder / config_data_path(config, split)
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = features.arrow_schema
    n_rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        records = iter(records)
        while rows := [features.encode_example(record) for record in itertools.islice(records, rows_per_group)]:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            n_rows += len(rows)
    return n_rows


def render_card(
    template_name: str,
    configs: dict[str, datasets.Features],
    context: dict[str, str],
    split: str = SPLIT,
    metadata: dict | None = None,
) -> str:
    """Render ``dataset_cards/<template_name>`` into a README.md with YAML front matter.

    ``configs`` maps config name to its features; the front matter lists each config's
    data_files and features in the form the Hub and ``load_dataset`` read (the first config is the
    ``default``, the one ``load_dataset(folder)`` loads without a config name), after the optional
    Hub card ``metadata`` (``license``, ``pretty_name``, ``task_categories``...). ``context``
    fills ``{placeholders}`` of the template body (``str.format`` syntax).
    """
    front = {
        **(metadata or {}),
        "configs": [
            {"config_name": name, "data_files": [{"split": split, "path": config_data_path(name, split)}],
             **({"default": True} if index == 0 else {})}
            for index, name in enumerate(configs)
        ],
        "dataset_info": [
            {"config_name": name, "features": features._to_yaml_list()} for name, features in configs.items()
        ],
    }
    body = resources.files("dataset_cards").joinpath(template_name).read_text(encoding="utf-8")
    header = yaml.safe_dump(front, sort_keys=False, allow_unicode=True)
    return f"---\n{header}---\n\n{body.format(**context)}"
