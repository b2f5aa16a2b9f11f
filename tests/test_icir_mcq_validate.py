"""The validator catches each broken rule in a built folder, and the build refuses to publish."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import icir_mcq.sampling
from harness.cli import main
from icir_mcq.build import build_icir_mcq
from icir_mcq.features import icir_features
from icir_mcq.hub_folder import config_data_path, write_config
from icir_mcq.prompt import render_mcq_prompt
from icir_mcq.validate import ValidationFailed, validate_icir_mcq


def _mmniah(root: Path) -> Path:
    return root / "mm_niah" / "mm_niah_val" / "annotations" / "retrieval-image.jsonl"


@pytest.fixture(scope="module")
def valid_folders(toy_corpus, tmp_path_factory) -> dict[bool, Path]:
    """Valid 60-sample folders, without (False) and with (True) embedded images."""
    work = tmp_path_factory.mktemp("valid")
    folders = {}
    for embed in (False, True):
        folders[embed] = work / f"embed_{embed}"
        build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], folders[embed], samples=60, embed_images=embed)
    return folders


def _corrupt(folder: Path, tmp_path: Path, edit, config: str = "n5", embed: bool = False) -> list[str]:
    """Apply ``edit`` (mutates rows in place, or returns a new row list) to a copy; validate it."""
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    rows = pq.read_table(copy / config_data_path(config)).to_pylist()
    edited = edit(rows)
    write_config(copy, config, rows if edited is None else edited, icir_features(embed))
    return [str(v) for v in validate_icir_mcq(copy)]


def _rerender(row: dict) -> None:
    row["prompt"] = render_mcq_prompt(row["passages"], row["category"], row["options"])


def _first(change):
    """An edit that applies ``change`` to row 0 and re-renders its prompt, so that only the
    changed rule (not the prompt rendering) is broken."""
    def edit(rows):
        change(rows[0])
        _rerender(rows[0])
    return edit


def _repeat_option(row):
    row["options"][2], row["option_image_ids"][2] = row["options"][1], row["option_image_ids"][1]


def _no_eval(rows):
    for row in rows:
        row["probe_split"] = "train"


CASES = {
    "answer letter": (_first(lambda r: r.update(answer="ABCD"[(r["answer_index"] + 1) % 4])),
                      "does not match answer_index"),
    "target position": (_first(lambda r: r.update(target_position=(r["target_position"] + 1) % 5)),
                        "does not hold target_image_id"),
    "option text": (_first(lambda r: r["options"].__setitem__(0, r["options"][0] + " Indeed.")),
                    "option A is not a caption of image"),
    "repeated option": (_first(_repeat_option), "options or their images repeat"),
    "cattok span": (lambda rows: rows[0].update(cattok_char_span=[rows[0]["cattok_char_span"][0] - 1,
                                                                 rows[0]["cattok_char_span"][1]]),
                    "is not the final mention"),
    "altered passage": (_first(lambda r: r["passages"].__setitem__(1, r["passages"][1] + " More.")),
                        "passages are not the first 6 passages of"),
    "reversed passages": (_first(lambda r: r["passages"].reverse()), "passages are not the first 6 passages of"),
    "passage after the first six": (_first(lambda r: r["passages"].__setitem__(5, r["passages"][4])),
                                    "passages are not the first 6 passages of"),
    "prompt": (lambda rows: rows[0].update(prompt=rows[0]["prompt"].replace("\n<image>\n", "\n", 1)),
               "prompt is not the rendering"),
    "unknown context": (lambda rows: rows[0].update(mmniah_source_id="mm_niah_val:99999"), "is not in the MM-NIAH"),
    "image file": (lambda rows: rows[0]["image_files"].__setitem__(0, "val2017/000000000000.jpg"),
                   "is not its COCO file"),
    "dropped row": (lambda rows: rows[:-1], "59 rows, expected 60"),
    "balance": (lambda rows: rows[:-20] + rows[:20], "counts"),
    "duplicate id": (lambda rows: rows[1].update(id=rows[0]["id"]), "duplicate id"),
    "probe split": (_no_eval, "0 probe_split 'eval' rows, expected 12"),
    "bad probe split": (lambda rows: rows[3].update(probe_split="test"), "neither 'train' nor 'eval'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validator_reports_each_broken_rule(valid_folders, tmp_path, case):
    edit, expected = CASES[case]
    assert validate_icir_mcq(valid_folders[False]) == []
    messages = _corrupt(valid_folders[False], tmp_path, edit)
    assert any(expected in m for m in messages), messages


@pytest.fixture(scope="module")
def category_free_folder(toy_corpus, tmp_path_factory) -> Path:
    """A valid 60-sample folder built with the passage rule ``category_free``."""
    folder = tmp_path_factory.mktemp("category_free") / "icir"
    build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], folder, samples=60, embed_images=False,
                   passages="category_free")
    return folder


CATEGORY_FREE_CASES = {
    "altered passage": (CASES["altered passage"][0], "passages are not, in order"),
    "reversed passages": (CASES["reversed passages"][0], "passages are not, in order"),
    "passage naming the category": (_first(lambda r: r["passages"].__setitem__(0, f"About a {r['category']}.")),
                                    "passage names"),
}


@pytest.mark.parametrize("case", sorted(CATEGORY_FREE_CASES))
def test_validator_reports_each_broken_passage_rule_of_category_free(category_free_folder, tmp_path, case):
    edit, expected = CATEGORY_FREE_CASES[case]
    assert validate_icir_mcq(category_free_folder) == []
    messages = _corrupt(category_free_folder, tmp_path, edit)
    assert any(expected in m for m in messages), messages


def test_the_passage_rule_is_read_from_build_info(valid_folders, category_free_folder, tmp_path, capsys):
    """The validator checks the rule the folder was built with; a folder from before the option is
    ``category_free`` (the only rule then); an unknown rule is refused."""
    def with_info(folder: Path, name: str, change) -> Path:
        copy = tmp_path / name
        shutil.copytree(folder, copy)
        info = json.loads((copy / "build_info.json").read_text())
        change(info)
        (copy / "build_info.json").write_text(json.dumps(info))
        return copy

    assert validate_icir_mcq(with_info(category_free_folder, "older", lambda info: info.pop("passages"))) == []
    # The category_free folder read as fixed: its passages are not each context's first N+1.
    as_fixed = [str(v) for v in validate_icir_mcq(with_info(category_free_folder, "as_fixed",
                                                            lambda info: info.update(passages="fixed")))]
    assert as_fixed and all("passages are not the first" in m for m in as_fixed)
    unknown = with_info(valid_folders[False], "unknown", lambda info: info.update(passages="window"))
    assert main(["validate-mcq", str(unknown)]) == 2
    assert "unknown passage rule 'window' (known: fixed, category_free)" in capsys.readouterr().err


def test_distractor_annotated_with_the_category(valid_folders, tmp_path):
    def edit(rows):
        row = rows[0]
        intruder = next(i for i in row["option_image_ids"] if i != row["target_image_id"])
        row["image_ids"][(row["target_position"] + 1) % row["n_choices"]] = intruder

    messages = _corrupt(valid_folders[False], tmp_path, edit)
    assert any("not just the target" in m for m in messages), messages
    assert any(m.startswith("n5 row 0 (n5-00000)") for m in messages)


def test_embedded_bytes_must_be_the_coco_file(valid_folders, tmp_path):
    def edit(rows):
        rows[0]["images"][1]["bytes"] = rows[1]["images"][0]["bytes"] + b"x"

    messages = _corrupt(valid_folders[True], tmp_path, edit, embed=True)
    assert any("embedded bytes differ" in m for m in messages), messages


def test_card_must_declare_the_configs(valid_folders, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(valid_folders[False], copy)
    card = copy / "README.md"
    card.write_text(card.read_text().replace("config_name: n6", "config_name: n7"))
    assert [str(v) for v in validate_icir_mcq(copy)] == ["folder: README.md does not declare the configs ['n5', 'n6']"]


def test_validate_cli_exit_codes(valid_folders, tmp_path, capsys):
    assert main(["validate-mcq", str(valid_folders[True])]) == 0
    assert capsys.readouterr().out.strip() == f"0 violation(s) in {valid_folders[True]}"
    copy = tmp_path / "copy"
    shutil.copytree(valid_folders[False], copy)
    (copy / config_data_path("n6")).unlink()
    assert main(["validate-mcq", str(copy)]) == 1
    assert "test-00000-of-00001.parquet is missing" in capsys.readouterr().out
    assert main(["validate-mcq", str(tmp_path / "nothing")]) == 2
    (copy / "build_info.json").write_text("{not json")
    assert main(["validate-mcq", str(copy)]) == 2
    assert "build_info.json is not the JSON object a build writes" in capsys.readouterr().err
    (copy / "build_info.json").write_text('{"configs": ["n5"]}')
    assert main(["validate-mcq", str(copy)]) == 2
    assert "build_info.json lacks coco_root, mmniah_files, samples" in capsys.readouterr().err


def test_build_refuses_to_publish_a_folder_with_violations(toy_corpus, tmp_path, monkeypatch):
    monkeypatch.setattr(icir_mcq.sampling, "cattok_char_span", lambda prompt, category: (0, 1))
    out = tmp_path / "out"
    with pytest.raises(ValidationFailed, match=r"the built folder has 240 violation\(s\); nothing was published") as err:
        build_icir_mcq(toy_corpus / "coco", [_mmniah(toy_corpus)], out, samples=120, embed_images=False)
    assert len(err.value.violations) == 240 and "cattok_char_span [0, 1]" in str(err.value)
    assert not out.exists() and list(tmp_path.iterdir()) == []
