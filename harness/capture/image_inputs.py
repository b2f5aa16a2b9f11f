"""The protocol's per-image inputs: one family's adapter row -> image transform + processor call.

Paper App. A fixes the per-image input budget at 448 x 448 px (Qwen: ``min_pixels = max_pixels =
448*448``, aspect ratio kept; InternVL: one 448 x 448 BICUBIC tile); App. J.1 processes images "at
a fixed size per model so that candidate images contribute equal numbers of visual tokens"
(LLaVA-OneVision: 384-px single tile; Pixtral: 448 px). Each family's setting is one
`adapters.ImageInputs` in its `adapters.ModelAdapter` row; `resolve_image_inputs` turns it into
what `inputs.encode_requests` applies, and `visual_token_counts` / `token_count_summary` report
the visual tokens each image really got.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from PIL import Image

from icir_common import UserInputError

from .adapters import ImageSlot, ModelAdapter

RESAMPLE = Image.Resampling.BICUBIC


@dataclasses.dataclass(frozen=True)
class ImageCall:
    """What `inputs.encode_requests` applies to every image of a batch (see `resolve_image_inputs`).

    Attributes:
        side: the per-image side in pixels this call is made for (None: a derived family whose
            processor's own input is not one square).
        transform: PIL image -> PIL image, applied to every image before the processor (a square
            ``side x side`` BICUBIC resize, or the identity).
        call_kwargs: ``images_kwargs`` of the processor call (a fresh copy per call).
        lone_images: pass the images as one flat list (every image a prompt's only image).
        record: JSON-able description for the run's protocol record: ``family``, ``side``,
            ``side_source`` (``"protocol"``, ``"processor"`` or ``"user"``), ``square_resize``
            (``"BICUBIC"`` or None), ``call_kwargs``, ``lone_images``, ``source``.
    """

    side: int | None
    transform: Callable[[Image.Image], Image.Image]
    call_kwargs: Mapping[str, Any]
    lone_images: bool
    record: dict[str, Any]

    def images_kwargs(self) -> dict[str, Any]:
        """A fresh copy of `call_kwargs` (processors may modify what they are given)."""
        return _fill(self.call_kwargs, self.side)


def square_resize(image: Image.Image, side: int) -> Image.Image:
    """`image` as RGB, resized to ``side x side`` px with PIL BICUBIC (App. A).

    Non-RGB images are converted as the processors' ``do_convert_rgb`` does (transparency over
    white), so the resize sees the pixels the processor would.

    Raises:
        UserInputError: `image` is not a PIL image.
    """
    if not isinstance(image, Image.Image):
        raise UserInputError(f"the per-image square resize needs PIL images, got {type(image).__name__}")
    if image.mode != "RGB":
        from transformers.image_transforms import convert_to_rgb

        image = convert_to_rgb(image)
    if image.size == (side, side):
        return image
    return image.resize((side, side), RESAMPLE)


def _fill(value: Any, side: int) -> Any:
    if isinstance(value, ImageSlot):
        return value.value(side)
    if isinstance(value, Mapping):
        return {key: _fill(item, side) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_fill(item, side) for item in value]
    return value


def processor_side(processor) -> int:
    """The image processor's own square input side in px (its ``size``: height == width, or a
    lone ``shortest_edge``). A ``shortest_edge`` beside a ``longest_edge`` is no side: Qwen2-VL-style
    processors keep pixel budgets there (min/max pixels), others bound both edges of a non-square image.

    Raises:
        UserInputError: the processor has no image processor, or its ``size`` is no square.
    """
    image_processor = getattr(processor, "image_processor", None)
    size = getattr(image_processor, "size", None)
    if image_processor is None or size is None:
        raise UserInputError(f"{type(processor).__name__} has no image processor with a size")
    get = size.get if isinstance(size, Mapping) else lambda key: getattr(size, key, None)
    height, width, shortest, longest = get("height"), get("width"), get("shortest_edge"), get("longest_edge")
    if height and width and height == width:
        return int(height)
    if shortest and not (height or width or longest):
        return int(shortest)
    raise UserInputError(
        f"{type(image_processor).__name__} size {dict(size) if isinstance(size, Mapping) else size} is not "
        f"one square input; its adapter row must give the image side"
    )


def _user_side(side: Any) -> int:
    if isinstance(side, bool):
        raise UserInputError(f"the image side must be a positive number of pixels, got {side!r}")
    try:
        value = operator.index(side)
    except TypeError:
        raise UserInputError(f"the image side must be a positive number of pixels, got {side!r}") from None
    if value <= 0:
        raise UserInputError(f"the image side must be a positive number of pixels, got {value}")
    return value


def resolve_image_inputs(processor, adapter: ModelAdapter, side: int | None = None) -> ImageCall:
    """The image transform and processor-call arguments of the protocol for `adapter`'s family.

    Mirrors paper App. A (448 x 448 px per image: Qwen ``min_pixels = max_pixels = side*side``
    with the aspect ratio kept, InternVL one 448 x 448 BICUBIC tile) and App. J.1 (equal visual
    tokens per image: LLaVA-OneVision a 384-px single tile, Pixtral 448 px), as the row's
    `adapters.ImageInputs` declares it (Gemma 3: its fixed 896-px input, no pan-and-scan).

    Args:
        processor: the model's processor (``AutoProcessor``); its image processor's own ``size``
            gives the side of rows that take the vision tower's tile (InternVL, LLaVA-OneVision,
            Gemma 3).
        adapter: the model's row (`adapters.resolve_adapter`).
        side: per-image side in pixels, or None for the protocol's default. Only rows with
            ``user_side`` take another side (Qwen: a pixel budget of side x side; Pixtral: a
            side x side input); the others accept only their own tile side.

    Returns:
        An `ImageCall`: ``transform`` (PIL -> PIL, square ``side x side`` BICUBIC or identity),
        ``call_kwargs`` (``images_kwargs`` of the processor call, e.g. Qwen at 448 px
        ``{"size": {"shortest_edge": 200704, "longest_edge": 200704}}``), ``lone_images`` and
        the JSON-able ``record``.

    Raises:
        UserInputError: `side` is not a positive integer; `side` differs from the tile side of a
            row whose side is fixed; the processor's own size is no square where the row needs it.
    """
    spec = adapter.images
    requested = None if side is None else _user_side(side)
    if spec.derived:
        return _derived_inputs(processor, adapter, requested)
    fixed = None if spec.side is not None else processor_side(processor)
    if requested is not None and not spec.user_side:
        own = fixed if fixed is not None else spec.side
        if requested != own:
            raise UserInputError(
                f"{adapter.name} images are fixed at {own}x{own} px (the vision tower's tile); "
                f"another side ({requested}) cannot be set for this model: leave it unset"
            )
    if requested is not None and spec.user_side:
        resolved, source = requested, "user"
    elif fixed is not None:
        resolved, source = fixed, "processor"
    else:
        resolved, source = int(spec.side), "protocol"
    if spec.square:

        def transform(image: Image.Image, _side: int = resolved) -> Image.Image:
            return square_resize(image, _side)

    else:

        def transform(image: Image.Image) -> Image.Image:
            return image

    call_kwargs = _fill(spec.call_kwargs, resolved)
    record = {
        "family": adapter.name,
        "side": resolved,
        "side_source": source,
        "square_resize": "BICUBIC" if spec.square else None,
        "call_kwargs": _fill(spec.call_kwargs, resolved),
        "lone_images": spec.lone_images,
        "source": spec.source,
    }
    return ImageCall(resolved, transform, call_kwargs, spec.lone_images, record)


def _derived_inputs(processor, adapter: ModelAdapter, requested: int | None) -> ImageCall:
    """A family outside the table (`adapters.derive_adapter`): the processor's own input, each of
    `adapters.TILING_SWITCHES` its image processor has turned off, images as given.

    Raises:
        UserInputError: a side was requested (the family has no protocol side to change).
    """
    from .adapters import TILING_SWITCHES

    if requested is not None:
        raise UserInputError(f"{adapter.name} is outside the icir-heads table: its images take the processor's own "
                             f"input, and no other side ({requested}) can be set; leave image_budget unset")
    image_processor = getattr(processor, "image_processor", None)
    call_kwargs = {name: False for name in TILING_SWITCHES if getattr(image_processor, name, None) is not None}
    try:
        side = processor_side(processor)
    except UserInputError:
        side = None
    record = {"family": adapter.name, "side": side, "side_source": "processor", "square_resize": None,
              "call_kwargs": dict(call_kwargs), "lone_images": False, "derived": True, "source": adapter.images.source,
              "conformance_tested": adapter.conformance_tested}
    return ImageCall(side, lambda image: image, call_kwargs, False, record)


def visual_token_counts(layouts: Sequence) -> list[list[int]]:
    """Visual tokens of each image of each sample: ``counts[sample][image]``.

    A visual token is a position holding the model's image token (`SampleLayout.image_of_token`),
    i.e. one the model fills with a projected visual embedding: LLaVA-OneVision's newline
    embeddings count, Pixtral's ``[IMG_BREAK]`` / ``[IMG_END]`` and start/end markers do not.

    Args:
        layouts: `inputs.SampleLayout` per sample (from `inputs.encode_requests`).
    """
    return [
        [int((layout.image_of_token == index).sum()) for index in range(len(layout.image_spans))]
        for layout in layouts
    ]


def token_count_summary(counts: Iterable[int] | Iterable[Iterable[int]]) -> dict[str, Any]:
    """``{"images", "min", "mean", "max"}`` of per-image visual-token counts (flat or per sample).

    ``min``/``mean``/``max`` are None when there are no images; ``mean`` is a float.
    """
    flat = [int(n) for item in counts for n in (item if isinstance(item, Iterable) else (item,))]
    if not flat:
        return {"images": 0, "min": None, "mean": None, "max": None}
    return {"images": len(flat), "min": min(flat), "mean": sum(flat) / len(flat), "max": max(flat)}
