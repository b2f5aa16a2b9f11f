"""Faults found by trying the builders (project issue 19, "Builders" and "Question files").

Each case runs through ``harness.cli.main`` where possible and checks the one-line message, the
exit code 2, that no input file was touched and that nothing half-written is left beside --out.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness.cli import main
from icir_common import BUILD_MARKER
from vhs_adapter.toy_questions import write_toy_vhs_questions

REPO = Path(__file__).resolve().parents[1]
MMNIAH = Path("mm_niah/mm_niah_val/annotations/retrieval-image.jsonl")


# ---------------------------------------------------------------------------- helpers


def _snapshot(*roots: Path) -> dict[str, str]:
    """Every path under ``roots`` with the sha256 of its bytes (or its link target / 'dir')."""
    found = {}
    for root in roots:
        for path in sorted([root, *root.rglob("*")]):
            if path.is_symlink():
                found[str(path)] = "link:" + os.readlink(path)
            elif path.is_dir():
                found[str(path)] = "dir"
            else:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _leftovers(out: Path) -> list[str]:
    """Temporary siblings of ``out`` (``.NAME.tmp-*``, ``.NAME.old-*``)."""
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")) if out.parent.is_dir() else []


def _fails(argv: list[str], capsys, *fragments: str) -> str:
    """Run ``icir ARGV``; require exit 2 and one ``icir CMD: error:`` line holding ``fragments``."""
    capsys.readouterr()
    assert main(argv) == 2
    printed = capsys.readouterr().err
    assert "Traceback" not in printed, printed
    # tqdm progress bars share stderr (redrawn with \r); the error is the one last line.
    err = [line for line in re.split(r"[\r\n]", printed) if line.strip() and "|" not in line][-1].strip()
    assert err.startswith(f"icir {argv[0]}: error: "), printed
    assert printed.rstrip().endswith(err) and printed.count("error:") == 1, printed
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


def _mcq(coco: Path, mmniah: Path, out: Path, *extra: str) -> list[str]:
    return ["build-mcq", "--coco", str(coco), "--mmniah", str(mmniah), "--out", str(out), "--samples", "60",
            "--configs", "n5", *extra]


def _paths_build_fails(root: Path, tmp_path: Path, capsys, *fragments: str) -> str:
    """`_fails` of a ``--no-embed-images`` build-mcq of the corpus copy at `root`."""
    return _fails(_mcq(root / "coco", root / MMNIAH, tmp_path / "out", "--no-embed-images"), capsys, *fragments)


@pytest.fixture
def corpus(toy_corpus_copy) -> Path:
    """A private copy of the toy corpus, with its JPEG files."""
    return toy_corpus_copy(images=True)


@pytest.fixture
def vhs_qa(toy_coco_root, tmp_path) -> Path:
    """Toy VHs question files for N = 1, 2 and 5 over the shared toy corpus."""
    return write_toy_vhs_questions(toy_coco_root, tmp_path / "questions", sizes=(1, 2, 5), per_size=4).root


def _vhs(vhs: Path, coco: Path, out: Path, *extra: str) -> list[str]:
    return ["build-vhs", "--vhs", str(vhs), "--coco", str(coco), "--out", str(out), *extra]


def _edit(path: Path, edit, replace: bool = False) -> None:
    """Apply ``edit`` to the JSON in ``path``; with ``replace`` its result is the new content."""
    data = json.loads(path.read_text())
    result = edit(data)
    path.write_text(json.dumps(result if replace else data))


# ---------------------------------------------------------------------------- 1. --out vs inputs, markers


@pytest.mark.parametrize("where", ["coco", "corpus", "inside coco", "mmniah folder"])
def test_out_may_not_overlap_an_input_even_with_overwrite(corpus, capsys, where):
    coco, mmniah = corpus / "coco", corpus / MMNIAH
    out = {"coco": coco, "corpus": corpus, "inside coco": coco / "train2017", "mmniah folder": mmniah.parent}[where]
    before = _snapshot(corpus)
    relation = {"coco": "is the --coco", "corpus": "contains the --coco", "inside coco": "lies inside the --coco",
                "mmniah folder": "is the --mmniah"}[where]
    _fails(_mcq(coco, mmniah, out, "--overwrite"), capsys, f"--out {out} {relation} input", "choose an --out")
    assert _snapshot(corpus) == before
    assert _leftovers(out) == []


def test_build_vhs_out_may_not_be_the_question_folder(vhs_qa, toy_coco_root, capsys):
    before = _snapshot(vhs_qa)
    _fails(_vhs(vhs_qa, toy_coco_root, vhs_qa / "single_needle", "--overwrite"), capsys, "lies inside the --vhs input")
    _fails(_vhs(vhs_qa, toy_coco_root, vhs_qa, "--overwrite"), capsys, "is the --vhs input")
    assert _snapshot(vhs_qa) == before


def test_overwrite_replaces_only_an_earlier_build_of_the_same_kind(corpus, tmp_path, capsys):
    coco, mmniah = corpus / "coco", corpus / MMNIAH
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    _fails(_mcq(coco, mmniah, mine, "--overwrite", "--no-embed-images"), capsys, f"--out {mine} holds no {BUILD_MARKER}")
    assert (mine / "thesis.tex").read_text() == "precious"

    a_file = tmp_path / "afile"
    a_file.write_text("keep me")
    _fails(_mcq(coco, mmniah, a_file, "--overwrite", "--no-embed-images"), capsys, "exists and is not a folder")
    assert a_file.read_text() == "keep me" and _leftovers(a_file) == []

    toy = tmp_path / "toy"
    assert main(["toy-corpus", str(toy), "--images", "40", "--no-image-files", "--vhs-sizes", ""]) == 0
    _fails(_mcq(coco, mmniah, toy, "--overwrite", "--no-embed-images"), capsys, "holds a toy-corpus build, not an earlier icir_mcq build")
    assert (toy / "coco" / "annotations").is_dir()

    out = tmp_path / "out"
    assert main(_mcq(coco, mmniah, out, "--no-embed-images")) == 0
    assert json.loads((out / BUILD_MARKER).read_text()) == {"kind": "icir_mcq"}
    assert main(_mcq(coco, mmniah, out, "--no-embed-images", "--overwrite")) == 0
    assert _leftovers(out) == []


# ---------------------------------------------------------------------------- 2. paths leaving their root


@pytest.mark.parametrize("name", ["../../../secret/private.jpg", "/etc/passwd"])
@pytest.mark.parametrize("embed", [True, False])
def test_coco_file_name_outside_the_root_is_refused(corpus, tmp_path, capsys, name, embed):
    annotations = corpus / "coco" / "annotations" / "instances_train2017.json"
    _edit(annotations, lambda d: d["images"][3].update(file_name=name))
    before = _snapshot(corpus)
    out = tmp_path / "out"
    extra = () if embed else ("--no-embed-images",)
    _fails(_mcq(corpus / "coco", corpus / MMNIAH, out, *extra), capsys, str(annotations), "images[3]", repr(name))
    assert _snapshot(corpus) == before and not out.exists() and _leftovers(out) == []


@pytest.mark.parametrize("embed", [True, False])
def test_image_folder_symlinked_outside_the_root_is_refused(corpus, tmp_path, capsys, embed):
    coco = corpus / "coco"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(coco / "train2017", elsewhere)
    (coco / "train2017").symlink_to(elsewhere, target_is_directory=True)
    out = tmp_path / "out"
    extra = () if embed else ("--no-embed-images",)
    _fails(_mcq(coco, corpus / MMNIAH, out, *extra), capsys, "points outside", str(elsewhere))
    assert not out.exists() and _leftovers(out) == []


@pytest.mark.parametrize("image", ["/etc/passwd", "../secret.jpg", "train2017/../../secret.jpg"])
def test_vhs_image_path_outside_the_root_is_refused(vhs_qa, toy_coco_root, tmp_path, capsys, image):
    path = vhs_qa / "single_needle" / "VHs_large" / "visual_haystack_2.json"
    _edit(path, lambda d: d[1]["neg_image"].__setitem__(0, image))
    out = tmp_path / "out"
    _fails(_vhs(vhs_qa, toy_coco_root, out, "--sizes", "2", "--no-embed-images"), capsys, f"{path}: entry 1", repr(image))
    assert not out.exists() and _leftovers(out) == []


def test_vhs_image_symlinked_outside_the_root_is_refused(vhs_qa, corpus, tmp_path, capsys):
    coco = corpus / "coco"
    path = vhs_qa / "single_needle" / "VHs_large" / "visual_haystack_2.json"
    entries = json.loads(path.read_text())
    secret = tmp_path / "secret.jpg"
    shutil.copy(coco / entries[0]["pos_image"][0], secret)
    (coco / "train2017" / "sneaky.jpg").symlink_to(secret)
    entries[0]["pos_image"] = ["train2017/sneaky.jpg"]
    path.write_text(json.dumps(entries))
    out = tmp_path / "out"
    _fails(_vhs(vhs_qa, coco, out, "--sizes", "2"), capsys, f"{path}: entry 0", "points outside")
    assert not out.exists()


# ---------------------------------------------------------------------------- 6. VHs question files


@pytest.mark.parametrize("fault, message", [
    ("duplicate", "entry 2: duplicate of entry 0"),
    ("twice", "entry 1: image {image} is listed twice in neg_image"),
    ("two needles", "entry 1: a single-needle entry needs exactly one pos_image, found 2"),
    ("empty", "holds no entries"),
])
def test_bad_question_files_are_refused(vhs_qa, toy_coco_root, tmp_path, capsys, fault, message):
    path = vhs_qa / "single_needle" / "VHs_large" / "visual_haystack_5.json"
    entries = json.loads(path.read_text())
    image = entries[1]["neg_image"][0]
    if fault == "duplicate":
        entries[2] = entries[0]
    elif fault == "twice":
        entries[1]["neg_image"][1] = image
    elif fault == "two needles":
        entries[1]["pos_image"].append(entries[1]["neg_image"].pop())
    else:
        entries = []
    path.write_text(json.dumps(entries))
    out = tmp_path / "out"
    _fails(_vhs(vhs_qa, toy_coco_root, out, "--sizes", "5", "--no-embed-images"), capsys, str(path),
           message.format(image=image))
    assert not out.exists() and _leftovers(out) == []


@pytest.mark.parametrize("subset", ["../multi_needle", "VHs_tiny"])
def test_subset_must_be_a_toolkit_subset(vhs_qa, toy_coco_root, tmp_path, capsys, subset):
    out = tmp_path / "out"
    _fails(_vhs(vhs_qa, toy_coco_root, out, "--subset", subset), capsys, f"--subset {subset!r}", "VHs_large, VHs_small")
    assert not out.exists()


# ---------------------------------------------------------------------------- 7. COCO annotation files


def test_annotation_file_holding_a_list(toy_corpus_copy, tmp_path, capsys):
    root = toy_corpus_copy()
    path = root / "coco" / "annotations" / "instances_val2017.json"
    _edit(path, lambda d: d["images"], replace=True)
    _paths_build_fails(root, tmp_path, capsys, str(path),
           "the top level is a JSON list")


def _instances_categories(root: Path) -> list:
    return json.loads((root / "coco" / "annotations" / "instances_train2017.json").read_text())["categories"]


@pytest.mark.parametrize(
    ("file", "edit", "expected", "not_said"),
    [
        ("instances_train2017.json", lambda d, root: d["images"][5].update(id=d["images"][2]["id"]),
         ("is listed twice (images[2] and images[5])",), "another split"),
        ("captions_train2017.json", lambda d, root: d.update(categories=_instances_categories(root)),
         ("extra key 'categories'",), "KeyError"),
        ("instances_train2017.json", lambda d, root: d["annotations"][7].pop("category_id"),
         ("annotations[7]", "lacks key(s) category_id"), "KeyError"),
    ],
    ids=["duplicate id in one split", "extra key", "missing key"],
)
def test_annotation_file_errors_say_what_is_wrong(toy_corpus_copy, tmp_path, capsys, file, edit, expected, not_said):
    root = toy_corpus_copy()
    path = root / "coco" / "annotations" / file
    _edit(path, lambda d: edit(d, root))
    err = _paths_build_fails(root, tmp_path, capsys, str(path), *expected)
    assert not_said not in err


def test_duplicate_image_id_across_splits_names_both_files(toy_corpus_copy, tmp_path, capsys):
    root = toy_corpus_copy()
    train = root / "coco" / "annotations" / "instances_train2017.json"
    first = json.loads(train.read_text())["images"][0]["id"]
    val = root / "coco" / "annotations" / "instances_val2017.json"
    _edit(val, lambda d: d["images"][0].update(id=first))
    _paths_build_fails(root, tmp_path, capsys,
           f"{val}: image id {first} (images[0]) is also listed in {train}")




# ---------------------------------------------------------------------------- 8. options


def test_samples_hint_covers_every_config(toy_corpus, tmp_path, capsys):
    argv = ["build-mcq", "--coco", str(toy_corpus / "coco"), "--mmniah", str(toy_corpus / MMNIAH),
            "--out", str(tmp_path / "out"), "--samples", "20"]
    err = _fails(argv, capsys, "need a multiple of 60", "try 60")
    assert "12 or 24" not in err
    assert not (tmp_path / "out").exists()


def test_empty_categories_list_is_an_error(toy_corpus, tmp_path, capsys):
    _fails(_mcq(toy_corpus / "coco", toy_corpus / MMNIAH, tmp_path / "out", "--categories", ","), capsys,
           "--categories is empty")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------- 3. truncated JPEGs


def _truncate(path: Path) -> None:
    """Cut a JPEG inside its scan data (the header stays whole, so ``Image.verify()`` passes)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 3 // 4])


