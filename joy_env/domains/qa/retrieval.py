"""Retrieval over the knowledge base: tokenizer and BM25."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

STOPWORDS = frozenset(
    "a an the of in on at to for is are was were be been by and or what which who whom whose how when where "
    "does do did i my me can could much many it its that this with as from there their they if name "
    "please tell you your we our us will would should any about after into s".split()
)
_TOKEN = re.compile(r"[a-z0-9]+")


def stem(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """Lowercase alphanumeric tokens without stopwords, with a light plural stemmer."""
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


class BM25:
    """Okapi BM25 over passages (title tokens count twice); ties break by passage order."""

    def __init__(self, passages: Sequence[dict[str, str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.lengths: list[int] = []
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for i, p in enumerate(passages):
            tokens = tokenize(p["title"]) * 2 + tokenize(p["text"])
            self.lengths.append(len(tokens))
            for tok, tf in Counter(tokens).items():
                self.postings.setdefault(tok, []).append((i, tf))
        n = len(self.lengths)
        self.avgdl = sum(self.lengths) / max(n, 1)
        self.idf = {t: math.log(1 + (n - len(ps) + 0.5) / (len(ps) + 0.5)) for t, ps in self.postings.items()}
        # each posting's score contribution, computed once: a search only adds arrays
        self.weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for tok, ps in self.postings.items():
            docs = np.array([d for d, _ in ps], dtype=np.int64)
            tfs = np.array([tf for _, tf in ps], dtype=np.float64)
            lengths = np.array([self.lengths[d] for d in docs], dtype=np.float64)
            weight = self.idf[tok] * tfs * (k1 + 1) / (tfs + k1 * (1 - b + b * lengths / self.avgdl))
            self.weights[tok] = (docs, weight)

    def search(self, query: str, top_k: int) -> list[int]:
        scores = np.zeros(len(self.lengths))
        hit = False
        for tok in dict.fromkeys(tokenize(query)):
            posting = self.weights.get(tok)
            if posting is not None:
                scores[posting[0]] += posting[1]  # a token lists each passage once
                hit = True
        if not hit:
            return []
        candidates = np.flatnonzero(scores > 0)
        order = np.lexsort((candidates, -scores[candidates]))  # best score first, ties by passage order
        return candidates[order[:top_k]].tolist()
