"""`icir eval` refuses bad input with a clear `UserInputError` (exit status 2), before long computation."""

from __future__ import annotations

import argparse

import pytest
import transformers
from PIL import Image

from lm_eval_helpers import icir_args

from harness.cli import main as icir_main
from harness.eval_cli import run as eval_run
from harness.tasks.utils import load_icir_mcq
from icir_common import UserInputError

pytestmark = pytest.mark.slow


def _eval(*argv: str) -> None:
    eval_run(argparse.Namespace(lm_eval_args=list(argv)))


def test_missing_dataset_folder(shared, monkeypatch, tmp_path):
    monkeypatch.delenv("ICIR_MCQ_DATA", raising=False)
    base = ["--tasks", "icir_mcq_n5", "--device", "cpu", "--model_args", f"pretrained={shared / 'model'}"]
    with pytest.raises(UserInputError, match=r"no icir_mcq dataset folder given: pass --metadata icir_mcq_data=DIR"
                                             r" to `icir eval`/lm-eval, or set ICIR_MCQ_DATA"):
        _eval(*base)
    missing = tmp_path / "no_such_folder"
    with pytest.raises(UserInputError, match=f"icir_mcq dataset folder {missing} not found"):
        _eval(*base, "--metadata", f"icir_mcq_data={missing}")
    # Checked before the model loads: a model folder that does not exist is never reached.
    no_model = ["--tasks", "vhs_single_n5", "--device", "cpu", "--model_args", f"pretrained={tmp_path / 'no_model'}"]
    monkeypatch.delenv("ICIR_VHS_DATA", raising=False)
    with pytest.raises(UserInputError, match=r"no vhs dataset folder given: pass --metadata vhs_data=DIR"):
        _eval(*no_model)


def test_unsupported_architecture(shared, tmp_path):
    text_only = tmp_path / "llama"
    transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, vocab_size=64).save_pretrained(text_only)
    with pytest.raises(UserInputError, match=r"is a model_type 'llama', which transformers' "
                                             r"AutoModelForImageTextToText cannot build"):
        _eval("--tasks", "icir_mcq_n5", "--model_args", f"pretrained={text_only}",
              "--metadata", f"icir_mcq_data={shared / 'mcq'}")
    # An LVLM whose images enter through cross-attention: refused with the reason, before its weights load.
    cross = tmp_path / "mllama"
    transformers.AutoConfig.for_model("mllama").save_pretrained(cross)
    with pytest.raises(UserInputError, match=r"mllama.*: images enter the decoder through cross-attention"):
        _eval("--tasks", "icir_mcq_n5", "--model_args", f"pretrained={cross}",
              "--metadata", f"icir_mcq_data={shared / 'mcq'}")


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("icir_mcq_n55", "did you mean icir_mcq_n5 or icir_mcq_n6 or icir_mcq"),
        ("vhs_singel_n10", "did you mean vhs_single_n10 or vhs_single_n100 or vhs_single_n1"),
    ],
)
def test_task_name_typo(capsys, typo, suggestion):
    assert icir_main(["eval", "--tasks", typo]) == 2
    assert capsys.readouterr().err == f"icir eval: error: unknown task {typo!r}; {suggestion}?\n"


def test_folder_without_embedded_images_needs_the_coco_root(shared, monkeypatch):
    monkeypatch.delenv("ICIR_COCO_ROOT", raising=False)
    with pytest.raises(UserInputError, match="--metadata coco_root=DIR or set ICIR_COCO_ROOT"):
        load_icir_mcq("n5", icir_mcq_data=str(shared / "mcq_paths"))
    coco = shared / "toy" / "coco"
    paths = load_icir_mcq("n5", icir_mcq_data=str(shared / "mcq_paths"), coco_root=str(coco))["test"]
    embedded = load_icir_mcq("n5", icir_mcq_data=str(shared / "mcq"))["test"]
    for row in (0, 7):
        assert paths[row]["prompt"] == embedded[row]["prompt"]
        files = [Image.open(coco / name).tobytes() for name in paths[row]["image_files"]]
        assert [im.tobytes() for im in paths[row]["images"]] == files
        assert [im.tobytes() for im in embedded[row]["images"]] == files
    with pytest.raises(UserInputError, match="has no config 'n7'"):
        load_icir_mcq("n7", icir_mcq_data=str(shared / "mcq"))


@pytest.mark.parametrize(("flags", "message"), [
    (("--use_cache", "CACHE"), "--use_cache answers documents from lm-eval's response cache, which holds no head captures"),
    (("--wandb_args", "project=icir"), "--wandb_args: icir eval does not log the head metrics through lm-eval's loggers"),
    (("--trackio_args", "project=icir"), "--trackio_args: icir eval does not log the head metrics"),
])
def test_flags_that_would_drop_the_head_metrics_are_refused_before_the_model_loads(shared, tmp_path, capsys, monkeypatch,
                                                                                   flags, message):
    """A run answered from lm-eval's response cache reported ``acc`` alone; logger flags were ignored."""
    import harness.lm_eval_plugin.model as plugin

    monkeypatch.setattr(plugin.HFMultimodalHeadsLM, "_create_model", lambda *a, **k: pytest.fail("model loaded"))
    flags = tuple(str(tmp_path / "cache") if flag == "CACHE" else flag for flag in flags)
    assert icir_main(icir_args(shared, tmp_path / "out", *flags)) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("icir eval: error: ") and message in error
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()
