"""Which image an OME-Zarr label image belongs to.

A label image (`image-label`) may say so in `image-label.source.image`: a
path relative to the label image's group, usually `../../` (label images sit
in `IMAGE/labels/NAME`). Without it, the layout says it: the image group two
levels up whose `labels` group holds the label image. A source that is no
relative path inside the store, names no image group, or names another image
than the one whose `labels/` holds it is a problem: the label image is then
served without an image it belongs to, and the caller reports why.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from ..errors import ZarrfsError
from ..model.meta import GroupMeta
from .image import OmeImage, images_of_group

if TYPE_CHECKING:
    from ..hierarchy import Hierarchy


def labelled_image(hierarchy: Hierarchy, label: OmeImage) -> tuple[str | None, tuple[str, ...]]:
    """("/path" of the image `label` belongs to, or None; what is wrong with its `source`)."""
    holder = _holding_image(hierarchy, label.group_path)
    image_label = label.block.get("image-label")
    source = image_label.get("source") if isinstance(image_label, dict) else None
    if source is None:
        return holder, ()
    image = source.get("image") if isinstance(source, dict) else None
    if not isinstance(image, str) or not image or image.startswith("/") or "://" in image:
        return None, (f"image-label.source {source!r} has no relative 'image' path",)
    target = posixpath.normpath(posixpath.join(label.group_path, image))
    if target == ".." or target.startswith("../"):
        return None, (f"image-label.source.image {image!r} leaves the store",)
    target = "" if target == "." else target
    if not _is_image_group(hierarchy, target):
        return None, (f"image-label.source.image {image!r} names no image group (/{target})",)
    if holder is not None and holder != "/" + target:
        return None, (f"image-label.source.image {image!r} names /{target}, but the label image is in the "
                      f"labels of {holder}",)
    return "/" + target, ()


def _holding_image(hierarchy: Hierarchy, group_path: str) -> str | None:
    """"/IMAGE" when `group_path` is IMAGE/labels/NAME and IMAGE is an image group."""
    parts = group_path.split("/")
    if len(parts) < 2 or parts[-2] != "labels":
        return None
    image = "/".join(parts[:-2])
    return "/" + image if _is_image_group(hierarchy, image) else None


def _is_image_group(hierarchy: Hierarchy, path: str) -> bool:
    try:
        node = hierarchy.node(path)
    except ZarrfsError:
        return False
    return isinstance(node, GroupMeta) and bool(images_of_group(node))
