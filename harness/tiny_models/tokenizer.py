"""Byte-level BPE tokenizers trained on the spot for the tiny test models.

Real LVLM checkpoints ship tokenizers of 100k-260k tokens; the tiny models only need one that
behaves like them: byte-level (every string is encodable, offsets map back to characters), a few
hundred merges, the architecture's special tokens as single unsplittable ids after the learned
vocabulary (where the real checkpoints put them), and a chat template. Training on the built-in
corpus below takes a few milliseconds and is deterministic (the `tokenizers` BPE trainer breaks
frequency ties by pair order), so no file has to be downloaded or stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

# Short English text in the register of the benchmark prompts (image questions, answer options).
CORPUS = (
    "Which image shows the answer to the question? Look at every picture before you answer.",
    "The first image shows a dog on the grass. The second image shows a cat on a red sofa.",
    "The third image shows a man riding a bicycle down the street next to a bus.",
    "A woman is holding an umbrella in the rain while two children play in the park.",
    "There is a plate of food on the table with a fork, a knife and a cup of coffee.",
    "Answer with the letter of the correct option: A, B, C or D. Answer yes or no.",
    "Is there a person in this image? Is there a car? How many animals can you see?",
    "The train is waiting at the station and the people are walking to the platform.",
    "A small boat is on the water near the beach, and the sky is blue with white clouds.",
    "The kitchen has a white refrigerator, an oven, a sink and a window over the counter.",
    "Two horses are standing in a field behind a wooden fence on a sunny afternoon.",
    "The player hits the ball with a tennis racket while the crowd is watching the game.",
    "Read the caption, find the matching picture, and explain which detail gave it away.",
    "You are a helpful assistant. The user asks about the images and you answer briefly.",
    "A giraffe and an elephant walk past a tree; a bird sits on the branch above them.",
    "The computer on the desk shows a keyboard, a mouse and a phone beside a lamp.",
    "Question: what color is the bus in the image? Options: red, blue, green, yellow.",
    "This is a picture of a city at night with bright lights, tall buildings and cars.",
    "The user asks the assistant a question about the pictures, and the assistant answers it.",
    "A brown bear is catching a fish in the river while the mountains rise in the distance.",
    "Several people are sitting at a long table in a restaurant, talking and eating dinner.",
    "A young boy throws a frisbee to his dog on the beach as the sun sets over the ocean.",
    "The airplane is parked on the runway, and workers are loading bags into the cargo hold.",
    "A bowl of fruit with apples, bananas and oranges stands on the kitchen counter.",
    "The skier is going down the snowy mountain in a bright orange jacket and a helmet.",
    "Some sheep are grazing on a green hill under a cloudy sky near an old stone house.",
    "A laptop, a notebook and a pencil are lying on the wooden desk next to the window.",
    "The motorcycle is parked on the side of the road in front of a small yellow shop.",
    "Find the image that matches the description and answer with its number: first, second or third.",
    "The man in the blue shirt is standing next to the woman with the black handbag.",
    "Three zebras are drinking water at the edge of a lake while a bird flies over them.",
    "A pizza with cheese and tomatoes is cut into slices on a round plate beside a glass.",
    "The clock on the tower shows the time, and the street below is full of people walking.",
    "Describe what you see in each image, then tell me which one contains the traffic light.",
)


def train_bpe_tokenizer(
    special_tokens: Sequence[str],
    *,
    chat_template: str,
    num_merges: int = 400,
    bos_token: str | None = None,
    add_bos: bool = False,
    add_eos: bool = False,
    **special_token_attributes: str | dict[str, str],
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `CORPUS` and wrap it for transformers.

    The learned vocabulary (256 byte symbols plus up to `num_merges` merges; fewer if the corpus
    runs out of pairs seen twice) takes ids ``0 .. V-1`` and `special_tokens` follow in the given
    order, ids ``V, V+1, ...``; each is an added special token, never split or merged with
    neighbours. Pre-tokenisation, decoding and offsets follow the GPT-2/Qwen2 byte-level scheme, so
    ``return_offsets_mapping=True`` gives half-open character spans of the input string (special
    tokens included). Deterministic: same arguments -> identical vocabulary, merges and ids.

    Args:
        special_tokens: every special token of the architecture, in id order.
        chat_template: Jinja chat template stored on the tokenizer.
        num_merges: BPE merges to learn.
        bos_token: the beginning-of-sequence token (must be in `special_tokens`).
        add_bos: prepend `bos_token` to every encoded text, as Gemma and Mistral tokenizers do.
        add_eos: append the `eos_token` of `special_token_attributes` to every encoded text, as the
            CLIP and SigLIP text tokenizers do (their text towers pool at that token).
        **special_token_attributes: other named tokens (`eos_token`, `pad_token`, `unk_token`) or
            `extra_special_tokens={name: token}` (e.g. InternVL's `context_image_token`), which
            transformers exposes as tokenizer attributes that processors read.

    Returns:
        A `PreTrainedTokenizerFast` with vocabulary size ``V + len(special_tokens)``.

    Raises:
        ValueError: if a named token is not among `special_tokens`.
    """
    named_tokens = [bos_token] if bos_token else []
    for value in special_token_attributes.values():
        named_tokens.extend(value.values() if isinstance(value, dict) else [value])
    missing = [token for token in named_tokens if token not in special_tokens]
    if missing:
        raise ValueError(f"named tokens {missing} are not in special_tokens {list(special_tokens)}")

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=256 + num_merges,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(CORPUS, trainer=trainer)
    backend.add_special_tokens(list(special_tokens))
    byte_level = processors.ByteLevel(trim_offsets=False)
    before = [bos_token] if add_bos else []
    after = [special_token_attributes["eos_token"]] if add_eos else []
    if before or after:
        marks = [(token, backend.token_to_id(token)) for token in before + after]
        wrap = processors.TemplateProcessing(
            single=" ".join(before + ["$A"] + after), pair=" ".join(before + ["$A", "$B"] + after), special_tokens=marks
        )
        backend.post_processor = processors.Sequence([byte_level, wrap])
    else:
        backend.post_processor = byte_level
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos_token,
        chat_template=chat_template,
        **special_token_attributes,
    )


def llama_style_tokenizer(special_tokens: Sequence[str], chat_template: str) -> PreTrainedTokenizerFast:
    """`train_bpe_tokenizer` with the named tokens of Llama and Mistral tokenizers (LLaVA-1.5,
    LLaVA-NeXT, Pixtral, Mistral 3): ``<s>`` added in front of every text, ``</s>``, ``<unk>``,
    ``<pad>``; `special_tokens` must hold all four."""
    return train_bpe_tokenizer(
        special_tokens,
        chat_template=chat_template,
        bos_token="<s>",
        add_bos=True,
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
