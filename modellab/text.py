"""The long English text for perplexity, taken from Python's standard library.

``pydoc_data.topics`` holds the text of the Python documentation that ``help()``
shows. We use its "Special method names" section (Language Reference, section
3.3): continuous technical English, about 15K SmolLM2 tokens. Chapter 9 needs a text
longer than the model's context and appends the "Compound statements" section
(section 8), for about 27K tokens. It ships with every
Python install, so nothing is downloaded or stored in the book. Licence: the Python
documentation is distributed under the PSF License Agreement
(https://docs.python.org/3/license.html), which permits redistribution.
"""

from __future__ import annotations

import sys

TOPIC = "specialnames"
SOURCE = f"Python {sys.version_info.major}.{sys.version_info.minor} documentation, pydoc_data.topics['{TOPIC}']"
LICENSE = "PSF License Agreement (https://docs.python.org/3/license.html)"


LONGER_TOPICS = (TOPIC, "compound")


def long_text(topics: tuple[str, ...] = (TOPIC,)) -> str:
    """The sections ``topics`` of the documentation, one after the other."""
    from pydoc_data.topics import topics as sections

    return "\n\n".join(sections[t] for t in topics)


def long_text_ids(tokenizer, num_tokens: int | None = None, topics: tuple[str, ...] = (TOPIC,)):
    """The text's token ids as int64 (N,), the first ``num_tokens`` of them if given."""
    import torch

    ids = tokenizer(long_text(topics), return_tensors="pt").input_ids[0]
    if num_tokens is not None:
        if num_tokens > len(ids):
            raise ValueError(f"num_tokens must be at most {len(ids)}, got {num_tokens}")
        ids = ids[:num_tokens]
    return ids.to(torch.long)
