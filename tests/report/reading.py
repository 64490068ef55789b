"""What a test reads back from a report: its elements, as html.parser sees them."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]


@dataclass
class Parsed:
    elements: list[Element] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    styles: list[str] = field(default_factory=list)

    def all(self, tag: str) -> list[Element]:
        return [e for e in self.elements if e.tag == tag]


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = Parsed()
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.elements.append(Element(tag, {k: v or "" for k, v in attrs}))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.out.elements.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        (self.out.styles if self._in_style else self.out.text).append(data)


def parse(html_text: str) -> Parsed:
    reader = _Reader()
    reader.feed(html_text)
    reader.close()
    return reader.out
