"""A collection's original OME-XML (bioformats2raw `OME/METADATA.ome.xml`) made the OME-XML of the file that holds it.

The original describes the acquisition (Image names and descriptions,
channel names and colours, instrument, objectives, dates, stage labels)
with `<MetadataOnly/>` pixels. The file's own OME-XML (`ome_xml.ome_xml`,
built from the level arrays) says what the file holds. The merge keeps the
original and takes from the file's document what must match the file:
- each stored image's `Pixels` gets the file's DimensionOrder, Type, sizes,
  byte order and TiffData (IFD, plane count, UUID); its physical sizes and
  time increment stay the original's where it has them;
- its Channels stay the original's when there are as many as the file
  holds, else the file's; Planes stay the original's that lie inside the
  file's sizes, else the file's;
- Images the file does not hold are dropped, with every `ImageRef` to them;
  the Images it holds are in the file's order, where the original's first
  Image was; an image the original has no Image for keeps the file's own
  (numbered after the original's); `BinaryOnly` (pixels in another file)
  is dropped.
Only a document of the 2016-06 schema is merged; any other (older
schemas, not XML, a DTD) gives None and the file keeps its own document.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from .ome_xml import NAMESPACE

_N = f"{{{NAMESPACE}}}"
# Pixels attributes that must describe the file's pixels: always the file's.
_STORED_ATTRIBUTES = {"ID", "DimensionOrder", "Type", "SizeX", "SizeY", "SizeZ", "SizeC", "SizeT", "BigEndian",
                      "Interleaved", "SignificantBits"}


def merged_ome_xml(original: bytes, stored: bytes, sources: Sequence[int]) -> bytes | None:
    """The original OME-XML rewritten to describe the file whose own OME-XML is `stored`: image k of the file
    is the original's Image `sources[k]` (past its last Image: none). None when the original cannot be used."""
    if b"<!DOCTYPE" in original[:4096] or b"<!ENTITY" in original:  # no entity expansion, ever
        return None
    try:
        root = ET.fromstring(original)
        ours = ET.fromstring(stored)
    except ET.ParseError:
        return None
    originals = root.findall(f"{_N}Image")
    file_images = ours.findall(f"{_N}Image")
    if root.tag != f"{_N}OME" or not originals or len(file_images) != len(sources) or any(
            source < 0 for source in sources):
        return None
    kept: list[ET.Element] = []
    for source, own in zip(sources, file_images, strict=True):
        if source >= len(originals):
            kept.append(_renumbered(own, len(originals) + len(kept)))
        elif _merge_pixels(originals[source], own):
            kept.append(originals[source])
        else:
            return None
    first = list(root).index(originals[0])
    for image in originals:
        root.remove(image)
    for offset, image in enumerate(kept):
        root.insert(first + offset, image)
    _drop_refs(root, {image.get("ID") for image in originals} - {image.get("ID") for image in kept})
    for binary_only in root.findall(f"{_N}BinaryOnly"):
        root.remove(binary_only)
    root.set("UUID", ours.get("UUID", ""))
    root.set("Creator", ours.get("Creator", "zarrfs"))
    ET.register_namespace("", NAMESPACE)
    return b'<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(root, encoding="utf-8", xml_declaration=False)


def _merge_pixels(image: ET.Element, own: ET.Element) -> bool:
    pixels, own_pixels = image.find(f"{_N}Pixels"), own.find(f"{_N}Pixels")
    if pixels is None or own_pixels is None:
        return False
    attributes = {k: v for k, v in pixels.attrib.items() if k not in _STORED_ATTRIBUTES}
    attributes.update((k, v) for k, v in own_pixels.attrib.items() if k in _STORED_ATTRIBUTES or k not in attributes)
    attributes["ID"] = pixels.get("ID") or own_pixels.get("ID") or ""
    sizes = {letter: int(own_pixels.get(f"Size{letter}", "1")) for letter in "ZCT"}
    channels = pixels.findall(f"{_N}Channel")
    if len(channels) != sizes["C"]:
        channels = own_pixels.findall(f"{_N}Channel")
        image_number = image.get("ID", "").rpartition(":")[2]
        for index, channel in enumerate(channels):  # IDs of the original Image's numbering, unique in the document
            channel.set("ID", f"Channel:{image_number}:{index}")
    planes = [plane for plane in pixels.findall(f"{_N}Plane") if _inside(plane, sizes)] \
        or own_pixels.findall(f"{_N}Plane")
    pixels.clear()
    pixels.attrib.update(attributes)
    pixels.extend([*channels, *own_pixels.findall(f"{_N}TiffData"), *planes])
    return True


def _renumbered(image: ET.Element, number: int) -> ET.Element:
    """The file's own Image, its IDs numbered `number` (past the original's Images: unique in the document)."""
    image.set("ID", f"Image:{number}")
    for pixels in image.iter(f"{_N}Pixels"):
        pixels.set("ID", f"Pixels:{number}")
        for index, channel in enumerate(pixels.findall(f"{_N}Channel")):
            channel.set("ID", f"Channel:{number}:{index}")
    return image


def _inside(plane: ET.Element, sizes: dict[str, int]) -> bool:
    try:
        return all(0 <= int(plane.get(f"The{letter}", "0")) < sizes[letter] for letter in "ZCT")
    except ValueError:
        return False


def _drop_refs(root: ET.Element, dropped: set[str | None]) -> None:
    """Remove every `ImageRef` to an Image no longer in the document (Datasets, WellSamples, ...)."""
    if not dropped:
        return
    for parent in root.iter():
        for child in list(parent):
            if child.tag == f"{_N}ImageRef" and child.get("ID") in dropped:
                parent.remove(child)