def test_truncated_jpeg_fails_the_build(corpus, tmp_path, capsys):
    for path in (corpus / "coco").glob("*2017/*.jpg"):
        _truncate(path)
    out = tmp_path / "out"
    _fails(_mcq(corpus / "coco", corpus / MMNIAH, out), capsys, "unreadable image file", "truncated")
    assert not out.exists() and _leftovers(out) == []


def test_truncated_jpeg_fails_build_vhs(vhs_qa, corpus, tmp_path, capsys):
    for path in (corpus / "coco").glob("*2017/*.jpg"):
        _truncate(path)
    out = tmp_path / "out"
    _fails(_vhs(vhs_qa, corpus / "coco", out, "--sizes", "2"), capsys, "unreadable image file", "truncated")
    assert not out.exists()


def test_truncated_embedded_jpeg_fails_validate_mcq(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_mcq(corpus / "coco", corpus / MMNIAH, out)) == 0
    shard = out / "n5" / "test-00000-of-00001.parquet"
    table = pq.read_table(shard)
    rows = table.to_pylist()
    victim = rows[0]["image_files"][0]
    _truncate(corpus / "coco" / victim)
    cut = (corpus / "coco" / victim).read_bytes()
    for row in rows:
        for image in row["images"]:
            if image["path"] == victim:
                image["bytes"] = cut
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), shard)
    capsys.readouterr()
    assert main(["validate-mcq", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "unreadable image file" in printed and victim in printed


# ---------------------------------------------------------------------------- 5. toy-corpus


@pytest.mark.parametrize("bad", [["--vhs-sizes", "0"], ["--vhs-sizes", "2", "--vhs-per-size", "3"]])
def test_toy_corpus_checks_every_option_before_writing(tmp_path, capsys, bad):
    out = tmp_path / "toy"
    _fails(["toy-corpus", str(out), "--images", "40", "--no-image-files", *bad], capsys)
    assert not out.exists() and _leftovers(out) == []
    assert main(["toy-corpus", str(out), "--images", "40", "--no-image-files", "--vhs-sizes", "1,2"]) == 0
    assert (out / "VHs_qa" / "single_needle" / "VHs_large" / "visual_haystack_2.json").is_file()


def test_toy_corpus_too_small_for_its_vhs_sizes_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "toy"
    _fails(["toy-corpus", str(out), "--images", "8", "--no-image-files", "--vhs-sizes", "50"], capsys,
           "cannot supply")
    assert not out.exists() and _leftovers(out) == []


# ---------------------------------------------------------------------------- 4. kills and OS errors


def _spawn_build(argv: list[str]) -> subprocess.Popen:
    code = "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen([sys.executable, "-c", code, *argv], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def _wait_for_tmp(out: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not any(name.startswith(f".{out.name}.tmp-") for name in _leftovers(out)):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_killed_build_is_cleaned_by_the_next_run_which_gives_identical_bytes(toy_corpus, tmp_path):
    coco, mmniah = toy_corpus / "coco", toy_corpus / MMNIAH
    out = tmp_path / "build" / "out"
    process = _spawn_build(_mcq(coco, mmniah, out))
    _wait_for_tmp(out, process)
    process.kill()
    process.wait()
    assert _leftovers(out)  # what kill -9 leaves: the temporary folder
    assert main(_mcq(coco, mmniah, out)) == 0
    assert _leftovers(out) == []
    reference = tmp_path / "reference" / "out"  # same name, so build_info.json is byte-identical too
    assert main(_mcq(coco, mmniah, reference)) == 0
    assert _tree(out) == _tree(reference)


def test_sigterm_leaves_nothing(toy_corpus, tmp_path):
    out = tmp_path / "out"
    process = _spawn_build(_mcq(toy_corpus / "coco", toy_corpus / MMNIAH, out))
    _wait_for_tmp(out, process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) != 0
    assert not out.exists() and _leftovers(out) == []


def test_out_under_a_file_is_one_line(toy_corpus, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    out = blocker / "sub" / "out"
    _fails(_mcq(toy_corpus / "coco", toy_corpus / MMNIAH, out, "--no-embed-images"), capsys, f"cannot build {out}",
           "Not a directory")
    assert blocker.read_text() == "x"


def test_disk_full_is_one_line_and_leaves_nothing(toy_corpus, tmp_path, capsys, monkeypatch):
    import icir_mcq.build

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(icir_mcq.build, "write_config", full)
    out = tmp_path / "new" / "out"
    _fails(_mcq(toy_corpus / "coco", toy_corpus / MMNIAH, out, "--no-embed-images"), capsys, f"cannot build {out}",
           "No space left on device")
    assert not (tmp_path / "new").exists()  # not even the parent folder it created


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_parent_is_one_line(toy_corpus, tmp_path, capsys):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        _fails(_mcq(toy_corpus / "coco", toy_corpus / MMNIAH, parent / "out", "--no-embed-images"), capsys,
               "Permission denied")
    finally:
        parent.chmod(0o700)
