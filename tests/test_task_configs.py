"""The per-size task YAMLs are generated from `harness.constants` and the committed ones match."""

from __future__ import annotations

import re

from harness.constants import ICIR_MCQ_TASKS, VHS_GROUPS, VOTE_KS
from harness.lm_eval_plugin import TASKS_DIR
from harness.tasks._generate_configs import HEADER, generated_configs, write_configs


def test_committed_task_yamls_equal_the_generated_ones():
    generated = generated_configs()
    for name, text in generated.items():
        assert (TASKS_DIR / name).read_text() == text, f"{name} differs: run python -m harness.tasks._generate_configs"
    stale = [p.name for p in TASKS_DIR.glob("*.yaml") if p.read_text().startswith(HEADER) and p.name not in generated]
    assert not stale


def test_every_task_of_the_lists_has_a_yaml_and_no_list_is_written_twice():
    names = {p.stem for p in TASKS_DIR.glob("*.yaml")}
    assert set(ICIR_MCQ_TASKS) | {t for tasks in VHS_GROUPS.values() for t in tasks} <= names
    for template in ("_icir_mcq_template.yaml", "_vhs_template.yaml"):
        text = (TASKS_DIR / template).read_text()
        assert not re.search(r"vote_r1@\d", text) and not re.search(r"_n\d", text)
    assert VOTE_KS == (1, 3, 5, 10, 20, 30)  # the paper's Ks (App. H, Figure 6)


def test_generator_writes_into_a_fresh_folder(tmp_path):
    paths = write_configs(tmp_path)
    assert sorted(p.name for p in paths) == sorted(generated_configs())
    (tmp_path / "vhs_single_n7.yaml").write_text(HEADER + "task: vhs_single_n7\n")  # a size since removed
    (tmp_path / "mine.yaml").write_text("task: mine\n")  # not generated: left alone
    write_configs(tmp_path)
    assert not (tmp_path / "vhs_single_n7.yaml").exists() and (tmp_path / "mine.yaml").exists()
