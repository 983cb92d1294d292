"""Seeded generator of natural-looking English prompts (canaries and decoys alike).

Canaries (prompts whose answers were computed on trusted hardware) and decoys (fresh
prompts nobody knows the answer to) both come from :class:`PromptGenerator`, so a
node cannot tell them apart by form, length or vocabulary. Output is a pure function
of the seed and fixed templates and word lists (changing them changes every prompt:
bump ``SCHEME`` if you do).

Scheme v2 (docs/workloads.md, "Prompt space"): the v1 stream drew ~570,000 distinct
short prompts with a heavy head, so an answer table of 315,000 prompts (made once, on
one GPU) covered 44% of all later decoys *and canaries*: a node could skip 44% of every
batch and one card could serve almost two identities. Every v2 prompt therefore starts
with a reference of 12 random base-32 characters (60 bits): no table covers a
measurable share of them. And each prompt is drawn with its own Mersenne Twister,
seeded from a keyed BLAKE2b of the stream's secret seed and the prompt's index, so the
prompts a node sees reveal nothing about the rest of the stream (a single Mersenne
Twister is predictable from ~20,000 of its output bits; a node could then tell the
stream's next decoys from the canaries planted among them).
"""

from __future__ import annotations

import hashlib
import random

from netcheck.workloads.seeding import seed_int

SCHEME = b"netcheck-prompts-v2"
#: Alphabet of the reference (Crockford base 32: no I, L, O, U).
REF_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
REF_CHARS = 12  #: 60 bits
REF_PREFIX_CHARS = len("Ref : ") + REF_CHARS
#: Shortest allowed ``max_chars``: the reference and 16 characters of text.
MIN_MAX_CHARS = REF_PREFIX_CHARS + 16


def _words(text: str) -> tuple[str, ...]:
    """Split a ``|``-separated word list."""
    return tuple(w.strip() for w in text.split("|"))


NAMES = _words(
    "Alice | Bruno | Chen | Dana | Elif | Farid | Greta | Hiro | Ines | Jonas | Kofi | Lena | "
    "Mateo | Nadia | Oskar | Priya | Quinn | Rosa | Sami | Tomas | Uma | Viktor | Wen | Yara "
    "| Zoe"
)
PEOPLE = _words(
    "my landlord | a new colleague | the school principal | my neighbour | a customer | the "
    "city council | an old friend | my grandmother | the hiring manager | a first-year "
    "student | the project team | a travel agent | the night shift | a volunteer group | my "
    "doctor | the book club | a small business owner"
)
TOPICS = _words(
    "the weather | a late delivery | the weekend schedule | a broken heater | the quarterly "
    "budget | a lost umbrella | the new parking rules | a garden party | the library hours | "
    "a noisy printer | the train strike | a birthday surprise | the annual report | a leaking "
    "roof | the office move | a cancelled flight | the recycling plan | a charity run | the "
    "software update | a missing invoice"
)
SUBJECTS = _words(
    "the sky looks blue | bread goes stale | ice floats on water | cats purr | leaves change "
    "colour in autumn | bridges need expansion joints | the moon has phases | coffee keeps "
    "people awake | tides rise and fall | metal feels cold to the touch | onions make people "
    "cry | birds migrate south | planes leave contrails | old books smell sweet | deserts get "
    "cold at night | rivers bend over time | batteries lose charge | bees build hexagons | "
    "rust forms on iron | thunder follows lightning"
)
OBJECTS = _words(
    "a bicycle | a teapot | an umbrella | a wooden chair | a paper map | a lighthouse | a "
    "pocket watch | a sourdough loaf | a violin | a compass | a greenhouse | a canoe | a "
    "chess set | a typewriter | a kite | a lantern | a rain barrel"
)
PLACES = _words(
    "a quiet harbour | the mountain village | a crowded market | the old station | a small "
    "island | the city park | a desert town | the river bank | a busy airport | the school "
    "yard | an empty museum | a forest cabin | the night bus"
)
ADJECTIVES = _words(
    "calm | cheerful | formal | short | friendly | polite | clear | simple | careful | honest "
    "| warm | brief | practical | gentle | plain"
)
AUDIENCES = _words(
    "a ten-year-old | a busy manager | a new employee | a tourist | my parents | a science "
    "class | someone who has never cooked | a retired engineer"
)
OPENINGS = _words(
    "Once upon a time | Late last night | Every morning | On the first day of spring | Long "
    "before the war | When the rain stopped | Nobody expected that | In the end | At the edge "
    "of town | Just after sunrise"
)
CLAUSES = _words(
    "Keep it under five sentences. | Use plain words. | Be specific. | Mention one concrete "
    "example. | Avoid jargon. | End with a question. | Add a short title. | Use a friendly "
    "tone. | Include a date. | Make it sound calm. | Do not use bullet points. | Keep it "
    "polite. | Give two reasons. | Start with a greeting. | Finish with a thank-you. | Write "
    "it as a list."
)

