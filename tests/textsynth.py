"""Synthetic web documents for the engine's and tokenizer's tests (test helper)."""

import math
import random

_SYLLABLES = (
    "al", "be", "ca", "do", "er", "fi", "go", "ha", "in", "jo", "ka", "lu", "me", "no", "or",
    "pa", "qu", "ri", "st", "th", "un", "ve", "wi", "xe", "yo", "ze", "an", "en", "on", "ing",
)  # fmt: skip


def synthetic_corpus(
    n: int, *, seed: int = 0, median_words: float = 200.0, sigma: float = 1.0,
    max_words: int = 12000, tail_fraction: float = 0.01,
) -> tuple[list[str], list[str]]:  # fmt: skip
    """``(texts, urls)`` of ``n`` synthetic web documents: lognormal lengths in words, a
    ``tail_fraction`` past the truncation length as in real crawls, Zipf pseudo-words with
    punctuation and capitals (realistic sub-word splits); some urls and texts empty."""
    rng = random.Random(seed)  # reproducible test data, not security
    vocab = [
        "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
        for _ in range(3000)
    ]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]  # Zipf-like frequencies
    texts: list[str] = []
    urls: list[str] = []
    for index in range(n):
        if rng.random() < tail_fraction:
            length = max_words
        else:
            length = min(max_words, max(1, int(median_words * math.exp(rng.gauss(0.0, sigma)))))
        words = rng.choices(vocab, weights=weights, k=length)
        for position in range(0, length, 17):
            words[position] = words[position].capitalize()
        for position in range(11, length, 13):
            words[position] += rng.choice((".", ",", "!", "?", ";", ":", ". \n"))
        text = " ".join(words) if index % 97 else ""
        texts.append(text)
        host = rng.choice(vocab) + rng.choice((".com", ".org", ".net", ".de"))
        path = "/".join(rng.choice(vocab) for _ in range(rng.randint(0, 4)))
        urls.append("" if index % 23 == 0 else f"https://www.{host}/{path}")
    return texts, urls
