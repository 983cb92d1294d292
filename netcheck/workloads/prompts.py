"""Seeded generator of natural-looking English prompts (canaries and decoys alike).

Canaries (prompts whose answers were computed on trusted hardware) and decoys (fresh
prompts nobody knows the answer to) both come from :class:`PromptGenerator`, so a
node cannot tell them apart by form, length or vocabulary. Output is a pure function
of the seed: ``random.Random`` seeded with SHA-256 of a domain-separated seed, and
fixed templates and word lists (changing them changes every prompt: bump
``SCHEME`` if you do).
"""

from __future__ import annotations

import random

from netcheck.workloads.seeding import seed_int

SCHEME = b"netcheck-prompts-v1"


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
    """Deterministic stream of English-like prompts.

    Args:
        seed: any int or bytes; the stream is a pure function of it.
        min_chars: shortest prompt in characters (>= 1).
        max_chars: longest prompt in characters (>= min_chars, >= 16).

    Raises:
        ValueError: bad bounds. TypeError: seed neither int nor bytes.
    """

    def __init__(self, seed: int | bytes, *, min_chars: int = 24, max_chars: int = 120) -> None:
        if min_chars < 1 or max_chars < max(min_chars, 16):
            raise ValueError(
                f"need 1 <= min_chars <= max_chars and max_chars >= 16, got "
                f"min_chars={min_chars}, max_chars={max_chars}"
            )
        self._rng = random.Random(seed_int(SCHEME, seed))
        self.min_chars = min_chars
        self.max_chars = max_chars

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
        """Cut ``text`` to at most ``max_chars`` at a word boundary."""
        if len(text) <= self.max_chars:
            return text
        cut = text[: self.max_chars + 1].rsplit(" ", 1)[0].rstrip(",;:")
        if self.min_chars <= len(cut) <= self.max_chars:
            return cut
        cut = text[: self.max_chars]  # no usable word boundary: cut mid-word
        return cut[:-1] + "." if cut.endswith(" ") else cut

    def prompt(self) -> str:
        """One prompt of ``min_chars`` to ``max_chars`` characters (ASCII)."""
        r = self._rng
        target = r.randint(self.min_chars, self.max_chars)
        text = self._fit(self._sentence())
        while len(text) < target:
            if text[-1] not in ".?!" and len(text) >= self.min_chars:
                break  # an open continuation ("... and") stays last
            for _ in range(4):
                extra = r.choice(CLAUSES) if r.random() < 0.6 else self._sentence()
                if len(text) + 1 + len(extra) <= self.max_chars:
                    text = f"{text} {extra}"
                    break
            else:
                if len(text) >= self.min_chars:
                    break
                text = f"{text} {extra}"
                if len(text) > self.max_chars:
                    text = self._fit(text)
                    break
        return text

    def prompts(self, n: int) -> list[str]:
        """The next ``n`` prompts (``n >= 0``)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return [self.prompt() for _ in range(n)]