TEMPLATES = (
    "Write a short note to {person} about {topic}.",
    "Write a {adj} email to {name} about {topic}.",
    "Explain why {subject}.",
    "Explain to {audience} why {subject}.",
    "Describe {object} in three sentences.",
    "Describe {place} at dawn.",
    "Continue the story: {opening}, {name} found {object} near {place}.",
    "{opening}, {name} walked into {place} and",
    "Give three tips for dealing with {topic}.",
    "Summarize the main points about {topic} for {person}.",
    "What is the best way to explain {topic} to {audience}?",
    "Why do people say that {subject}?",
    "How would you repair {object}?",
    "List five things you might see in {place}.",
    "Write a {adj} reply to {name}, who asked about {topic}.",
    "Tell me a short story about {object} and {name}.",
    "Draft a {adj} announcement about {topic}.",
    "Is it true that {subject}? Explain briefly.",
    "Write a poem about {place} and {object}.",
    "Compare {object} with {object2} for {audience}.",
    "Translate into simple English: {name} is worried about {topic}.",
    "Write a diary entry from {place} about {topic}.",
    "Plan a day trip to {place} for {audience}.",
    "Ask {person} for help with {topic}.",
)


class PromptGenerator:
    """Deterministic stream of English-like prompts, each starting with a random
    60-bit reference (``Ref 7kq2x9fm3bd8: Describe a teapot in three sentences.``).

    Args:
        seed: any int or bytes; the stream is a pure function of it.
        min_chars: shortest prompt in characters (>= 1).
        max_chars: longest prompt in characters (>= min_chars, >= ``MIN_MAX_CHARS``).

    Raises:
        ValueError: bad bounds. TypeError: seed neither int nor bytes.
    """

    def __init__(self, seed: int | bytes, *, min_chars: int = 24, max_chars: int = 120) -> None:
        if min_chars < 1 or max_chars < max(min_chars, MIN_MAX_CHARS):
            raise ValueError(
                f"need 1 <= min_chars <= max_chars and max_chars >= {MIN_MAX_CHARS}, got "
                f"min_chars={min_chars}, max_chars={max_chars}"
            )
        self._key = seed_int(SCHEME, seed).to_bytes(32, "big")
        self._index = 0
        self.min_chars = min_chars
        self.max_chars = max_chars
        # bounds of the text after the reference
        self._lo = max(1, min_chars - REF_PREFIX_CHARS)
        self._hi = max_chars - REF_PREFIX_CHARS
        self._rng = random.Random(0)

    def _next_rng(self) -> str:
        """Reseed ``self._rng`` for the next prompt; return that prompt's reference."""
        digest = hashlib.blake2b(
            self._index.to_bytes(8, "big"), key=self._key, digest_size=24
        ).digest()
        self._index += 1
        self._rng.seed(int.from_bytes(digest[:16], "big"))
        bits = int.from_bytes(digest[16:], "big") >> 4  # 60 bits
        return "".join(REF_ALPHABET[(bits >> (5 * i)) & 31] for i in range(REF_CHARS))

    def _sentence(self) -> str:
        r = self._rng
        objects = r.sample(OBJECTS, 2)
        return r.choice(TEMPLATES).format(
            person=r.choice(PEOPLE),
            name=r.choice(NAMES),
            topic=r.choice(TOPICS),
            subject=r.choice(SUBJECTS),
            object=objects[0],
            object2=objects[1],
            place=r.choice(PLACES),
            adj=r.choice(ADJECTIVES),
            audience=r.choice(AUDIENCES),
            opening=r.choice(OPENINGS),
        )

    def _fit(self, text: str) -> str:
        """Cut ``text`` to at most the text bound at a word boundary."""
        lo, hi = self._lo, self._hi
        if len(text) <= hi:
            return text
        cut = text[: hi + 1].rsplit(" ", 1)[0].rstrip(",;:")
        if lo <= len(cut) <= hi:
            return cut
        cut = text[:hi]  # no usable word boundary: cut mid-word
        return cut[:-1] + "." if cut.endswith(" ") else cut

    def prompt(self) -> str:
        """One prompt of ``min_chars`` to ``max_chars`` characters (ASCII)."""
        ref = self._next_rng()
        r = self._rng
        lo, hi = self._lo, self._hi
        target = r.randint(lo, hi)
        text = self._fit(self._sentence())
        while len(text) < target:
            if text[-1] not in ".?!" and len(text) >= lo:
                break  # an open continuation ("... and") stays last
            for _ in range(4):
                extra = r.choice(CLAUSES) if r.random() < 0.6 else self._sentence()
                if len(text) + 1 + len(extra) <= hi:
                    text = f"{text} {extra}"
                    break
            else:
                if len(text) >= lo:
                    break
                text = f"{text} {extra}"
                if len(text) > hi:
                    text = self._fit(text)
                    break
        return f"Ref {ref}: {text}"

    def prompts(self, n: int) -> list[str]:
        """The next ``n`` prompts (``n >= 0``)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return [self.prompt() for _ in range(n)]
