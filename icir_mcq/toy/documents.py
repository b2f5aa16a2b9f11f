"""Synthetic MM-NIAH ``retrieval-image`` records: multi-paragraph web-like documents with images.

Mirrors one line of ``mm_niah_val/annotations/retrieval-image.jsonl`` (``docs/formats.md``): ``id``,
``images_list``, ``context`` with one literal ``<image>`` per image, ``question``, ``answer``
and ``meta``. Some segments between placeholders are empty (adjacent images) and some
sentences use shape words in their everyday sense ("the town square", "at the heart of"), so
the builder's passage handling is exercised as on the real documents: kept as they are under the
default passage rule, skipped under ``category_free`` (`icir_mcq.sampling`).
"""

from __future__ import annotations

import random

from icir_common import IMAGE_PLACEHOLDER as IMAGE

MIN_IMAGES, MAX_IMAGES = 3, 14
EMPTY_SEGMENT_P = 0.12
SHAPE_WORD_SENTENCE_P = 0.06

_SUBJECTS = ("The committee", "Our neighbour", "The new manager", "A local baker", "The author",
             "My grandmother", "The city council", "A small startup", "The museum", "The coach")
_VERBS = ("announced", "described", "reviewed", "postponed", "celebrated", "questioned",
          "explained", "rebuilt", "measured", "published")
_OBJECTS = ("the annual budget", "a recipe for rye bread", "the old railway bridge",
            "its plans for the summer", "a report on water quality", "the results of the survey",
            "a collection of letters", "the parking rules", "a guide to home brewing",
            "the history of the harbour")
_TAILS = ("after a long debate.", "in a short statement on Monday.", "to everyone's surprise.",
          "with the help of volunteers.", "for the third time this year.", "before the holidays.",
          "despite the rain.", "in great detail.", "without much fanfare.", "at the end of the week.")
_OPENERS = ("Here is what we learned.", "It was not the first attempt.", "Readers asked for more details.",
            "The weather did not cooperate.", "Prices have gone up since then.", "Nobody expected that.",
            "You can try this at home.", "The numbers speak for themselves.")
# Everyday uses of the toy category names and of COCO names (skipped under passage rule category_free).
_SHAPE_WORD_SENTENCES = (
    "The market moved to the town square last spring.",
    "At the heart of the problem is a lack of funding.",
    "She wore a diamond ring that belonged to her aunt.",
    "The hotel received a fifth star from the guide.",
    "Volunteers from the Red Cross handed out blankets.",
    "Follow the arrow painted on the wall to find the entrance.",
    "A circle of friends met every Thursday.",
    "Workers placed traffic cones around the pothole.",
    "He promised to turn over a new leaf.",
    "The meeting took place in an oval room.",
    "A person at the back asked about the schedule.",
    "The bus was late again this morning.",
)


def _sentence(rng: random.Random) -> str:
    if rng.random() < SHAPE_WORD_SENTENCE_P:
        return rng.choice(_SHAPE_WORD_SENTENCES)
    if rng.random() < 0.25:
        return rng.choice(_OPENERS)
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}"


def _segment(rng: random.Random) -> str:
    paragraphs = [" ".join(_sentence(rng) for _ in range(rng.randint(2, 4))) for _ in range(rng.randint(1, 3))]
    return "\n\n".join(paragraphs)


def make_record(rng: random.Random, record_id: int) -> dict:
    """One ``retrieval-image`` JSON object; ``context`` has between 3 and 14 ``<image>`` placeholders."""
    n_images = rng.randint(MIN_IMAGES, MAX_IMAGES)
    segments = ["" if rng.random() < EMPTY_SEGMENT_P else _segment(rng) for _ in range(n_images + 1)]
    context = f"\n{IMAGE}\n".join(segments)
    images = [f"obelics/{record_id:06d}_{k}.jpg" for k in range(n_images)]
    choices = [f"retrieval_choices/{record_id:06d}_{k}.jpg" for k in range(4)]
    answer = rng.randrange(4)
    needle_slot = rng.randrange(n_images)
    text_length = sum(len(segment.split()) for segment in segments)
    return {
        "id": record_id,
        "images_list": images + choices,
        "context": context,
        "question": "Which of the following images appears in the above document? "
        "Answer with the index of the image.\n" + "\n".join(f"{k}: {IMAGE}" for k in range(4)),
        "answer": answer,
        "meta": {
            "placed_depth": [round((needle_slot + 1) / (n_images + 1), 3)],
            "context_length": text_length + 256 * n_images,
            "context_length_text": text_length,
            "context_length_image": 256 * n_images,
            "num_images": n_images,
            "needles": [images[needle_slot]],
            "choices": None,
            "choices_image_path": choices,
        },
    }
