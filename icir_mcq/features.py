"""The ICIR-MCQ record schema (``datasets.Features``), shared by the folder writer and the builder."""

from __future__ import annotations

import datasets

FIELD_DOCS = {
    "id": "sample id, '<config>-<row>' (e.g. 'n5-00042')",
    "n_choices": "haystack size N: number of candidate images in the context",
    "images": "the N images in context order (embedded JPEG bytes, or only the relative path with --no-embed-images)",
    "image_ids": "COCO image ids of the N images, context order",
    "image_files": "image paths relative to the COCO root ('train2017/000000xxxxxx.jpg'), context order",
    "passages": "the N+1 MM-NIAH text passages, in document order, interleaved with the images",
    "category": "queried COCO category name",
    "category_id": "queried COCO category id",
    "options": "the four caption options A-D",
    "answer": "correct letter, one of A-D",
    "answer_index": "0-based index of the correct option",
    "target_position": "0-based position of the target image among the N images",
    "target_image_id": "COCO id of the target image (the only one annotated with the category)",
    "option_image_ids": "COCO image id whose caption each option is",
    "prompt": "rendered prompt with one literal <image> placeholder per image",
    "cattok_char_span": "[start, end) of the final category mention in prompt (inside option D): the cattok",
    "mmniah_source_id": "'<mm_niah folder>:<id>' of the MM-NIAH retrieval-image context the passages come from",
    "probe_split": "'eval' (writer-probe evaluation pool) or 'train'",
}


def icir_features(embed_images: bool) -> datasets.Features:
    """Features of one ICIR-MCQ record, in the order of :data:`FIELD_DOCS`.

    With ``embed_images`` the images are ``Image()`` values (bytes + relative path) that decode
    to PIL images; without, ``Image(decode=False)`` values holding only the relative path, so
    rows load without the COCO files (resolve ``image_files`` against your COCO root).
    """
    int_list = datasets.List(datasets.Value("int64"))
    string_list = datasets.List(datasets.Value("string"))
    string, int32 = datasets.Value("string"), datasets.Value("int32")
    return datasets.Features({
        "id": string,
        "n_choices": int32,
        "images": datasets.List(datasets.Image(decode=embed_images)),
        "image_ids": int_list,
        "image_files": string_list,
        "passages": string_list,
        "category": string,
        "category_id": int32,
        "options": string_list,
        "answer": string,
        "answer_index": int32,
        "target_position": int32,
        "target_image_id": datasets.Value("int64"),
        "option_image_ids": int_list,
        "prompt": string,
        "cattok_char_span": datasets.List(int32, length=2),
        "mmniah_source_id": string,
        "probe_split": string,
    })
